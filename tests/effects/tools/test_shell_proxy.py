"""The domain allowlist (`--shell-allow-domain`), in real bubblewrap: a listed name reaches a
server on the host through the run's proxy; any other name, an unlisted IP address and a
connection that skips the proxy do not. (The run refusing the shell when the proxy's
self-test fails is in tests/cli/test_shell_proxy_cli.py.)"""

from __future__ import annotations

import os
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest

from ruizn.domains import REFUSED, allowed, pattern_of
from ruizn.effects.tools.bash import ShellJobs, shell_config, shell_tools
from ruizn.effects.tools.bwrap import SandboxUnavailable, find_bwrap, shell_environment

MARK = "served by the host server"
# Run inside the sandbox: each request on a line of its own, what came back.
_FETCH = r"""
import os, socket, sys, urllib.request as u, urllib.error as e
port, MARK = int(sys.argv[1]), sys.argv[2]
proxies = {"http": os.environ["HTTP_PROXY"], "https": os.environ["HTTPS_PROXY"]}
via = u.build_opener(u.ProxyHandler(proxies))
def show(name, url, opener=via):
    try:
        print(name, opener.open(url, timeout=5).read().decode())
    except e.HTTPError as err:
        print(name, err.code, err.read().decode().strip())
    except Exception as err:
        print(name, "failed:", err)
show("listed", "http://localhost:%d/" % port)
show("unlisted", "http://example.com/")
show("address", "http://127.0.0.1:%d/" % port)
show("tunnel", "https://example.com/")
def answer(conn):
    # One whole response: a recv may end anywhere in it (its head alone, under load).
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        sizes = [l.split(b":", 1)[1] for l in head.split(b"\r\n")
                 if l.lower().startswith(b"content-length:")]
        while len(body) < (int(sizes[0]) if sizes else 1 << 30):
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
    except socket.timeout:
        return data
    return head + b"\r\n\r\n" + body
def raw(*requests):
    conn = socket.create_connection(("127.0.0.1", 3128), timeout=5)
    said = b""
    for request in requests:  # one after the other, on one connection
        conn.sendall(request.encode())
        said += answer(conn)
    return said.decode()
url = "http://localhost:%d/" % port
fronted = raw("GET %s HTTP/1.1\r\nHost: example.com\r\n\r\n" % url)
print("fronted", fronted.splitlines()[0], fronted.splitlines()[-1])
later = raw("GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n" % url,
            "GET /x HTTP/1.1\r\nHost: example.com\r\n\r\n")
print("later", later.count("%s" % MARK), later.splitlines()[-1])
try:
    socket.create_connection(("127.0.0.1", port), timeout=2)
    print("direct reached the host")
except OSError as err:
    print("direct failed:", err)
"""


class _Host(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps the connection: a later request can follow

    def do_GET(self) -> None:
        body = MARK.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _jobs(workspace: Path, domains: tuple[str, ...], **env: str) -> ShellJobs:
    environ = {**shell_environment(os.environ), **env}
    return ShellJobs(
        shell_config(
            workspace=workspace,
            hidden=(),
            allow_read=(),
            network=False,
            sandbox=True,
            bwrap=find_bwrap(os.environ),
            environ=environ,
            timeout=30,
            allow_domains=domains,
        )
    )


def test_a_listed_name_reaches_the_host_through_the_proxy_and_nothing_else_does(
    tmp_path: Path,
) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Host)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    (tmp_path / "fetch.py").write_text(_FETCH)
    jobs = _jobs(tmp_path, ("localhost",))
    try:
        # NO_PROXY names the loopback (the run's own servers): cleared here, so that
        # `localhost` goes to the proxy, which resolves it on the host.
        command = f"env; NO_PROXY= no_proxy= python3 fetch.py {port} '{MARK}'"
        result = anyio.run(lambda: shell_tools(jobs)[0].invoke({"command": command}))
        proxy = jobs._proxy
        assert proxy is not None
        procs = list(proxy._procs)
    finally:
        jobs.close()
        server.shutdown()
        server.server_close()
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        assert f"\n{name}=http://127.0.0.1:3128\n" in str(result)
    assert "\nNO_PROXY=localhost,127.0.0.1,::1\n" in str(result)
    # the run's end ends the proxy and its bridge, and removes their folder
    assert all(proc.poll() is not None for proc in procs)
    assert not proxy._folder.exists()
    lines = dict(line.split(" ", 1) for line in str(result).splitlines() if " " in line)
    assert lines["listed"] == MARK
    assert lines["unlisted"] == f"403 {REFUSED}example.com is not on the list"
    assert lines["address"] == f"403 {REFUSED}127.0.0.1 is not on the list"
    assert "Tunnel connection failed: 403" in lines["tunnel"]
    assert lines["direct"].startswith("failed:")
    # plain HTTP: a Host naming another site (a CDN would route on it) is refused, on the
    # first request and on a later one of the same connection
    assert lines["fronted"] == (
        f"HTTP/1.1 403 Forbidden {REFUSED}example.com is not localhost, the host this"
        " connection is for"
    )
    assert lines["later"] == (
        f"1 {REFUSED}example.com is not localhost, the host this connection is for"
    )


def test_a_proxy_that_fails_its_self_test_refuses_the_shell(tmp_path: Path) -> None:
    """Something else answers in the namespace (a server that does not refuse): the shell
    does not start, and nothing of the proxy is left."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "socat"
    fake.write_text("#!/bin/sh\nexec python3 -m http.server 3128 --bind 127.0.0.1\n")
    fake.chmod(0o755)
    before = set(Path(tempfile.gettempdir()).glob("ruizn-proxy-*"))
    with pytest.raises(SandboxUnavailable) as refused:
        _jobs(tmp_path, ("pypi.org",), PATH=f"{bin_dir}:{os.environ['PATH']}")
    assert str(refused.value).startswith("the shell's domain proxy failed its self-test")
    assert "HTTP/1.0 501" in str(refused.value)
    assert set(Path(tempfile.gettempdir()).glob("ruizn-proxy-*")) == before
    # no socat at all: said so, naming the package
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SandboxUnavailable, match=r"needs socat.*apt-get install socat"):
        _jobs(tmp_path, ("pypi.org",), PATH=str(empty))


def test_the_allowlist_goes_with_the_sandbox_on_and_the_network_off(tmp_path: Path) -> None:
    for network, sandbox in ((True, True), (False, False)):
        with pytest.raises(SandboxUnavailable, match="--shell-allow-domain goes with"):
            shell_config(
                workspace=tmp_path,
                hidden=(),
                allow_read=(),
                network=network,
                sandbox=sandbox,
                bwrap=None,
                environ={},
                timeout=30,
                allow_domains=("pypi.org",),
            )


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("pypi.org", "pypi.org"),
        ("PyPI.org.", "pypi.org"),
        ("files.pypi.org", None),
        ("api.github.com", "*.github.com"),
        ("a.b.github.com", "*.github.com"),
        ("github.com", None),
        ("evilgithub.com", None),
        ("10.0.0.1", "10.0.0.1"),
        ("10.0.0.2", None),
        ("[::1]", None),
        ("", None),
        ("not a name", None),
    ],
)
def test_patterns_match_exact_names_suffixes_and_listed_addresses_only(
    host: str, expected: str | None
) -> None:
    patterns = tuple(pattern_of(p) for p in ("pypi.org", "*.github.com", "10.0.0.1"))
    assert allowed(host, patterns) == expected


@pytest.mark.parametrize("bad", ["*", "", "a b", "*.*.com", "-x.com", "a..b", "http://x.com"])
def test_a_pattern_that_is_no_domain_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match=r"empty|not a domain name"):
        pattern_of(bad)
