"""Compaction: a history too long for the window becomes one summary, as an event.

When the next request's input would pass the run's `compact_at` (by default three quarters
of the model's window), or the model's window was exceeded, the whole history is summarised
and the summary stands in for it from then on. Only between steps: every tool_use of the
last turn is answered (or the turn needs nothing more), so no call or approval is dropped.
The system prompt (with the project's AGENTS.md) is not in `messages`, so it is never in
the summary: every request still sends it whole.

Two forms, chosen when the run starts from the Models API (`settings.compaction`):

- `server`: the API's compaction request, the run's usual request plus
  `compaction: {type: summarize, instructions?}`; the reply holds one signed `compaction`
  block (stop_reason `compaction`), kept and sent back exactly as returned.
- `client`: ruizn's own summary request, the run's usual request (same system and tools,
  so the prompt cache is read) with a last user message asking for the summary; its text
  becomes a compaction block without a signature, sent back as tagged text.

Either way the history becomes two messages: the summary, then a user message that gives
the task again as first written and asks the model to go on (see `compacted_messages`).
The `context_compacted` event carries the block, so replay, resume and rerun rebuild
exactly the messages that were sent. Pure; no I/O.
"""

from __future__ import annotations

import json
import math

from attrs import evolve

from ruizn.events import ContextCompacted, HookRan, LlmCallStarted
from ruizn.hooks import matching
from ruizn.media import tally_of_run
from ruizn.request import MessagesRequest, plan_request, rolling_breakpoints, system_prompt
from ruizn.rules import InvalidTransition, spent_stop
from ruizn.settings import HookSpec
from ruizn.state import (
    CompactionBlock,
    ContentBlock,
    ExecutionContext,
    Message,
    Phase,
    TextBlock,
    ToolUseBlock,
)
from ruizn.window import ADDED_BYTES_PER_TOKEN, BLOCK_TOKENS, compact_threshold

# What ruizn's own summary request asks (the client form); a run's --compact-instructions
# (or a PreCompact hook's) follow it.
SUMMARY_PROMPT = (
    "Stop the task here and write a summary of this conversation so far; it will replace"
    " the conversation from now on, so anything it leaves out is gone. Keep: the task and"
    " every requirement given; what has been done and found (files, commands, results,"
    " decisions, errors and their fixes); what is left to do, and the next step. Keep exact"
    " names, paths, numbers and any text the rest of the task needs word for word. Do not"
    " call any tool: answer with the summary only."
)


def continuation(goal: str) -> str:
    """The user message after a summary: the task as first written, and go on."""
    return (
        "The conversation so far was compacted: the summary above stands in for it. The"
        f" task, as it was first given:\n\n{goal}\n\nGo on with the task from where the"
        " summary leaves off."
    )


def form(state: ExecutionContext) -> str:
    """`server` or `client` (see the module's docstring)."""
    return state.settings.compaction or "client"


def enabled(state: ExecutionContext) -> bool:
    return compact_threshold(state.settings) is not None


def between_steps(state: ExecutionContext) -> bool:
    """Every tool_use is answered and nothing waits for a decision: the history can go."""
    return state.turn_open == 0 and not state.tools_in_flight and len(state.messages) > 1


def blocked(state: ExecutionContext) -> str | None:
    """Why a PreCompact hook blocked the compaction this step, or None."""
    return state.precompact_block if state.precompact_step == state.step else None


def hook_notes(state: ExecutionContext) -> tuple[str, ...]:
    """What this step's PreCompact hooks added to the summary's instructions."""
    return state.precompact_notes if state.precompact_step == state.step else ()


def precompact_ran(state: ExecutionContext) -> int:
    return state.precompact_ran if state.precompact_step == state.step else 0


def compact_fields(state: ExecutionContext, event: str) -> dict[str, object]:
    """What a PreCompact or PostCompact hook is told, on Claude Code's contract (a manual
    compaction gives its own `trigger` and `custom_instructions`)."""
    if event == "PreCompact":
        return {
            "trigger": "auto",
            "custom_instructions": state.settings.compact_instructions or "",
        }
    first = state.messages[0].content[0] if state.messages[0].content else None
    summary = first.content if isinstance(first, CompactionBlock) else None
    return {"trigger": state.compact_trigger or "auto", "compact_summary": summary or ""}


def postcompact_due(state: ExecutionContext) -> tuple[HookSpec, ...]:
    """The PostCompact hooks still to run for the compaction just made (none once a step
    has followed it)."""
    if not state.compactions or state.compacted_step != state.step:
        return ()
    specs = matching(state.settings, "PostCompact", state.compact_trigger or "auto")
    return specs[state.postcompact_ran :]


def due(state: ExecutionContext) -> bool:
    """Compact before the next request (phase READY, no attempt made yet): its input would
    pass compact_at; not twice for the same step, nor when a PreCompact hook blocked it."""
    at = compact_threshold(state.settings)
    if at is None or state.compacted_step == state.step or not between_steps(state):
        return False
    if blocked(state) is not None:
        return False
    # Only --compact-at: a history past the context limit (--max-context) is cleared of
    # old tool results, as it always was (docs/cost-and-context.md).
    return state.context_tokens > at and spent_stop(state) is None


def window_exceeded(state: ExecutionContext) -> bool:
    """The last answer stopped at the model's window (phase DONE): compact and go on."""
    return (
        state.stop_reason == "model_context_window_exceeded"
        and enabled(state)
        and state.compacted_step != state.step
        and between_steps(state)
        and spent_stop(state) is None
    )


def too_long(status_code: int | None, message: str) -> bool:
    """A failed call whose prompt did not fit the model's window (the API's 400)."""
    return status_code in (400, 413) and "prompt is too long" in message.lower()


def instructions_of(state: ExecutionContext, extra: tuple[str, ...] = ()) -> str | None:
    """The summary's instructions: the run's (--compact-instructions), then any given now
    (`ruizn compact --instructions`), then what PreCompact hooks added, one paragraph each."""
    parts = [state.settings.compact_instructions or "", *extra, *hook_notes(state)]
    text = "\n\n".join(part.strip() for part in parts if part and part.strip())
    return text or None


def compaction_request(state: ExecutionContext, instructions: str | None) -> MessagesRequest:
    """The request that compacts the history, in the run's form."""
    base = plan_request(state)
    if form(state) == "server":
        config: dict[str, object] = {"type": "summarize"}
        if instructions:
            config["instructions"] = instructions
        # A compaction request answers with the block alone: what only shapes an answer
        # (a structured output's format) is refused with it.
        output = {k: v for k, v in (base.output_config or {}).items() if k != "format"}
        return evolve(base, compaction=config, output_config=output or None)
    prompt = SUMMARY_PROMPT + (f"\n\nAlso: {instructions}" if instructions else "")
    ask = TextBlock(text=prompt)
    messages = state.messages
    last = messages[-1]
    if last.role == "user":
        messages = (*messages[:-1], Message(role="user", content=(*last.content, ask)))
    else:
        messages = (*messages, Message(role="user", content=(ask,)))
    return evolve(base, messages=messages, marked=rolling_breakpoints(messages))


def block_of(state: ExecutionContext, content: tuple[ContentBlock, ...]) -> CompactionBlock | str:
    """The compaction block a reply gives, or why it gives none (a failed, retried call)."""
    if form(state) == "server":
        blocks = [b for b in content if isinstance(b, CompactionBlock)]
        if len(blocks) != 1 or not blocks[0].signed:
            return "a compaction request must answer with one signed compaction block"
        if not (blocks[0].content or "").strip():
            return "the API's compaction produced no summary"
        return blocks[0]
    if any(isinstance(b, ToolUseBlock) for b in content):
        return "the summary request was answered with a tool call"
    text = "\n".join(b.text for b in content if isinstance(b, TextBlock)).strip()
    if not text:
        return "the summary request was answered with no text"
    return CompactionBlock(content=text)


def compacted_messages(state: ExecutionContext, block: CompactionBlock) -> tuple[Message, ...]:
    """The history after the compaction: the API's block alone first in an assistant
    message (where the API returned it), ruizn's own summary as the user's text; then the
    task again."""
    again = TextBlock(text=continuation(state.goal))
    if block.signed:
        return (
            Message(role="assistant", content=(block,)),
            Message(role="user", content=(again,)),
        )
    return (Message(role="user", content=(block, again)),)


def tokens_after(state: ExecutionContext, block: CompactionBlock) -> int:
    """The estimated input of the next request: the system prompt, the tools, the summary
    and the task again (by their bytes, as window.py estimates what a turn adds)."""
    size = sum(
        len(text.encode("utf-8"))
        for text in (
            system_prompt(state.settings),
            json.dumps(state.settings.tools, ensure_ascii=False, sort_keys=True),
            block.content or "",
            block.encrypted_content or "",
            continuation(state.goal),
        )
    )
    return -(-size // ADDED_BYTES_PER_TOKEN) + 3 * BLOCK_TOKENS


def check_started(state: ExecutionContext, event: LlmCallStarted) -> None:
    """What a compaction call must start from (the reducer's check)."""
    if not enabled(state) and event.compaction != "manual":
        raise InvalidTransition("a compaction call in a run whose compaction is off")
    if not between_steps(state):
        raise InvalidTransition("a compaction call with a tool call of the turn unanswered")
    if state.phase is Phase.FINISHED:
        if event.compaction != "manual":
            raise InvalidTransition("only `ruizn compact` compacts a finished run")
    elif event.compaction == "auto" and not (
        state.compacting == "auto" or due(state) or window_exceeded(state) or _failed_long(state)
    ):
        raise InvalidTransition("a compaction call the history does not call for")
    if state.phase is Phase.DONE and not window_exceeded(state):
        raise InvalidTransition("a compaction call after a finished turn")
    if blocked(state) is not None:
        raise InvalidTransition("a compaction call a PreCompact hook blocked")


def on_compact_hook(state: ExecutionContext, event: HookRan) -> ExecutionContext:
    """A PreCompact hook's answer (before this step's compaction: it may add instructions
    or block it) or a PostCompact hook's (after it)."""
    if event.hook_event == "PostCompact":
        if not state.compactions or state.compacted_step != state.step:
            raise InvalidTransition("hook_ran PostCompact with no compaction just made")
        return evolve(state, postcompact_ran=state.postcompact_ran + 1)
    if not between_steps(state) or state.compacting is not None:
        raise InvalidTransition("hook_ran PreCompact with a call of the turn unanswered")
    fresh = state.precompact_step != state.step
    notes = () if fresh else state.precompact_notes
    block = None if fresh else state.precompact_block
    if event.decision == "block":
        block = event.reason or "blocked by a PreCompact hook"
    elif event.context:
        notes = (*notes, event.context)
    return evolve(
        state,
        precompact_step=state.step,
        precompact_ran=(0 if fresh else state.precompact_ran) + 1,
        precompact_notes=notes,
        precompact_block=block,
    )


def _failed_long(state: ExecutionContext) -> bool:
    return state.failure is not None and state.failure.compact


def on_context_compacted(state: ExecutionContext, event: ContextCompacted) -> ExecutionContext:
    """The summary takes the place of the whole history (checked against the state)."""
    if state.compacting is None or state.compacting != event.trigger:
        raise InvalidTransition("context_compacted without its compaction call")
    if event.replaced != len(state.messages):
        raise InvalidTransition(
            f"context_compacted replaces {event.replaced} messages; the history holds"
            f" {len(state.messages)}"
        )
    block = event.block
    made_by = "server" if block.signed else "client"
    if event.source != made_by or not (block.content or "").strip():
        raise InvalidTransition("context_compacted: the block does not match its source")
    if event.source != form(state):
        raise InvalidTransition(f"context_compacted from the {event.source}, not this run's form")
    if event.tokens_before != state.context_tokens or event.tokens_after != tokens_after(
        state, block
    ):
        raise InvalidTransition("context_compacted: its token counts disagree with the history")
    usage = event.usage
    if min(usage.input_tokens, usage.output_tokens) < 0:
        raise InvalidTransition("context_compacted with negative token counts")
    cost, unknown, unpriced = state.cost, state.cost_unknown, state.unpriced_steps
    spent = 0.0
    if event.cost is not None and (not math.isfinite(event.cost) or event.cost < 0):
        raise InvalidTransition(f"context_compacted with the cost {event.cost!r}")
    if event.priced_by is None:
        if event.cost is not None:
            raise InvalidTransition("context_compacted with a cost but no price list")
        unpriced += 1
    elif event.cost is None:
        unknown += 1
    else:
        spent = event.cost
    after = evolve(
        state,
        messages=compacted_messages(state, block),
        cleared=(),
        context_tokens=event.tokens_after,
        usage=state.usage + usage,
        cost=cost + spent,
        cost_unknown=unknown,
        unpriced_steps=unpriced,
        compaction_cost=state.compaction_cost + spent,
        compactions=state.compactions + 1,
        compacted_step=state.step,
        compacting=None,
        postcompact_ran=0,
        compact_trigger=event.trigger,
        attempt=0,
        failure=None,
        stop_reason=None,
        continuing=False,
        streamed_tokens=0,
        last_seq=event.seq,
    )
    # The images of the summarised results left the requests with them.
    return evolve(after, media=tally_of_run(after))


__all__ = [
    "SUMMARY_PROMPT",
    "block_of",
    "check_started",
    "compacted_messages",
    "compaction_request",
    "continuation",
    "due",
    "enabled",
    "form",
    "instructions_of",
    "on_context_compacted",
    "tokens_after",
    "too_long",
    "window_exceeded",
]
