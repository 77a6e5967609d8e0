"""What the fake server can be told to answer: the script's vocabulary.

Fault positions count every event written, `message_start` being 1 and `ping` included;
"after N events" means N events reached the wire before the fault.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Text:
    text: str
    chunk: int = 4  # characters (not bytes) per text_delta


@dataclass(frozen=True)
class ToolUse:
    """Input streamed as `input_json_delta`s: "" then 1-12 character pieces, cut at places
    seeded by `id` (the same in every process), so a piece may end mid-key or mid-escape."""

    id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Thinking:
    """thinking_delta pieces, then one signature_delta."""

    thinking: str
    signature: str


@dataclass(frozen=True)
class RedactedThinking:
    """All of `data` in content_block_start, no deltas (recording 12)."""

    data: str


@dataclass(frozen=True)
class Compaction:
    """A `compaction` block (SDK 2.17's BetaCompactionBlock): the signature and tool_changes
    on content_block_start, then one compaction_delta with content and encrypted_content."""

    content: str | None
    signature: str
    encrypted_content: str | None = None
    tool_changes: tuple[dict[str, Any], ...] | None = ()


@dataclass(frozen=True)
class Compacted:
    """Answer a compaction request (`compaction: {type: summarize}`) as the API does: one
    signed compaction block summarising the request (see tests.fakeapi.compaction)."""


Block = Text | ToolUse | Thinking | RedactedThinking | Compaction


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
    stop_reason: str = "end_turn"  # or tool_use, max_tokens, stop_sequence
    usage: Usage | None = None  # None: the server's prompt-cache emulation decides
    pings: bool = True  # one `ping` right after the first content_block_start
    token_delay: float = 0.0  # seconds slept before each delta ("trickle")
    error_after: int | None = None  # events before `event: error` (overloaded) ends the body
    drop_after: int | None = None  # events before the connection is cut mid-body
    stall_after: int | None = None  # events before a silence of stall_seconds
    stall_seconds: float = 0.0
    incomplete_last_tool: bool = False  # cut the last tool_use's JSON, no content_block_stop
    model: str = "claude-sonnet-5-5"
    headers: Mapping[str, str] = field(default_factory=dict)  # extra response headers
    # `usage.iterations` (SDK 2.17): e.g. a compaction's own tokens, which the top-level
    # counts leave out.
    iterations: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class HttpError:
    status: int
    error_type: str
    message: str
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hang:
    """Read the request, send no status line for `seconds` (or until stop()), then close."""

    seconds: float


@dataclass(frozen=True)
class Recording:
    """Bytes served verbatim: <stem>.response.sse with 200, or <stem>.response.json with the
    status (and the x-should-retry / retry-after headers) from <stem>.meta.json."""

    stem: Path


@dataclass(frozen=True)
class Raw:
    """Any response at all, for replies the real API should never send: `body` as given
    (an event-stream body goes out in `chunks` pieces, chunked; anything else with a
    content-length). For malformed streams, HTML pages, bad bytes and redirects."""

    body: bytes
    status: int = 200
    content_type: str = "text/event-stream; charset=utf-8"
    headers: Mapping[str, str] = field(default_factory=dict)
    chunks: int = 1


Reply = Stream | HttpError | Hang | Recording | Raw | Compacted
Script = Sequence[Reply] | Callable[[dict[str, Any], int], Reply]


def tool_loop(
    tool_turns: int,
    *,
    tool_name: str = "read_file",
    tool_input: dict[str, Any] | None = None,
    final_text: str = "Done.",
    text: str = "Reading.",
) -> Callable[[dict[str, Any], int], Reply]:
    """Stateless: ask for a tool until the request holds `tool_turns` assistant turns.

    Stateless so that concurrent clients and retries each get the reply their own history
    calls for; the tool_use id is `toolu_<turn:04d>_loop`, the same in every run.
    """
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


def system_text(body: Mapping[str, Any]) -> str:
    """A request's system prompt as one text (the API takes a string or text blocks)."""
    system = body.get("system", "")
    if isinstance(system, str):
        return system
    return "".join(block.get("text", "") for block in system if isinstance(block, Mapping))


def by_system(
    routes: Mapping[str, Callable[[dict[str, Any], int], Reply]],
) -> Callable[[dict[str, Any], int], Reply]:
    """One script per conversation, picked by the first key found in the request's system
    prompt: a parent run and its subagents, whose requests interleave, each get their own."""

    def reply(body: dict[str, Any], index: int) -> Reply:
        system = system_text(body)
        for key, script in routes.items():
            if key in system:
                return script(body, index)
        return HttpError(400, "invalid_request_error", f"no script for system {system[:80]!r}")

    return reply


def turns(body: Mapping[str, Any]) -> int:
    """How many assistant turns a request's history holds."""
    return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def tool_results(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks of a request's last message."""
    content = body.get("messages", [{}])[-1].get("content", [])
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
