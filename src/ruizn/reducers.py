"""All state transitions, in one file: `reduce(state, event) -> state`.

Everything that affects the run's state machine lives here. Pure: no clock, no I/O.
`ALLOWED` says, as data, which events may follow each phase; an event outside it, or one
whose fields contradict the state (a step number, an attempt, a tool call that was never
asked for, a run_finished whose totals disagree), raises `InvalidTransition`. The runner
reduces every event *before* it writes it (h11's order), so a refused event never reaches
the log, and a corrupt or spliced log is refused by replay instead of misread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import assert_never

from attrs import evolve

from ruizn.bounds import deeper_than, too_deep
from ruizn.config import APPROVAL_MODES
from ruizn.events import (
    Event,
    LlmCallFailed,
    LlmCallStarted,
    LlmResponse,
    LlmToken,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallFinished,
    ToolCallStarted,
)
from ruizn.state import (
    Approval,
    CallFailure,
    ContentBlock,
    ErrorType,
    ExecutionContext,
    Message,
    Phase,
    Status,
    TextBlock,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
    TurnResults,
)


class InvalidTransition(ValueError):
    """The event cannot follow the state it was applied to."""


# The legal transitions: which event types each phase accepts. run_resumed is legal in every
# phase, because a crash (kill -9, power cut) can stop a run anywhere without run_finished.
ALLOWED: Mapping[Phase, frozenset[str]] = {
    Phase.READY: frozenset({LlmCallStarted.TAG, RunFinished.TAG, RunResumed.TAG}),
    Phase.STREAMING: frozenset(
        {LlmToken.TAG, LlmCallFailed.TAG, LlmResponse.TAG, RunFinished.TAG, RunResumed.TAG}
    ),
    Phase.TOOLS: frozenset(
        {
            ToolApprovalRequested.TAG,
            ToolApprovalDecided.TAG,
            ToolCallStarted.TAG,
            ToolCallFinished.TAG,
            RunFinished.TAG,
            RunResumed.TAG,
        }
    ),
    Phase.DONE: frozenset({RunFinished.TAG, RunResumed.TAG}),
    Phase.FINISHED: frozenset({RunResumed.TAG}),
}

# The stop reasons that end a turn with nothing more to do (the run then succeeds).
SUCCESS_STOPS = frozenset({"end_turn", "stop_sequence"})
# The model paused a long turn and must be called again with its partial answer.
PAUSE_STOP = "pause_turn"


def start(event: RunStarted) -> ExecutionContext:
    """The state a run begins in: the goal is the first user message."""
    if event.seq != 1:
        raise InvalidTransition(f"run_started must have seq 1, not {event.seq}")
    if event.max_steps < 1 or event.max_tokens < 1 or event.max_retries < 0:
        raise InvalidTransition("run_started with a limit below its minimum")
    if event.approval not in APPROVAL_MODES:
        raise InvalidTransition(f"run_started with an unknown approval mode {event.approval!r}")
    return ExecutionContext(
        run_id=event.run_id,
        goal=event.goal,
        model=event.model,
        max_steps=event.max_steps,
        max_tokens=event.max_tokens,
        system=event.system,
        tools=event.tools,
        workspace=event.workspace,
        max_retries=event.max_retries,
        retry_base_delay=event.retry_base_delay,
        tool_sources=event.tool_sources,
        tool_concurrency=event.tool_concurrency,
        allow_secret_files=event.allow_secret_files,
        mcp_servers=event.mcp_servers,
        approval=event.approval,
        messages=(Message(role="user", content=(TextBlock(text=event.goal),)),),
        last_seq=1,
    )


def reduce(state: ExecutionContext, event: Event) -> ExecutionContext:
    if event.seq != state.last_seq + 1:
        raise InvalidTransition(
            f"seq {event.seq} does not follow {state.last_seq}: events missing or out of order"
        )
    if event.TAG not in ALLOWED[state.phase]:
        if isinstance(event, RunStarted):
            raise InvalidTransition(
                f"a second run_started (run {event.run_id}) inside run {state.run_id}"
            )
        raise InvalidTransition(
            f"{event.TAG} cannot follow phase {state.phase.value}"
            f" (allowed: {', '.join(sorted(ALLOWED[state.phase]))})"
        )
    match event:
        case RunStarted():  # pragma: no cover - no phase allows it (refused above)
            raise AssertionError("unreachable")
        case RunResumed():
            return _on_run_resumed(state, event)
        case LlmCallStarted():
            return _on_llm_call_started(state, event)
        case LlmToken():
            # The hot path: one counter, no copies of the text (it lives in the log).
            return evolve(state, streamed_tokens=state.streamed_tokens + 1, last_seq=event.seq)
        case LlmCallFailed():
            return _on_llm_call_failed(state, event)
        case LlmResponse():
            return _on_llm_response(state, event)
        case ToolCallStarted():
            return _on_tool_call_started(state, event)
        case ToolCallFinished():
            return _on_tool_call_finished(state, event)
        case ToolApprovalRequested():
            return _on_approval_requested(state, event)
        case ToolApprovalDecided():
            return _on_approval_decided(state, event)
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
            and state.phase is Phase.STREAMING
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
    if state.phase is not Phase.STREAMING:
        raise InvalidTransition(f"llm_token cannot follow phase {state.phase.value}")
    return evolve(
        state, streamed_tokens=state.streamed_tokens + count, last_seq=state.last_seq + count
    )


def reply_problem(content: tuple[ContentBlock, ...]) -> str | None:
    """Why an assistant turn cannot enter the history (the API would refuse it back), or None.

    Shared by the reducer (a log holding such a turn is refused) and the runner's decision
    (such a reply becomes a failed, retried model call instead of a response).
    """
    seen: set[str] = set()
    for block in content:
        if isinstance(block, ToolUseBlock):
            if not block.id:
                return f"a tool_use block ({block.name!r}) has no id"
            if block.id in seen:
                return f"two tool_use blocks share the id {block.id!r}"
            if not block.name:
                return f"tool_use {block.id!r} has no name"
            if deeper_than(block.input):
                return too_deep(f"tool_use {block.id!r} input")
            seen.add(block.id)
        elif isinstance(block, ToolResultBlock):
            return "an assistant turn holds a tool_result block"
    return None


def phase_after_turn(state: ExecutionContext) -> Phase:
    """The phase once the last assistant turn is in: tools to answer, a call to continue a
    paused turn, or the end."""
    if state.turn_open:
        return Phase.TOOLS
    if state.continuing:
        return Phase.READY
    return Phase.DONE


def _on_run_resumed(state: ExecutionContext, event: RunResumed) -> ExecutionContext:
    if event.max_steps < 1 or (event.max_tokens is not None and event.max_tokens < 1):
        raise InvalidTransition("run_resumed with a limit below its minimum")
    max_tokens = event.max_tokens if event.max_tokens is not None else state.max_tokens
    continuing = state.continuing
    # A text answer cut at max_tokens can go on once the limit is raised: the next call
    # continues that turn (the API takes a final assistant message as the start of its answer).
    if (
        state.messages[-1].role == "assistant"
        and state.stop_reason == "max_tokens"
        and not state.turn_open
        and max_tokens > state.max_tokens
    ):
        continuing = True
    resumed = evolve(
        state,
        status=Status.RUNNING,
        max_steps=event.max_steps,
        max_tokens=max_tokens,
        error=None,
        continuing=continuing,
        streamed_tokens=0,
        tools_in_flight=(),
        attempt=0,
        failure=None,
        last_seq=event.seq,
    )
    if resumed.messages[-1].role == "user":
        return evolve(resumed, phase=Phase.READY)
    return evolve(resumed, phase=phase_after_turn(resumed))


def _on_llm_call_started(state: ExecutionContext, event: LlmCallStarted) -> ExecutionContext:
    if event.step != state.step + 1:
        raise InvalidTransition(
            f"llm_call_started for step {event.step}, but the next step is {state.step + 1}"
        )
    if event.step > state.max_steps:
        raise InvalidTransition(f"step {event.step} is past max_steps {state.max_steps}")
    if event.attempt != state.attempt + 1:
        raise InvalidTransition(
            f"llm_call_started attempt {event.attempt}, but the next attempt is {state.attempt + 1}"
        )
    if state.failure is not None and not state.failure.will_retry:
        raise InvalidTransition("a model call after the last attempt gave up")
    return evolve(
        state,
        phase=Phase.STREAMING,
        attempt=event.attempt,
        streamed_tokens=0,
        last_seq=event.seq,
    )


def _on_llm_call_failed(state: ExecutionContext, event: LlmCallFailed) -> ExecutionContext:
    if event.attempt != state.attempt:
        raise InvalidTransition(
            f"llm_call_failed for attempt {event.attempt}, but attempt {state.attempt} is running"
        )
    if event.will_retry and event.attempt > state.max_retries:
        raise InvalidTransition(
            f"a retry after attempt {event.attempt}, past max_retries {state.max_retries}"
        )
    if event.retry_in < 0:
        raise InvalidTransition("llm_call_failed with a negative retry_in")
    failure = CallFailure(
        message=event.message, will_retry=event.will_retry, retry_in=event.retry_in
    )
    return evolve(state, phase=Phase.READY, failure=failure, streamed_tokens=0, last_seq=event.seq)


def _on_llm_response(state: ExecutionContext, event: LlmResponse) -> ExecutionContext:
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
    next_state = evolve(
        state,
        messages=(*messages, Message(role="assistant", content=content)),
        step=state.step + 1,
        attempt=0,
        failure=None,
        usage=state.usage + usage,
        stop_reason=event.stop_reason,
        continuing=event.stop_reason == PAUSE_STOP and not calls,
        turn_calls=calls,
        turn_results=TurnResults(len(calls)),
        turn_open=len(calls),
        turn_approvals=(None,) * len(calls),
        turn_index={call.id: i for i, call in enumerate(calls)},
        streamed_tokens=0,
        last_seq=event.seq,
    )
    return evolve(next_state, phase=phase_after_turn(next_state))


def _turn_position(state: ExecutionContext, tool_use_id: str, what: str) -> int:
    index = state.turn_index.get(tool_use_id)
    if index is None:
        raise InvalidTransition(f"{what} for {tool_use_id!r}, which the model did not ask for")
    if state.turn_results.get(index) is not None:
        raise InvalidTransition(f"{what} for {tool_use_id!r}, which is answered already")
    return index


def _on_tool_call_started(state: ExecutionContext, event: ToolCallStarted) -> ExecutionContext:
    index = _turn_position(state, event.id, "tool_call_started")
    call = state.turn_calls[index]
    if event.name != call.name or event.input != call.input:
        raise InvalidTransition(
            f"tool_call_started for {event.id!r} names another tool or input than the model's"
        )
    if event.id in state.tools_in_flight:
        raise InvalidTransition(f"tool_call_started twice for {event.id!r}")
    approval = state.turn_approvals[index]
    if approval is not None and approval.approved is not True:
        # The one rule approval rests on: a call that asked for a decision runs only after
        # a yes. The runner reduces before it writes, so it cannot start such a call.
        raise InvalidTransition(
            f"tool_call_started for {event.id!r}, which is "
            + ("denied" if approval.approved is False else "still awaiting approval")
        )
    return evolve(state, tools_in_flight=(*state.tools_in_flight, event.id), last_seq=event.seq)


def _on_tool_call_finished(state: ExecutionContext, event: ToolCallFinished) -> ExecutionContext:
    index = _turn_position(state, event.id, "tool_call_finished")
    approval = state.turn_approvals[index]
    if approval is not None:
        if approval.approved is None:
            raise InvalidTransition(
                f"tool_call_finished for {event.id!r}, which is still awaiting approval"
            )
        if approval.approved is False and event.result.error_type != ErrorType.DENIED.value:
            raise InvalidTransition(
                f"tool_call_finished for the denied call {event.id!r} is not a denied result"
            )
    results = state.turn_results.answer(index, event.result)  # O(1): see TurnResults
    in_flight = state.tools_in_flight
    if event.id in in_flight:
        in_flight = tuple(i for i in in_flight if i != event.id)
    if state.turn_open > 1:
        return evolve(
            state,
            turn_results=results,
            turn_open=state.turn_open - 1,
            tools_in_flight=in_flight,
            last_seq=event.seq,
        )
    # Every call of the turn is answered: one user message, in the order the model asked.
    answer = Message(
        role="user",
        content=tuple(
            ToolResultBlock(tool_use_id=call.id, content=result.content, is_error=result.is_error)
            for call, result in zip(state.turn_calls, results, strict=True)
            if result is not None
        ),
    )
    return evolve(
        state,
        phase=Phase.READY,
        messages=(*state.messages, answer),
        turn_calls=(),
        turn_results=TurnResults(),
        turn_open=0,
        turn_approvals=(),
        turn_index={},
        tools_in_flight=in_flight,
        last_seq=event.seq,
    )


def _on_approval_requested(
    state: ExecutionContext, event: ToolApprovalRequested
) -> ExecutionContext:
    index = _turn_position(state, event.id, "tool_approval_requested")
    call = state.turn_calls[index]
    if event.name != call.name or event.input != call.input:
        raise InvalidTransition(
            f"tool_approval_requested for {event.id!r} names another tool or input than the model's"
        )
    if state.turn_approvals[index] is not None:
        raise InvalidTransition(f"tool_approval_requested twice for {event.id!r}")
    if event.id in state.tools_in_flight:
        raise InvalidTransition(f"tool_approval_requested for {event.id!r}, which has started")
    return evolve(
        state,
        turn_approvals=_replace_at(state.turn_approvals, index, Approval()),
        last_seq=event.seq,
    )


def _on_approval_decided(state: ExecutionContext, event: ToolApprovalDecided) -> ExecutionContext:
    index = _turn_position(state, event.id, "tool_approval_decided")
    approval = state.turn_approvals[index]
    if approval is None:
        raise InvalidTransition(f"tool_approval_decided for {event.id!r}, which was not requested")
    if approval.approved is not None:
        raise InvalidTransition(f"tool_approval_decided twice for {event.id!r}")
    name = state.turn_calls[index].name
    match event.by:
        case "policy":
            # Only the modes that decide without a person, and only their own answer.
            if state.approval == "ask" or event.approved != (state.approval == "always"):
                raise InvalidTransition(
                    f"a policy decision ({'approve' if event.approved else 'deny'}) under"
                    f" approval mode {state.approval}"
                )
        case "always-rule":
            if not event.approved or name not in state.always_approved:
                raise InvalidTransition(
                    f"an always-rule decision for {name!r}, which nobody approved for the run"
                )
        case "user":
            pass
        case _:
            raise InvalidTransition(f"tool_approval_decided by {event.by!r}")
    if event.always and not (event.approved and event.by == "user"):
        raise InvalidTransition("only a person's approval can approve a tool for the whole run")
    always = state.always_approved
    if event.always and name not in always:
        always = (*always, name)
    decided = Approval(approved=event.approved, by=event.by, reason=event.reason)
    return evolve(
        state,
        turn_approvals=_replace_at(state.turn_approvals, index, decided),
        always_approved=always,
        last_seq=event.seq,
    )


def _replace_at(
    items: tuple[Approval | None, ...], index: int, item: Approval
) -> tuple[Approval | None, ...]:
    return (*items[:index], item, *items[index + 1 :])


def _on_run_finished(state: ExecutionContext, event: RunFinished) -> ExecutionContext:
    if event.status is Status.RUNNING:
        raise InvalidTransition("run_finished with status running")
    if event.status is Status.AWAITING_APPROVAL and not (
        state.phase is Phase.TOOLS and state.awaiting_approval
    ):
        raise InvalidTransition("run_finished awaiting_approval, but no call awaits a decision")
    if event.status is Status.SUCCESS and not (
        state.phase is Phase.DONE and state.stop_reason in SUCCESS_STOPS
    ):
        raise InvalidTransition("run_finished success, but the model has not ended its turn")
    if event.status is Status.MAX_STEPS and not (
        state.phase is Phase.READY and state.step >= state.max_steps
    ):
        raise InvalidTransition(
            f"run_finished max_steps after {state.step} of {state.max_steps} steps"
        )
    if event.steps != state.step:
        raise InvalidTransition(f"run_finished says {event.steps} steps; the run took {state.step}")
    if event.usage != state.usage:
        raise InvalidTransition("run_finished usage disagrees with the responses' usage")
    # A resumed run finishes once per session; the state keeps the total wall time.
    return evolve(
        state,
        phase=Phase.FINISHED,
        status=event.status,
        error=event.error,
        streamed_tokens=0,
        elapsed=state.elapsed + event.elapsed,
        last_seq=event.seq,
    )
