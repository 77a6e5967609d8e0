"""All state transitions, in one file: `reduce(state, event) -> state`.

Pure: no clock, no I/O. An event that cannot follow the state (a gap in `seq`, a result for
a tool that was never asked for, a second RunStarted) raises `InvalidTransition`, so a
corrupt or spliced log is refused rather than misread.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import assert_never

from attrs import evolve

from ruizn.events import (
    Event,
    LlmCallFailed,
    LlmCallStarted,
    LlmResponse,
    LlmToken,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from ruizn.state import (
    ExecutionContext,
    Message,
    Status,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)


class InvalidTransition(ValueError):
    """The event cannot follow the state it was applied to."""


def start(event: RunStarted) -> ExecutionContext:
    """The state a run begins in: the goal is the first user message."""
    if event.seq != 1:
        raise InvalidTransition(f"run_started must have seq 1, not {event.seq}")
    return ExecutionContext(
        run_id=event.run_id,
        goal=event.goal,
        model=event.model,
        max_steps=event.max_steps,
        max_tokens=event.max_tokens,
        system=event.system,
        tools=event.tools,
        workspace=event.workspace,
        messages=(Message(role="user", content=(TextBlock(text=event.goal),)),),
        last_seq=1,
    )


def reduce(state: ExecutionContext, event: Event) -> ExecutionContext:
    if event.seq != state.last_seq + 1:
        raise InvalidTransition(
            f"seq {event.seq} does not follow {state.last_seq}: events missing or out of order"
        )
    match event:
        case RunStarted():
            raise InvalidTransition(
                f"a second run_started (run {event.run_id}) inside run {state.run_id}"
            )
        case RunResumed():
            return _on_run_resumed(state, event)
        case LlmCallStarted():
            return _on_llm_call_started(state, event)
        case LlmToken():
            # The hot path: one counter, no copies of the text (it lives in the log).
            _require_running(state, "llm_token")
            return evolve(state, streamed_tokens=state.streamed_tokens + 1, last_seq=event.seq)
        case LlmCallFailed():
            _require_running(state, "llm_call_failed")
            return evolve(state, streamed_tokens=0, last_seq=event.seq)
        case LlmResponse():
            return _on_llm_response(state, event)
        case ToolCallStarted():
            return _on_tool_call_started(state, event)
        case ToolCallFinished():
            return _on_tool_call_finished(state, event)
        case RunFinished():
            return _on_run_finished(state, event)
        case _:
            assert_never(event)


def replay(events: Iterable[Event]) -> ExecutionContext:
    """The fold: the state a run is in after `events` (which must begin with RunStarted)."""
    iterator = iter(events)
    first = next(iterator, None)
    if not isinstance(first, RunStarted):
        raise InvalidTransition("a run's log must begin with run_started")
    return fold(start(first), iterator)


def fold(state: ExecutionContext, events: Iterable[Event]) -> ExecutionContext:
    """`reduce` over `events`, equal to reducing them one by one.

    A run of LlmToken events is applied as one update: a long answer is most of a log, and
    one evolve per token would make replay pay for copying the state a million times.
    """
    tokens = 0
    for event in events:
        if (
            type(event) is LlmToken
            and event.seq == state.last_seq + tokens + 1
            and state.status is Status.RUNNING
        ):
            tokens += 1
            continue
        if tokens:
            state = add_tokens(state, tokens)
            tokens = 0
        state = reduce(state, event)
    return add_tokens(state, tokens) if tokens else state


def add_tokens(state: ExecutionContext, count: int) -> ExecutionContext:
    """The state after `count` LlmToken events with the next seq numbers (see `fold`)."""
    return evolve(
        state, streamed_tokens=state.streamed_tokens + count, last_seq=state.last_seq + count
    )


def _require_running(state: ExecutionContext, what: str) -> None:
    if state.status is not Status.RUNNING:
        raise InvalidTransition(f"{what} after the run finished ({state.status.value})")


def _on_run_resumed(state: ExecutionContext, event: RunResumed) -> ExecutionContext:
    # Also valid while status is running: a crash (kill -9) leaves no RunFinished.
    return evolve(
        state,
        status=Status.RUNNING,
        max_steps=event.max_steps,
        error=None,
        streamed_tokens=0,
        tools_in_flight=(),
        last_seq=event.seq,
    )


def _on_llm_call_started(state: ExecutionContext, event: LlmCallStarted) -> ExecutionContext:
    _require_running(state, "llm_call_started")
    if state.messages[-1].role != "user":
        raise InvalidTransition("a model call while tool calls are unanswered")
    return evolve(state, streamed_tokens=0, last_seq=event.seq)


def _on_llm_response(state: ExecutionContext, event: LlmResponse) -> ExecutionContext:
    _require_running(state, "llm_response")
    if state.messages[-1].role != "user":
        raise InvalidTransition("llm_response while tool calls of the last turn are unanswered")
    return evolve(
        state,
        messages=(*state.messages, Message(role="assistant", content=event.content)),
        step=state.step + 1,
        usage=state.usage + event.usage,
        stop_reason=event.stop_reason,
        streamed_tokens=0,
        last_seq=event.seq,
    )


def _on_tool_call_started(state: ExecutionContext, event: ToolCallStarted) -> ExecutionContext:
    _require_running(state, "tool_call_started")
    if event.id not in {call.id for call in state.pending_tool_calls}:
        raise InvalidTransition(f"tool_call_started for {event.id!r}, which is not pending")
    return evolve(state, tools_in_flight=(*state.tools_in_flight, event.id), last_seq=event.seq)


def _on_tool_call_finished(state: ExecutionContext, event: ToolCallFinished) -> ExecutionContext:
    _require_running(state, "tool_call_finished")
    if event.id not in {call.id for call in state.pending_tool_calls}:
        raise InvalidTransition(f"tool_call_finished for {event.id!r}, which is not pending")
    results = (*state.pending_results, (event.id, event.result))
    in_flight = tuple(i for i in state.tools_in_flight if i != event.id)
    turn = state.messages[-1].content
    asked = [block.id for block in turn if isinstance(block, ToolUseBlock)]
    if len(results) < len(asked):
        return evolve(state, pending_results=results, tools_in_flight=in_flight, last_seq=event.seq)
    # Every call of the turn is answered: one user message, in the order the model asked.
    by_id = dict(results)
    answer = Message(
        role="user",
        content=tuple(
            ToolResultBlock(
                tool_use_id=tool_use_id,
                content=by_id[tool_use_id].content,
                is_error=by_id[tool_use_id].is_error,
            )
            for tool_use_id in asked
        ),
    )
    return evolve(
        state,
        messages=(*state.messages, answer),
        pending_results=(),
        tools_in_flight=in_flight,
        last_seq=event.seq,
    )


def _on_run_finished(state: ExecutionContext, event: RunFinished) -> ExecutionContext:
    _require_running(state, "run_finished")
    if event.status is Status.RUNNING:
        raise InvalidTransition("run_finished with status running")
    # A resumed run finishes once per session; the state keeps the total wall time.
    return evolve(
        state,
        status=event.status,
        error=event.error,
        elapsed=state.elapsed + event.elapsed,
        last_seq=event.seq,
    )
