"""The shell's domain allowlist (`--shell-allow-domain`): which hosts a sandboxed command may
reach through the run's proxy (docs/shell.md, "A domain allowlist"). Pure: the proxy
(ruizn.effects.tools.proxyd) asks `allowed` for every request, and the settings check each
pattern with `pattern_of` when a run is made.

A pattern is an exact host name (`pypi.org`), `*.` and a suffix (`*.github.com`: any name
below it, not `github.com` itself), or an IP address (v4 or v6), which is the only way an
address is reached: a request naming an address is refused unless that address is listed.
Names are compared without case and without a trailing dot; a non-ASCII name in its IDNA
(`xn--`) form.
"""

from __future__ import annotations

import ipaddress
import re

__all__ = ["REFUSED", "allowed", "pattern_of", "probe_host"]

# The start of the proxy's every refusal (its 403's body): the start-up self-test looks for it.
REFUSED = "ruizn: refused by the run's domain allowlist: "

# A host name's labels: letters, digits and hyphens (and `_`, which some services use),
# 1 to 63 characters, not starting or ending with a hyphen.
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
# A name no allowlist reaches (the `.invalid` top-level domain is reserved, RFC 2606): the
# start-up self-test asks the proxy for it and must be refused.
_PROBE = "ruizn-self-test.invalid"


def pattern_of(text: str) -> str:
    """`text` as a pattern in its one spelling (lower case, IDNA, no trailing dot, an address
    in its compressed form); ValueError saying why it is not one."""
    raw = text.strip()
    if not raw:
        raise ValueError("an allowed domain is empty")
    address = _address(raw.strip("[]"))
    if address is not None:
        return address
    wildcard = raw.startswith("*.")
    name = _name(raw[2:] if wildcard else raw)
    if name is None:
        raise ValueError(f"{raw!r} is not a domain name, `*.` and a domain name, or an IP address")
    return f"*.{name}" if wildcard else name


def allowed(host: str, patterns: tuple[str, ...]) -> str | None:
    """The pattern that lets a request to `host` through (the CONNECT target, or a plain
    request's host), or None: refused. An address only by the same address listed."""
    address = _address(host.strip("[]"))
    if address is not None:
        return address if address in patterns else None
    name = _name(host)
    if name is None:
        return None
    for pattern in patterns:
        if pattern == name or (pattern.startswith("*.") and name.endswith(pattern[1:])):
            return pattern
    return None


def probe_host(patterns: tuple[str, ...]) -> str | None:
    """A name the proxy must refuse (for its self-test), or None when the list lets every
    name of it through (then the self-test cannot prove a refusal)."""
    return _PROBE if allowed(_PROBE, patterns) is None else None


def _address(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def _name(text: str) -> str | None:
    """`text` as a lower-case ASCII host name, or None when it is not one."""
    name = text.lower()
    name = name[:-1] if name.endswith(".") else name
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    if len(name) > 253:
        return None
    labels = name.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        return None
    return name
