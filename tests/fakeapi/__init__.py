"""A fake Anthropic Messages API for tests and benchmarks (the HTTP boundary is the seam).

The server's names load lazily (PEP 562), so `python -m tests.fakeapi.server` runs the
module once, as __main__, instead of also importing it through this package (runpy warns
about that double import).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tests.fakeapi.cache import PromptCache
from tests.fakeapi.replies import (
    Block,
    Compacted,
    Compaction,
    Hang,
    HttpError,
    Raw,
    Recording,
    RedactedThinking,
    Reply,
    Script,
    Stream,
    Text,
    Thinking,
    ToolUse,
    Usage,
    tool_loop,
)

if TYPE_CHECKING:
    from tests.fakeapi.server import FakeAnthropic, RecordedRequest, Timing, free_port, long_answer

_SERVER_NAMES = frozenset(
    {"FakeAnthropic", "RecordedRequest", "Timing", "free_port", "long_answer"}
)


def __getattr__(name: str) -> object:
    if name in _SERVER_NAMES:
        from tests.fakeapi import server

        return getattr(server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Block",
    "Compacted",
    "Compaction",
    "FakeAnthropic",
    "Hang",
    "HttpError",
    "PromptCache",
    "Raw",
    "RecordedRequest",
    "Recording",
    "RedactedThinking",
    "Reply",
    "Script",
    "Stream",
    "Text",
    "Thinking",
    "Timing",
    "ToolUse",
    "Usage",
    "free_port",
    "long_answer",
    "tool_loop",
]
