"""What the fake server can be told to answer."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Text:
    text: str
    chunk: int = 4  # characters per text_delta


@dataclass(frozen=True)
class ToolUse:
    id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Thinking:
    thinking: str
    signature: str


@dataclass(frozen=True)
class RedactedThinking:
    data: str


Block = Text | ToolUse | Thinking | RedactedThinking


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0


@dataclass(frozen=True)
class Stream:
    """A 200 text/event-stream reply, optionally with a fault part-way."""

    blocks: tuple[Block, ...]
    stop_reason: str = "end_turn"
    usage: Usage | None = None  # None: the server's prompt-cache emulation decides
    pings: bool = True
    token_delay: float = 0.0  # seconds before each delta ("trickle")
    error_after: int | None = None  # events before a mid-stream `event: error`
    drop_after: int | None = None  # events before the connection is cut
    stall_after: int | None = None  # events before a silence of stall_seconds
    stall_seconds: float = 0.0
    incomplete_last_tool: bool = False  # cut the last tool_use's JSON, no content_block_stop
    model: str = "claude-sonnet-4-5"
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HttpError:
    status: int
    error_type: str
    message: str
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hang:
    seconds: float


@dataclass(frozen=True)
class Recording:
    stem: Path  # <stem>.response.sse or <stem>.response.json (+ .meta.json for the status)


Reply = Stream | HttpError | Hang | Recording
Script = Sequence[Reply] | Callable[[dict[str, Any], int], Reply]


def tool_loop(
    tool_turns: int,
    *,
    tool_name: str = "read_file",
    tool_input: dict[str, Any] | None = None,
    final_text: str = "Done.",
    text: str = "Reading.",
) -> Callable[[dict[str, Any], int], Reply]:
    """Stateless: ask for a tool until the request holds `tool_turns` assistant turns."""
    call_input = tool_input if tool_input is not None else {"path": "README.md"}

    def reply(body: dict[str, Any], index: int) -> Reply:
        turns = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if turns < tool_turns:
            return Stream(
                (Text(text), ToolUse(f"toolu_{turns:04d}_loop", tool_name, call_input)),
                stop_reason="tool_use",
            )
        return Stream((Text(final_text),))

    return reply
