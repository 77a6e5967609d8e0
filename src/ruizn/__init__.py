"""ruizn: a small, exact agent core for Claude."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

# WIRING(functools): `@ruizn.tool`, imported on first use so `ruizn --help` (which imports
# this package for __version__) never pays for pydantic and anyio. The lead's public API
# (`__all__`, Agent, replay) will take this over.
if TYPE_CHECKING:
    from ruizn.effects.function_tool import tool as tool


def __getattr__(name: str) -> object:
    if name == "tool":
        from ruizn.effects.function_tool import tool

        return tool
    raise AttributeError(f"module 'ruizn' has no attribute {name!r}")
