"""How MCP failures and figures are worded for one line."""

from __future__ import annotations

import math
from collections.abc import Callable

# A quoted stderr line is cut to this many characters, once made visible and redacted.
QUOTED_LINE = 200


Shown = Callable[[str], str]


def leaf(exc: BaseException) -> BaseException:
    """The first real error inside nested exception groups (anyio's task groups wrap)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def quote(shown: Shown, text: str) -> str:
    """`text` from a server as one shown line: redacted and made visible first, then cut,
    so a cut can never leave part of a secret that the redactor would no longer find."""
    return clip(shown(one_line(text)), QUOTED_LINE)


def describe(exc: BaseException) -> str:
    exc = leaf(exc)
    text = one_line(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def one_line(text: str) -> str:
    return " ".join(text.split())


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def seconds(value: float) -> str:
    return f"{int(value)}s" if math.isclose(value, round(value)) else f"{value:g}s"


def times(n: int) -> str:
    return {0: "no times", 1: "once"}.get(n, f"{n} times")
