"""The reducer's cases for model calls: started, failed, answered, and the checked output.

Pure; `ruizn.reducers.reduce` dispatches to them."""

from __future__ import annotations

import math

from attrs import evolve

from ruizn.compaction import check_started, enabled, too_long
from ruizn.events import (
    LlmCallFailed,
    LlmCallStarted,
    LlmResponse,
    OutputChecked,
    ToolCallFinished,
)
from ruizn.rules import (
    PAUSE_STOP,
    InvalidTransition,
    check_output,
    limit_stop,
    output_exhausted,
    output_feedback,
    reply_problem,
    spent_stop,
)
from ruizn.state import (
    CallFailure,
    ErrorType,
    ExecutionContext,
    Message,
    Phase,
    TextBlock,
    ToolCall,
    ToolResult,
    ToolUseBlock,
    TurnResults,
)
from ruizn.tool_turns import (
    on_tool_call_finished,
)
from ruizn.window import over_limit


def on_llm_call_started(state: ExecutionContext, event: LlmCallStarted) -> ExecutionContext:
    if event.step != state.step + 1:
        raise InvalidTransition(
            f"llm_call_started for step {event.step}, but the next step is {state.step + 1}"
        )
    if event.compaction is not None:
        return _compaction_started(state, event)
    if state.phase is not Phase.READY:
        raise InvalidTransition(f"llm_call_started cannot follow phase {state.phase.value}")
    stop = limit_stop(state)
    if stop is not None:
        raise InvalidTransition(
            f"step {event.step} is past a limit of the run ({stop.status.value}"
            + (f": {stop.error})" if stop.error else ")")
        )
    if state.attempt == 0 and over_limit(state):
        raise InvalidTransition(
            f"step {event.step} would send about {state.context_tokens} tokens, past the"
            " run's context limit: the oldest tool results must be cleared first"
        )
    if event.attempt != state.attempt + 1:
        raise InvalidTransition(
            f"llm_call_started attempt {event.attempt}, but the next attempt is {state.attempt + 1}"
        )
    if state.failure is not None and not state.failure.will_retry:
        raise InvalidTransition("a model call after the last attempt gave up")
    return evolve(state, attempt=event.attempt, streamed_tokens=0, last_seq=event.seq)


def _compaction_started(state: ExecutionContext, event: LlmCallStarted) -> ExecutionContext:
    """A compaction call (ruizn.compaction): not a step, and not held to the context limit
    it is there to cure; the steps and the budget still bound it, but for `ruizn compact`."""
    check_started(state, event)
    stop = spent_stop(state) if state.phase is not Phase.FINISHED else None
    if stop is not None:
        raise InvalidTransition(f"a compaction call past a limit of the run ({stop.status.value})")
    if event.attempt != state.attempt + 1:
        raise InvalidTransition(
            f"llm_call_started attempt {event.attempt}, but the next attempt is {state.attempt + 1}"
        )
    if state.failure is not None and not state.failure.will_retry:
        raise InvalidTransition("a model call after the last attempt gave up")
    return evolve(
        state,
        attempt=event.attempt,
        compacting=event.compaction,
        streamed_tokens=0,
        last_seq=event.seq,
    )


def on_llm_call_failed(state: ExecutionContext, event: LlmCallFailed) -> ExecutionContext:
    if event.attempt != state.attempt:
        raise InvalidTransition(
            f"llm_call_failed for attempt {event.attempt}, but attempt {state.attempt} is running"
        )
    if event.compact and not (
        too_long(event.status_code, event.message)
        and event.will_retry
        and state.compacting is None
        and enabled(state)
        and state.compacted_step != state.step
    ):
        raise InvalidTransition("llm_call_failed asks for a compaction the run cannot make")
    if event.will_retry and not event.compact and event.attempt > state.settings.max_retries:
        raise InvalidTransition(
            f"a retry after attempt {event.attempt}, past max_retries {state.settings.max_retries}"
        )
    if event.retry_in < 0:
        raise InvalidTransition("llm_call_failed with a negative retry_in")
    failure = CallFailure(
        message=event.message,
        will_retry=event.will_retry,
        retry_in=event.retry_in,
        compact=event.compact,
    )
    return evolve(state, failure=failure, streamed_tokens=0, last_seq=event.seq)


def on_llm_response(state: ExecutionContext, event: LlmResponse) -> ExecutionContext:
    if state.compacting is not None:
        raise InvalidTransition("llm_response to a compaction call (context_compacted ends it)")
    problem = reply_problem(event.content)
    if problem is not None:
        raise InvalidTransition(f"llm_response refused: {problem}")
    usage = event.usage
    if (
        min(
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_input_tokens,
            usage.cache_read_input_tokens,
        )
        < 0
    ):
        raise InvalidTransition("llm_response with negative token counts")
    if usage.cache_creation_1h_input_tokens > usage.cache_creation_input_tokens:
        raise InvalidTransition("llm_response with more 1-hour cache writes than cache writes")
    cost, cost_unknown = state.cost, state.cost_unknown
    unpriced_steps = state.unpriced_steps
    if event.cost is not None and (not math.isfinite(event.cost) or event.cost < 0):
        raise InvalidTransition(f"llm_response with the cost {event.cost!r}")
    if event.priced_by is None:
        if event.cost is not None:
            raise InvalidTransition("llm_response with a cost but no price list")
        unpriced_steps += 1
    elif event.cost is None:
        cost_unknown += 1
    else:
        cost += event.cost
    if usage.total_input_tokens:  # the prompt as the API counted it, and the answer
        context_tokens = usage.total_input_tokens + usage.output_tokens
    else:  # a model that reports no usage: the estimate goes on
        context_tokens = state.context_tokens + usage.output_tokens
    content = event.content
    messages = state.messages
    if state.continuing:
        # The answer continues the paused (or cut) turn: one assistant message, not two.
        content = (*messages[-1].content, *content)
        messages = messages[:-1]
    calls = tuple(
        ToolCall(id=b.id, name=b.name, input=b.input)
        for b in content
        if isinstance(b, ToolUseBlock)
    )
    return evolve(
        state,
        # `+` copies the history's tuple once; `(*messages, m)` goes through a list: twice.
        messages=messages + (Message(role="assistant", content=content),),  # noqa: RUF005
        step=state.step + 1,
        attempt=0,
        failure=None,
        usage=state.usage + usage,
        cost=cost,
        cost_unknown=cost_unknown,
        unpriced_steps=unpriced_steps,
        context_tokens=context_tokens,
        stop_reason=event.stop_reason,
        continuing=event.stop_reason == PAUSE_STOP and not calls,
        turn_calls=calls,
        turn_results=TurnResults(len(calls)),
        turn_open=len(calls),
        turn_approvals=(None,) * len(calls),
        turn_stale=(),
        turn_index={call.id: i for i, call in enumerate(calls)},
        turn_pre=(),
        streamed_tokens=0,
        last_seq=event.seq,
    )


def on_output_checked(state: ExecutionContext, event: OutputChecked) -> ExecutionContext:
    """The final answer's check, made again here: a log cannot claim a valid output the
    schema refuses (or the reverse). A miss with retries left is sent back to the model: as
    the final_output call's error result (tool mode), else as a user message."""
    if state.settings.output_schema is None:
        raise InvalidTransition("output_checked in a run without an output schema")
    if state.output_valid or output_exhausted(state):
        raise InvalidTransition("output_checked after the output was settled")
    if state.phase is Phase.DONE and state.messages[-1].role != "assistant":
        raise InvalidTransition("output_checked with no answer to check")
    verdict = check_output(state)
    if (verdict.valid, verdict.call_id, verdict.error) != (event.valid, event.call_id, event.error):
        raise InvalidTransition("output_checked disagrees with the output schema")
    if event.valid and verdict.output != event.output:
        raise InvalidTransition("output_checked records another output than the answer's")
    checks = state.output_checks + (0 if event.valid else 1)
    after = evolve(
        state,
        output=event.output if event.valid else None,
        output_valid=event.valid,
        output_checks=checks,
        last_seq=event.seq,
    )
    feedback = (
        None if event.valid else output_feedback(str(event.error), state.settings.output_mode)
    )
    if event.call_id is not None:
        result = (
            ToolResult.ok("Accepted: this is the run's final answer.")
            if event.valid
            else ToolResult.error(ErrorType.INVALID_INPUT, str(feedback))
        )
        answered = ToolCallFinished(seq=event.seq, ts=event.ts, id=event.call_id, result=result)
        return on_tool_call_finished(after, answered)
    if feedback is None or output_exhausted(after):
        return after
    message = Message(role="user", content=(TextBlock(text=feedback),))
    return evolve(after, messages=(*after.messages, message))
