"""Keeping a long run's requests within its context limit: the estimate, and what to clear.

A run that reads many files grows until the API refuses it. So before each model call the
size of the request is judged: the last response's usage says exactly how many tokens its
prompt held and its answer added; what came after (tool results) is estimated from its size
in bytes. When the estimate passes the run's limit (`max_context`, by default the model's
context window less `max_tokens`), the oldest tool results are cleared: each is replaced by
a short placeholder naming the call and the size removed, and telling the model to call the
tool again if it needs the result. The last turn is never touched. The clearing is an event
(`context_cleared`) that carries every placeholder, so replay and resume rebuild exactly the
messages that were sent; the tool_result blocks themselves stay, so the request's cache
breakpoints still sit on blocks that exist (see ruizn.request).

Pure functions of the state; no I/O.
"""

from __future__ import annotations

import json

from attrs import frozen

from ruizn.defaults import COMPACT_AT_QUARTERS
from ruizn.events import ClearedResult
from ruizn.media import image_tokens, images, result_size, text_of, utf8_size
from ruizn.settings import RunSettings
from ruizn.state import ExecutionContext, JsonObject, ResultContent, ToolResultBlock, ToolUseBlock

# Bytes per token when estimating what a tool result adds: few, so as not to under-count
# (code, JSON and text that is not English run about 3 bytes a token)...
ADDED_BYTES_PER_TOKEN = 3
# ...and what clearing one removes: many, so as not to over-count what is freed.
REMOVED_BYTES_PER_TOKEN = 4
# A tool_result block's own JSON (its type, id and keys), in tokens.
BLOCK_TOKENS = 16
# A clearing goes down to this share of the limit (in fifths), not just under it: a clearing
# changes the history, so the next request writes the prompt cache again from the first
# cleared block on. Clearing a little more, less often, pays for that once every few steps.
CLEAR_TO_FIFTHS = 4
_MAX_INPUT_SHOWN = 200


def context_limit(settings: RunSettings) -> int | None:
    """The most input tokens a request of this run may hold, or None: no limit."""
    if settings.max_context == 0:
        return None
    if settings.max_context is not None:
        return settings.max_context
    if settings.context_window is None:
        return None
    return max(settings.context_window - settings.max_tokens, 1)


def compact_threshold(settings: RunSettings) -> int | None:
    """The input tokens past which a request is compacted first (docs/compaction.md), or
    None: compaction is off (`--compact off`, or no --compact-at and no known window)."""
    if settings.compact_at == 0:
        return None
    if settings.compact_at is not None:
        return settings.compact_at
    if settings.context_window is None:
        return None
    return max(settings.context_window * COMPACT_AT_QUARTERS // 4, 1)


def added_tokens(content: ResultContent) -> int:
    """What a tool result adds to the next request, at most (an over-estimate): its text by
    its bytes, its images by their pixels (an image's base64 is not what it costs)."""
    text = -(-utf8_size(text_of(content)) // ADDED_BYTES_PER_TOKEN)
    return text + sum(image_tokens(image) for image in images(content)) + BLOCK_TOKENS


def cleared_tokens(content: ResultContent, placeholder: str) -> int:
    """What replacing a result's `content` by `placeholder` frees, at least."""
    kept = -(-utf8_size(placeholder) // ADDED_BYTES_PER_TOKEN)
    text = utf8_size(text_of(content)) // REMOVED_BYTES_PER_TOKEN
    return text + sum(image_tokens(image, at_least=True) for image in images(content)) - kept


def over_limit(state: ExecutionContext) -> bool:
    limit = context_limit(state.settings)
    return limit is not None and state.context_tokens > limit


def placeholder(name: str, tool_input: JsonObject, size: int) -> str:
    """What the model reads instead of a cleared result."""
    shown = json.dumps(tool_input, ensure_ascii=False, sort_keys=True)
    if len(shown) > _MAX_INPUT_SHOWN:
        shown = shown[:_MAX_INPUT_SHOWN] + "…"
    return (
        f"[result cleared to keep the conversation within its context limit: {name} {shown}"
        f" returned {size:,} bytes, removed here. Call the tool again if you need it.]"
    )


@frozen(kw_only=True)
class Clearing:
    """The tool results to clear, oldest first, and whether the request then fits."""

    results: tuple[ClearedResult, ...]
    fits: bool


def last_turn_start(state: ExecutionContext) -> int:
    """The index of the last user message: it and what follows are the last turn."""
    for index in range(len(state.messages) - 1, -1, -1):
        if state.messages[index].role == "user":
            return index
    return 0


def plan_clearing(state: ExecutionContext) -> Clearing:
    """The oldest tool results (before the last turn) whose clearing brings the estimate
    down to four fifths of the limit; `fits` is False when even clearing every one of them
    leaves the request over the limit (nothing is cleared then: the run must end)."""
    limit = context_limit(state.settings)
    if limit is None or state.context_tokens <= limit:
        return Clearing(results=(), fits=True)
    target = limit * CLEAR_TO_FIFTHS // 5
    done = set(state.cleared)
    calls: dict[str, ToolUseBlock] = {}
    chosen: list[ClearedResult] = []
    estimate = state.context_tokens
    for message in state.messages[: last_turn_start(state)]:
        if estimate <= target:
            break
        for block in message.content:
            if isinstance(block, ToolUseBlock):
                calls[block.id] = block
            elif isinstance(block, ToolResultBlock) and block.tool_use_id not in done:
                call = calls.get(block.tool_use_id)
                name = call.name if call is not None else "a tool"
                size = result_size(block.content)
                text = placeholder(name, call.input if call is not None else {}, size)
                freed = cleared_tokens(block.content, text)
                if freed <= 0:  # smaller than its own placeholder: nothing to gain
                    continue
                chosen.append(
                    ClearedResult(
                        tool_use_id=block.tool_use_id, name=name, size=size, placeholder=text
                    )
                )
                estimate -= freed
                if estimate <= target:
                    break
    if estimate > limit:
        return Clearing(results=(), fits=False)
    return Clearing(results=tuple(chosen), fits=True)
