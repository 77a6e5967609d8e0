"""The wire shapes: a `Stream` reply as Messages API SSE events, or as one Message JSON.

Shapes follow the newest recorded traffic (see ../shared/anthropic-recordings, 01 and 03):
`stop_details`, `cache_creation`, `service_tier` and the tool_use `caller` are there because
the real API sends them and a client must tolerate them; `message_delta.usage` repeats the
input and cache counts as the newest API does.
"""

from __future__ import annotations

import json
import random
import zlib
from typing import Any

from tests.fakeapi.replies import (
    Block,
    Compaction,
    RedactedThinking,
    Stream,
    Text,
    Thinking,
    ToolUse,
    Usage,
)

# (event name, data, is_delta): is_delta marks the events that `token_delay` paces.
Event = tuple[str, dict[str, Any], bool]


def dumps(data: Any) -> str:
    """Compact, one-line JSON, as the API writes it (non-ASCII kept as UTF-8)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def encode(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {dumps(data)}\n\n".encode()


def split_fragments(text: str, seed: str) -> list[str]:
    """Cut `text` into 1..12-character pieces at pseudo-random places.

    Seeded from a string through crc32, not `hash()`, so the cuts are the same in every
    process (str hashes are salted per interpreter). Cuts are by characters, so a piece may
    end mid-key or mid-escape (`\\`) as the real API's pieces do, but never mid-UTF-8.
    """
    rng = random.Random(zlib.crc32(seed.encode()))
    out: list[str] = []
    i = 0
    while i < len(text):
        step = rng.randint(1, 12)
        out.append(text[i : i + step])
        i += step
    return out


def tool_json(value: dict[str, Any]) -> str:
    # The API streams tool input with ", " and ": " separators (recordings 03 and 05).
    return json.dumps(value, ensure_ascii=False)


def output_tokens(blocks: tuple[Block, ...]) -> int:
    size = 0
    for block in blocks:
        match block:
            case Text(text=text):
                size += len(text)
            case ToolUse(input=value):
                size += len(tool_json(value))
            case Thinking(thinking=text):
                size += len(text)
            case RedactedThinking(data=data):
                size += len(data)
            case Compaction(content=text):
                size += len(text or "")
    return max(1, size // 4)


def _counts(usage: Usage) -> dict[str, int]:
    return {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
    }


def _start_usage(usage: Usage) -> dict[str, Any]:
    return {
        **_counts(usage),
        "cache_creation": {
            "ephemeral_5m_input_tokens": usage.cache_creation_input_tokens,
            "ephemeral_1h_input_tokens": 0,
        },
        "output_tokens": 1,
        "service_tier": "standard",
    }


def _start(index: int, block: dict[str, Any]) -> Event:
    data = {"type": "content_block_start", "index": index, "content_block": block}
    return ("content_block_start", data, False)


def _delta(index: int, delta: dict[str, Any]) -> Event:
    return (
        "content_block_delta",
        {"type": "content_block_delta", "index": index, "delta": delta},
        True,
    )


def _block_events(index: int, block: Block, cut: bool) -> list[Event]:
    """content_block_start and the deltas of one block (the stop is added by the caller)."""
    match block:
        case Text(text=text, chunk=chunk):
            step = max(1, chunk)
            return [
                _start(index, {"type": "text", "text": ""}),
                *(
                    _delta(index, {"type": "text_delta", "text": text[i : i + step]})
                    for i in range(0, len(text), step)
                ),
            ]
        case ToolUse(id=tool_id, name=name, input=value):
            raw = tool_json(value)
            if cut:  # recording 18: the model ran out of tokens half-way through the JSON
                raw = raw[: max(1, len(raw) // 2)]
            start = {"type": "tool_use", "id": tool_id, "name": name, "input": {}}
            return [
                _start(index, {**start, "caller": {"type": "direct"}}),
                # The API always opens with an empty fragment (recordings 03, 07).
                *(
                    _delta(index, {"type": "input_json_delta", "partial_json": part})
                    for part in ["", *split_fragments(raw, tool_id)]
                ),
            ]
        case Thinking(thinking=text, signature=signature):
            return [
                _start(index, {"type": "thinking", "thinking": "", "signature": ""}),
                *(
                    _delta(index, {"type": "thinking_delta", "thinking": part})
                    for part in split_fragments(text, signature)
                ),
                _delta(index, {"type": "signature_delta", "signature": signature}),
            ]
        case RedactedThinking(data=data):
            # Recording 12: the whole payload rides on the start event; no deltas.
            return [_start(index, {"type": "redacted_thinking", "data": data})]
        case Compaction():
            start: dict[str, Any] = {
                "type": "compaction",
                "content": None,
                "encrypted_content": None,
                "signature": block.signature,
            }
            if block.tool_changes is not None:
                start["tool_changes"] = list(block.tool_changes)
            delta = {
                "type": "compaction_delta",
                "content": block.content,
                "encrypted_content": block.encrypted_content,
            }
            return [_start(index, start), _delta(index, delta)]


def stream_events(
    reply: Stream, usage: Usage, message_id: str, *, stop_sequence: str | None = None
) -> list[Event]:
    """Every event of a complete, fault-free stream, in wire order."""
    message: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "stop_details": None,
        "usage": _start_usage(usage),
    }
    events: list[Event] = [("message_start", {"type": "message_start", "message": message}, False)]
    ping: Event = ("ping", {"type": "ping"}, False)
    if reply.pings and not reply.blocks:
        events.append(ping)
    last_tool = max((i for i, b in enumerate(reply.blocks) if isinstance(b, ToolUse)), default=-1)
    for index, block in enumerate(reply.blocks):
        cut = reply.incomplete_last_tool and index == last_tool
        block_events = _block_events(index, block, cut)
        if index == 0 and reply.pings:  # the API pings right after the first block opens
            block_events.insert(1, ping)
        events.extend(block_events)
        if not cut:
            events.append(
                ("content_block_stop", {"type": "content_block_stop", "index": index}, False)
            )
    delta = {"stop_reason": reply.stop_reason, "stop_sequence": stop_sequence, "stop_details": None}
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": delta,
                "usage": {
                    **_counts(usage),
                    "output_tokens": usage.output_tokens,
                    **({"iterations": list(reply.iterations)} if reply.iterations else {}),
                },
            },
            False,
        )
    )
    events.append(("message_stop", {"type": "message_stop"}, False))
    return events


def content_json(block: Block) -> dict[str, Any]:
    match block:
        case Text(text=text):
            return {"type": "text", "text": text}
        case ToolUse(id=tool_id, name=name, input=value):
            return {"type": "tool_use", "id": tool_id, "name": name, "input": value}
        case Thinking(thinking=text, signature=signature):
            return {"type": "thinking", "thinking": text, "signature": signature}
        case RedactedThinking(data=data):
            return {"type": "redacted_thinking", "data": data}
        case Compaction():
            out: dict[str, Any] = {
                "type": "compaction",
                "content": block.content,
                "encrypted_content": block.encrypted_content,
                "signature": block.signature,
            }
            if block.tool_changes is not None:
                out["tool_changes"] = list(block.tool_changes)
            return out


def final_message(
    reply: Stream, usage: Usage, message_id: str, *, stop_sequence: str | None = None
) -> dict[str, Any]:
    """The non-streaming Message JSON for the same reply (faults do not apply)."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": [content_json(b) for b in reply.blocks],
        "stop_reason": reply.stop_reason,
        "stop_sequence": stop_sequence,
        "usage": {
            **_start_usage(usage),
            "output_tokens": usage.output_tokens,
            **({"iterations": list(reply.iterations)} if reply.iterations else {}),
        },
    }


def error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    """The API's JSON error shape, key order included: type, error, request_id."""
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    }


def overloaded_event(request_id: str) -> bytes:
    """The mid-stream error the API sends (recording 26, plus the newer `request_id`)."""
    error = {"details": None, "type": "overloaded_error", "message": "Overloaded"}
    return encode("error", {"type": "error", "error": error, "request_id": request_id})
