"""The run's filtering proxy: proxy.py (a kept HTTP proxy library) with one plugin of ours
that lets a request through only when its host is on the run's allowlist (ruizn.domains).

Run by DomainProxy (domainproxy.py) as `python -I -c "...import main..." SOCKET PATTERN...`
(so proxy.py's processes find the plugin by this module's name), below ruizn's reaper. It
listens on the Unix socket SOCKET, outside the sandbox, so it resolves names and connects
upstream from ruizn's own network; the sandbox reaches it through a forwarder in the run's
network namespace.

- a CONNECT (HTTPS and any other tunnel) is judged by its target host, a plain HTTP request
  by the host of its URL, the one proxy.py connects to; no TLS is intercepted;
- a host that no pattern lets through, an IP address that is not listed itself, and a name
  a `*.` pattern lets through that resolves to an address that is not global (loopback, a
  private network, link-local) are answered `403 Forbidden`, with a line saying why;
- the name is resolved here once, and the connection made to that address (no second
  lookup that could answer differently);
- every plain HTTP request on a connection, the later ones too, must name that host in its
  URL and its Host header (proxy.py sends later requests to the upstream already open).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from typing import Any

from proxy import Proxy, sleep_loop
from proxy.http.exception import HttpRequestRejected
from proxy.http.parser import HttpParser
from proxy.http.proxy import HttpProxyBasePlugin

from ruizn.domains import REFUSED, allowed

__all__ = ["AllowList", "main"]

# The allowlist, for the plugin in proxy.py's acceptor processes (inherited).
_ENV = "RUIZN_PROXY_ALLOW"


class AllowList(HttpProxyBasePlugin):
    """Refuses every request whose host the allowlist does not let through."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._patterns = tuple(os.environ.get(_ENV, "").split())
        self._address: str | None = None
        self._host = ""

    def before_upstream_connection(self, request: HttpParser) -> HttpParser | None:
        host = (request.host or b"").decode("ascii", "replace")
        port = int(request.port or 0)
        pattern = allowed(host, self._patterns)
        if pattern is None:
            raise _refused(f"{host} is not on the list")
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise _refused(f"{host} does not resolve") from None
        addresses = [str(info[4][0]) for info in found]
        if pattern.startswith("*."):  # a name below a wildcard reaches only public addresses
            addresses = [a for a in addresses if ipaddress.ip_address(a).is_global]
            if not addresses:
                raise _refused(
                    f"{host} resolves to an address on this machine or a private network,"
                    " which only a name listed exactly reaches"
                )
        self._address = addresses[0] if addresses else None
        self._host = _bare(host)
        return request

    def handle_client_request(self, request: HttpParser) -> HttpParser | None:
        """Every plain HTTP request, the first and each later one on the same connection
        (which proxy.py sends to the upstream already connected): its URL's host and its
        Host header must name the host the connection was let through for. (A Host naming
        another site, sent to a shared server or a CDN, would reach that site.)"""
        if request.is_https_tunnel:
            return request
        named = [request.host or b""]
        if request.has_header(b"host"):
            named.append(request.header(b"host"))
        for raw in named:
            name = _bare(raw.decode("ascii", "replace"))
            if raw and name != self._host:
                raise _refused(f"{name} is not {self._host}, the host this connection is for")
        return request

    def resolve_dns(self, host: str, port: int) -> tuple[str | None, None]:
        return self._address, None


def _bare(host: str) -> str:
    """A host as a request names it, without its port, case or trailing dot."""
    host = host.strip().lower()
    if host.startswith("["):
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def _refused(why: str) -> HttpRequestRejected:
    return HttpRequestRejected(
        status_code=403,
        reason=b"Forbidden",
        headers={b"Content-Type": b"text/plain; charset=utf-8"},
        body=f"{REFUSED}{why}\n".encode(),
    )


def main(argv: list[str]) -> int:
    path, patterns = argv[1], argv[2:]
    os.environ[_ENV] = " ".join(patterns)
    flags = ["--unix-socket-path", path, "--num-acceptors", "1", "--num-workers", "1"]
    flags += ["--log-level", "ERROR"]  # (a refusal is a warning: a command could flood it)
    with Proxy(flags, plugins=[AllowList]) as running:
        sleep_loop(running)
    return 0
