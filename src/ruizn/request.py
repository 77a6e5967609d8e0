"""The state as the exact Messages API request body.

Prompt caching: the API caches the prefix (tools, system, messages) up to each
`cache_control` breakpoint, at most 4 per request. We mark the system prompt, the last tool,
and the last block of the two newest user messages. The newest writes this step's prefix;
the one before it is exactly where the previous request wrote, so each step reads the whole
earlier history from the cache however many blocks the last turn added (the API only looks
back about 20 blocks from a breakpoint for an earlier hit).
"""

from __future__ import annotations

from typing import Any

from ruizn.state import (
    ContentBlock,
    ExecutionContext,
    JsonObject,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

EPHEMERAL: JsonObject = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4
_ROLLING_BREAKPOINTS = 2


def build_request(state: ExecutionContext) -> JsonObject:
    request: JsonObject = {"model": state.model, "max_tokens": state.max_tokens}
    if state.system:
        request["system"] = [{"type": "text", "text": state.system, "cache_control": EPHEMERAL}]
    if state.tools:
        tools = [dict(tool) for tool in state.tools]
        tools[-1]["cache_control"] = EPHEMERAL
        request["tools"] = tools
    request["messages"] = _messages(state.messages)
    return request


def _messages(messages: tuple[Message, ...]) -> list[JsonObject]:
    contents: list[list[JsonObject]] = [
        [b for b in map(_block, m.content) if b is not None] for m in messages
    ]
    marked = 0
    for message, content in zip(reversed(messages), reversed(contents), strict=True):
        if marked == _ROLLING_BREAKPOINTS:
            break
        if message.role == "user" and content:
            content[-1]["cache_control"] = EPHEMERAL
            marked += 1
    out = [
        {"role": m.role, "content": content} for m, content in zip(messages, contents, strict=True)
    ]
    last = contents[-1]
    if messages[-1].role == "assistant":
        # A continued turn (pause_turn, or an answer cut at max_tokens): the API takes the
        # final assistant message as the start of its answer, and refuses one that is empty
        # or ends in whitespace.
        if last and last[-1]["type"] == "text":
            last[-1] = {**last[-1], "text": last[-1]["text"].rstrip()}
        if not last:
            out.pop()
    return out


def _block(block: ContentBlock) -> JsonObject | None:
    match block:
        case TextBlock(text=text):
            # The API refuses empty and whitespace-only text blocks; models stream both.
            return {"type": "text", "text": text} if text.strip() else None
        case ToolUseBlock():
            return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
        case ToolResultBlock():
            out: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": block.tool_use_id,
                "content": block.content,
            }
            if block.is_error:
                out["is_error"] = True
            return out
        case ThinkingBlock():
            return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
        case RedactedThinkingBlock():
            return {"type": "redacted_thinking", "data": block.data}
    raise AssertionError(f"unknown block {block!r}")  # pragma: no cover


def count_breakpoints(request: JsonObject) -> int:
    """How many cache_control markers a request carries (the API allows 4)."""
    count = sum(1 for block in request.get("system", []) if "cache_control" in block)
    count += sum(1 for tool in request.get("tools", []) if "cache_control" in tool)
    for message in request["messages"]:
        count += sum(1 for block in message["content"] if "cache_control" in block)
    return count
