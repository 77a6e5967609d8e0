"""A fake Anthropic Messages API for tests and benchmarks (the HTTP boundary is the seam)."""

from tests.fakeapi.cache import PromptCache
from tests.fakeapi.replies import (
    Block,
    Hang,
    HttpError,
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
from tests.fakeapi.server import FakeAnthropic, RecordedRequest, free_port, long_answer

__all__ = [
    "Block",
    "FakeAnthropic",
    "Hang",
    "HttpError",
    "PromptCache",
    "RecordedRequest",
    "Recording",
    "RedactedThinking",
    "Reply",
    "Script",
    "Stream",
    "Text",
    "Thinking",
    "ToolUse",
    "Usage",
    "free_port",
    "long_answer",
    "tool_loop",
]
