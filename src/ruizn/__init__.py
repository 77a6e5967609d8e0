"""ruizn: a small, exact agent core for Claude.

    import ruizn

    @ruizn.tool
    def add(a: int, b: int) -> int:
        "Add two integers."
        return a + b

    result = ruizn.Agent(model="test", tools=[add]).run("What is 2 + 3?")

The public names are listed once, in `__init__.pyi` (what type checkers read); each is
imported on first use, so `ruizn --help` pays for none of anyio, anthropic or pydantic.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from ruizn.version import __version__ as __version__


def _face() -> dict[str, str]:
    """name -> the module that holds it, from the stub's `from M import N as N` lines."""
    found: dict[str, str] = {}
    with open(os.path.join(os.path.dirname(__file__), "__init__.pyi"), encoding="utf-8") as stub:
        for line in stub:
            words = line.split()
            if len(words) == 6 and words[0] == "from" and words[2] == "import":
                found[words[5]] = words[1]
    return found


_PUBLIC = _face()
__all__ = sorted(_PUBLIC)  # noqa: PLE0605 - the names come from the stub, listed once there


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'ruizn' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
