"""All state transitions, in one file: `reduce(state, event) -> state`.

Everything that affects the run's state machine lives here. Pure: no clock, no I/O.

Theory of operation. A run is one machine whose phase says what may happen next:

    READY --llm_call_started--> STREAMING --llm_token*--> STREAMING
    STREAMING --llm_call_failed--> READY            (decide retries, or gives up)
    STREAMING --llm_response--> TOOLS | READY | DONE  (rule `after_turn`)
    TOOLS --tool_call_finished--> TOOLS | READY     (rule `after_result`: READY once the
                                                     last call of the turn is answered)
    READY | STREAMING | TOOLS | DONE --run_finished--> FINISHED
    any phase --run_resumed--> READY | TOOLS | DONE (rule `after_resume`: a crash can stop a
                                                     run anywhere without run_finished)
    READY | DONE --user_message--> READY            (`ruizn continue`, after run_resumed:
                                                     a person's message joins the history)

Inside TOOLS each call of the turn runs its own small machine, kept in `turn_approvals`,
`tools_in_flight` and `turn_results`: a call that needs approval is requested, then decided
(by a person, the approval mode, or a tool approved for the run), and runs only after a yes;
a denied call is answered `denied`; every call is answered exactly once, and the answers
merge into one user message in the order the model asked. The continuation sub-machine: a
turn paused (`pause_turn`), or a text cut at max_tokens once a resume raised the limit, sets
`continuing`, so the next llm_response joins the same assistant message.

`TRANSITIONS` below is the whole table: (phase, event type) -> the next phase, or the named
rule (in `ruizn.rules`) that picks it from the new state. `ALLOWED`, the events each phase
accepts, is derived from it. An event outside it, or one whose fields contradict the state
(a step number, an attempt, a tool call that was never asked for, a run_finished whose
status the rules do not give, totals that disagree), raises `InvalidTransition`. The runner
reduces every event *before* it writes it (h11's order), so a refused event never reaches
the log, and a corrupt or spliced log is refused by replay instead of misread.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable, Mapping
from typing import assert_never

from attrs import evolve

from ruizn.bounds import deeper_than, too_deep
from ruizn.events import (
    BudgetSpent,
    ContextCleared,
    Event,
    HookRan,
    LlmCallFailed,
    LlmCallStarted,
    LlmResponse,
    LlmToken,
    OutputChecked,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallFinished,
    ToolCallStarted,
    ToolsChanged,
    UserMessage,
)
from ruizn.hooks import hook_note, stronger
from ruizn.media import problem as media_problem
from ruizn.media import result_size, tally_of_run
from ruizn.rules import (
    PAUSE_STOP,
    changed_tools,
    check_output,
    limit_stop,
    output_exhausted,
    output_feedback,
    phase_after_hook,
    phase_after_output,
    phase_after_result,
    phase_after_resume,
    phase_after_turn,
    pre_decision,
    reply_problem,
    rule_decision,
    turn_stop,
)
from ruizn.state import (
    Approval,
    CallFailure,
    ErrorType,
    ExecutionContext,
    JsonObject,
    Message,
    Phase,
    PreToolVerdict,
    Status,
    TextBlock,
    ToolCall,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    TurnResults,
)
from ruizn.toolsource import SourceKind, ToolSource
from ruizn.window import added_tokens, cleared_tokens, last_turn_start, over_limit


class InvalidTransition(ValueError):
    """The event cannot follow the state it was applied to."""


class Rule(enum.Enum):
    """A next phase that depends on the state the event leaves (see `ruizn.rules`)."""

    AFTER_TURN = "after_turn"
    AFTER_RESULT = "after_result"
    AFTER_RESUME = "after_resume"
    AFTER_OUTPUT = "after_output"
    AFTER_HOOK = "after_hook"


RULES: Mapping[Rule, Callable[[ExecutionContext], Phase]] = {
    Rule.AFTER_TURN: phase_after_turn,
    Rule.AFTER_RESULT: phase_after_result,
    Rule.AFTER_RESUME: phase_after_resume,
    Rule.AFTER_OUTPUT: phase_after_output,
    Rule.AFTER_HOOK: phase_after_hook,
}

_R, _S, _T, _D, _F = Phase.READY, Phase.STREAMING, Phase.TOOLS, Phase.DONE, Phase.FINISHED
# Every move a run can make.
TRANSITIONS: Mapping[tuple[Phase, str], Phase | Rule] = {
    (_R, LlmCallStarted.TAG): _S,
    (_R, RunFinished.TAG): _F,
    (_R, RunResumed.TAG): Rule.AFTER_RESUME,
    (_R, ContextCleared.TAG): _R,
    (_R, BudgetSpent.TAG): _R,
    (_S, LlmToken.TAG): _S,
    (_S, LlmCallFailed.TAG): _R,
    (_S, LlmResponse.TAG): Rule.AFTER_TURN,
    (_S, RunFinished.TAG): _F,
    (_S, RunResumed.TAG): Rule.AFTER_RESUME,
    (_T, ToolApprovalRequested.TAG): _T,
    (_T, ToolApprovalDecided.TAG): _T,
    (_T, ToolCallStarted.TAG): _T,
    (_T, ToolCallFinished.TAG): Rule.AFTER_RESULT,
    (_R, ToolsChanged.TAG): _R,
    (_T, ToolsChanged.TAG): _T,
    (_T, RunFinished.TAG): _F,
    (_T, RunResumed.TAG): Rule.AFTER_RESUME,
    (_D, RunFinished.TAG): _F,
    (_D, RunResumed.TAG): Rule.AFTER_RESUME,
    (_F, RunResumed.TAG): Rule.AFTER_RESUME,
    # `ruizn continue`: a person's message after the run_resumed that takes the run on, which
    # leaves it READY (the history ends with the user) or DONE (with a finished answer).
    (_R, UserMessage.TAG): _R,
    (_D, UserMessage.TAG): _R,
    # A run with an output schema: its final answer checked (a text answer, DONE) or its
    # final_output call answered (tool mode, TOOLS); a miss goes back to the model (READY).
    (_D, OutputChecked.TAG): Rule.AFTER_OUTPUT,
    (_T, OutputChecked.TAG): Rule.AFTER_OUTPUT,
    # A hook ran (ruizn.hooks): at the start (READY), around a tool call (TOOLS), at the end
    # of a turn (DONE: a Stop hook that blocks sends the model back, READY).
    (_R, HookRan.TAG): _R,
    (_T, HookRan.TAG): _T,
    (_D, HookRan.TAG): Rule.AFTER_HOOK,
}

# Which event types each phase accepts: derived from the table, never written twice.
ALLOWED: Mapping[Phase, frozenset[str]] = {
    phase: frozenset(tag for (source, tag) in TRANSITIONS if source is phase) for phase in Phase
}


def start(event: RunStarted) -> ExecutionContext:
    """The state a run begins in: the goal is the first user message. (The settings were
    checked when the record was made: a log holding bad ones does not decode.)"""
    if event.seq != 1:
        raise InvalidTransition(f"run_started must have seq 1, not {event.seq}")
    for schema in event.settings.tools:
        if deeper_than(schema):
            raise InvalidTransition(too_deep(f"the schema of tool {schema.get('name')!r}"))
    return ExecutionContext(
        run_id=event.run_id,
        goal=event.goal,
        settings=event.settings,
        messages=(Message(role="user", content=(TextBlock(text=event.goal),)),),
        last_seq=1,
    )


def reduce(state: ExecutionContext, event: Event) -> ExecutionContext:
    if event.seq != state.last_seq + 1:
        raise InvalidTransition(
            f"seq {event.seq} does not follow {state.last_seq}: events missing or out of order"
        )
    target = TRANSITIONS.get((state.phase, event.TAG))
    if target is None:
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
            after = _on_run_resumed(state, event)
        case LlmCallStarted():
            after = _on_llm_call_started(state, event)
        case LlmToken():
            # The hot path: one counter, no copies of the text (it lives in the log).
            return evolve(state, streamed_tokens=state.streamed_tokens + 1, last_seq=event.seq)
        case LlmCallFailed():
            after = _on_llm_call_failed(state, event)
        case LlmResponse():
            after = _on_llm_response(state, event)
        case ToolCallStarted():
            after = _on_tool_call_started(state, event)
        case ToolCallFinished():
            after = _on_tool_call_finished(state, event)
        case ToolApprovalRequested():
            after = _on_approval_requested(state, event)
        case ToolApprovalDecided():
            after = _on_approval_decided(state, event)
        case ToolsChanged():
            after = _on_tools_changed(state, event)
        case ContextCleared():
            after = _on_context_cleared(state, event)
        case BudgetSpent():
            after = _on_budget_spent(state, event)
        case RunFinished():
            after = _on_run_finished(state, event)
        case UserMessage():
            after = _on_user_message(state, event)
        case OutputChecked():
            after = _on_output_checked(state, event)
        case HookRan():
            after = _on_hook_ran(state, event)
        case _:
            assert_never(event)
    phase = target if isinstance(target, Phase) else RULES[target](after)
    return after if phase is after.phase else evolve(after, phase=phase)


def rebuild(events: Iterable[Event]) -> ExecutionContext:
    """The state a run is in after `events` (which must begin with RunStarted): the fold.
    The one rebuild: a file's log (`ruizn.replay`), the fleet's table and a fork all come
    through here."""
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


def reasked(state: ExecutionContext) -> ExecutionContext:
    """The state with the log's approvals withdrawn: each call approved but not started (no
    result, not in flight) waits for a decision again, and no tool is approved by an
    "always" rule. Denials stay: they run nothing."""
    approvals = tuple(
        Approval()
        if approval is not None
        and approval.approved is True
        and result is None
        and call.id not in state.tools_in_flight
        else approval
        for call, result, approval in zip(
            state.turn_calls, state.turn_results, state.turn_approvals, strict=True
        )
    )
    return evolve(state, turn_approvals=approvals, always_approved=())


def _on_run_resumed(state: ExecutionContext, event: RunResumed) -> ExecutionContext:
    if event.reask:
        state = reasked(state)
    settings = state.settings
    if event.max_steps < 1 or (event.max_tokens is not None and event.max_tokens < 1):
        raise InvalidTransition("run_resumed with a limit below its minimum")
    if not 0.0 <= event.elapsed < 1e10:  # False for NaN
        raise InvalidTransition(f"run_resumed with elapsed {event.elapsed!r}")
    try:
        resumed_settings = evolve(
            settings,
            max_steps=event.max_steps,
            max_tokens=settings.max_tokens if event.max_tokens is None else event.max_tokens,
            workspace=settings.workspace if event.workspace is None else event.workspace,
            approval=settings.approval if event.approval is None else event.approval,
            max_cost=settings.max_cost if event.max_cost is None else event.max_cost,
            max_context=settings.max_context if event.max_context is None else event.max_context,
        )
    except ValueError as exc:  # the settings' own checks (an approval mode, an empty path)
        raise InvalidTransition(f"run_resumed: {exc}") from None
    continuing = state.continuing
    # A text answer cut at max_tokens can go on once the limit is raised: the next call
    # continues that turn (the API takes a final assistant message as the start of its answer).
    if (
        state.messages[-1].role == "assistant"
        and state.stop_reason == "max_tokens"
        and not state.turn_open
        and resumed_settings.max_tokens > settings.max_tokens
    ):
        continuing = True
    return evolve(
        state,
        settings=resumed_settings,
        status=Status.RUNNING,
        error=None,
        continuing=continuing,
        streamed_tokens=0,
        tools_in_flight=(),
        attempt=0,
        failure=None,
        budget_spent=None,
        # An answer that never matched gets a new round of retries.
        output_checks=state.output_checks if state.output_valid else 0,
        elapsed=state.elapsed + event.elapsed,
        last_seq=event.seq,
    )


def _on_user_message(state: ExecutionContext, event: UserMessage) -> ExecutionContext:
    if not event.text.strip():
        raise InvalidTransition("user_message with no text")
    if state.failure is not None:
        raise InvalidTransition("user_message between the attempts of a model call")
    text = TextBlock(text=event.text)
    last = state.messages[-1]
    if last.role == "user":
        # After a turn's results (a run stopped at max_steps) the message joins them: roles
        # alternate, and the model reads the results and then the message.
        messages = (*state.messages[:-1], Message(role="user", content=(*last.content, text)))
    else:
        messages = (*state.messages, Message(role="user", content=(text,)))
    # An answer cut at max_tokens is not continued once a person has spoken after it. A new
    # message asks for a new answer: a structured run checks that one again.
    return evolve(
        state,
        messages=messages,
        continuing=False,
        output=None,
        output_valid=False,
        output_checks=0,
        last_seq=event.seq,
    )


def _on_llm_call_started(state: ExecutionContext, event: LlmCallStarted) -> ExecutionContext:
    if event.step != state.step + 1:
        raise InvalidTransition(
            f"llm_call_started for step {event.step}, but the next step is {state.step + 1}"
        )
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


def _on_llm_call_failed(state: ExecutionContext, event: LlmCallFailed) -> ExecutionContext:
    if event.attempt != state.attempt:
        raise InvalidTransition(
            f"llm_call_failed for attempt {event.attempt}, but attempt {state.attempt} is running"
        )
    if event.will_retry and event.attempt > state.settings.max_retries:
        raise InvalidTransition(
            f"a retry after attempt {event.attempt}, past max_retries {state.settings.max_retries}"
        )
    if event.retry_in < 0:
        raise InvalidTransition("llm_call_failed with a negative retry_in")
    failure = CallFailure(
        message=event.message, will_retry=event.will_retry, retry_in=event.retry_in
    )
    return evolve(state, failure=failure, streamed_tokens=0, last_seq=event.seq)


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
        messages=(*messages, Message(role="assistant", content=content)),
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
    if event.id in state.turn_stale:
        raise InvalidTransition(f"tool_call_started for {event.id!r}, whose tool changed")
    if pre_decision(state, event.id) == "deny":
        raise InvalidTransition(f"tool_call_started for {event.id!r}, which a hook denied")
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
    if event.id in state.turn_stale:
        # Its tool changed after the model asked: answered with why, whatever was approved.
        if event.result.error_type != ErrorType.UNKNOWN_TOOL.value:
            raise InvalidTransition(
                f"tool_call_finished for {event.id!r}, whose tool changed, is not an"
                " unknown_tool error"
            )
    elif approval is not None:
        if approval.approved is None:
            raise InvalidTransition(
                f"tool_call_finished for {event.id!r}, which is still awaiting approval"
            )
        if approval.approved is False and event.result.error_type != ErrorType.DENIED.value:
            raise InvalidTransition(
                f"tool_call_finished for the denied call {event.id!r} is not a denied result"
            )
    # Its images must fit every request from now on (the history keeps them).
    problem, media = media_problem(event.result.content, state.media)
    if problem is not None:
        raise InvalidTransition(f"tool_call_finished for {event.id!r}: {problem}")
    results = state.turn_results.answer(index, event.result)  # O(1): see TurnResults
    in_flight = state.tools_in_flight
    if event.id in in_flight:
        in_flight = tuple(i for i in in_flight if i != event.id)
    context_tokens = state.context_tokens + added_tokens(event.result.content)
    if state.turn_open > 1:
        return evolve(
            state,
            turn_results=results,
            turn_open=state.turn_open - 1,
            tools_in_flight=in_flight,
            media=media,
            context_tokens=context_tokens,
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
        messages=(*state.messages, answer),
        turn_calls=(),
        turn_results=TurnResults(),
        turn_open=0,
        turn_approvals=(),
        turn_stale=(),
        turn_index={},
        tools_in_flight=in_flight,
        media=media,
        context_tokens=context_tokens,
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
    call = state.turn_calls[index]
    if event.by in ("policy", "always-rule"):
        # A decision made without a person must be the one the run's rules make.
        ruled = rule_decision(state, call)
        if ruled is None or ruled.by != event.by or ruled.approved != event.approved:
            raise InvalidTransition(
                f"a {event.by} decision ({'approve' if event.approved else 'deny'}) for"
                f" {call.name!r} that the run's rules (approval mode"
                f" {state.settings.approval}) do not make"
            )
    elif event.by != "user":
        raise InvalidTransition(f"tool_approval_decided by {event.by!r}")
    if event.always and not (event.approved and event.by == "user"):
        raise InvalidTransition("only a person's approval can approve a tool for the whole run")
    always = state.always_approved
    if event.always and call.name not in always:
        always = (*always, call.name)
    decided = Approval(approved=event.approved, by=event.by, reason=event.reason)
    return evolve(
        state,
        turn_approvals=_replace_at(state.turn_approvals, index, decided),
        always_approved=always,
        last_seq=event.seq,
    )


def _on_tools_changed(state: ExecutionContext, event: ToolsChanged) -> ExecutionContext:
    """The run's tools from now on. Only the MCP tools of the servers named may change: the
    rest (built-ins, code the run imports, other servers' tools) stay exactly as they were,
    so no line of a log can add code to load on resume."""
    settings = state.settings
    recorded = {str(server.get("name")) for server in settings.mcp_servers}
    servers = set(event.servers)
    if not servers or not servers <= recorded:
        raise InvalidTransition(
            f"tools_changed for MCP servers {sorted(servers)}, not the run's {sorted(recorded)}"
        )

    def theirs(source: ToolSource) -> bool:
        return source.kind is SourceKind.MCP and source.ref.partition("/")[0] in servers

    def kept(
        tools: tuple[JsonObject, ...], sources: tuple[ToolSource, ...]
    ) -> tuple[list[JsonObject], list[ToolSource]]:
        changing = {source.tool for source in sources if theirs(source)}
        return (
            [tool for tool in tools if tool.get("name") not in changing],
            [source for source in sources if source.tool not in changing],
        )

    if kept(event.tools, event.tool_sources) != kept(settings.tools, settings.tool_sources):
        raise InvalidTransition("tools_changed changes tools other than those of its MCP servers")
    names = [tool.get("name") for tool in event.tools]
    if len(set(names)) != len(names) or not all(isinstance(name, str) for name in names):
        raise InvalidTransition("tools_changed names a tool twice, or one without a name")
    if any(theirs(s) and s.tool not in names for s in event.tool_sources):
        raise InvalidTransition("tools_changed records a source for a tool it does not offer")
    for schema in event.tools:
        if deeper_than(schema):
            raise InvalidTransition(too_deep(f"the schema of tool {schema.get('name')!r}"))
    changed = changed_tools(settings, event.tools, event.tool_sources)
    stale = [
        call.id
        for call in state.pending_tool_calls
        if call.name in changed and call.id not in state.turn_stale
    ]
    if any(call_id in state.tools_in_flight for call_id in stale):
        raise InvalidTransition("tools_changed while a call of a changed tool runs")
    return evolve(
        state,
        settings=evolve(settings, tools=event.tools, tool_sources=event.tool_sources),
        turn_stale=(*state.turn_stale, *stale),
        last_seq=event.seq,
    )


def _on_context_cleared(state: ExecutionContext, event: ContextCleared) -> ExecutionContext:
    """Each named result, before the last turn and not cleared yet, becomes its placeholder."""
    if not event.results:
        raise InvalidTransition("context_cleared clears nothing")
    wanted = {item.tool_use_id: item for item in event.results}
    if len(wanted) != len(event.results):
        raise InvalidTransition("context_cleared names a tool result twice")
    done = set(state.cleared)
    names: dict[str, str] = {}
    messages = list(state.messages)
    found = 0
    freed = 0
    for index in range(last_turn_start(state)):
        message = messages[index]
        blocks = list(message.content)
        changed = False
        for position, block in enumerate(blocks):
            if isinstance(block, ToolUseBlock):
                names[block.id] = block.name
                continue
            if not isinstance(block, ToolResultBlock) or block.tool_use_id not in wanted:
                continue
            item = wanted[block.tool_use_id]
            if block.tool_use_id in done:
                raise InvalidTransition(f"context_cleared: {item.tool_use_id!r} is cleared already")
            if item.size != result_size(block.content) or not item.placeholder.strip():
                raise InvalidTransition(
                    f"context_cleared: the size or placeholder of {item.tool_use_id!r} is wrong"
                )
            if item.name != names.get(block.tool_use_id, "a tool"):
                raise InvalidTransition(
                    f"context_cleared names another tool than the call {item.tool_use_id!r}"
                )
            blocks[position] = evolve(block, content=item.placeholder)
            freed += cleared_tokens(block.content, item.placeholder)
            found += 1
            changed = True
        if changed:
            messages[index] = evolve(message, content=tuple(blocks))
    if found != len(wanted):
        raise InvalidTransition(
            "context_cleared names a tool result that is not in the history before the last turn"
        )
    after = evolve(
        state,
        messages=tuple(messages),
        cleared=(*state.cleared, *wanted),
        context_tokens=max(state.context_tokens - freed, 0),
        last_seq=event.seq,
    )
    # A cleared image leaves the requests: the run may hold another in its place.
    return evolve(after, media=tally_of_run(after))


def _on_budget_spent(state: ExecutionContext, event: BudgetSpent) -> ExecutionContext:
    if not (math.isfinite(event.limit) and math.isfinite(event.spent)):
        raise InvalidTransition("budget_spent with a number that is not finite")
    if event.spent < event.limit:
        raise InvalidTransition(
            f"budget_spent, but {event.spent} spent is under the limit {event.limit}"
        )
    return evolve(state, budget_spent=event.budget or "shared", last_seq=event.seq)


def _replace_at(
    items: tuple[Approval | None, ...], index: int, item: Approval
) -> tuple[Approval | None, ...]:
    return (*items[:index], item, *items[index + 1 :])


def _on_run_finished(state: ExecutionContext, event: RunFinished) -> ExecutionContext:
    status = event.status
    if status is Status.RUNNING:
        raise InvalidTransition("run_finished with status running")
    # A run may end in error or be cancelled at any point (a failure, an internal error, a
    # signal); the other endings are the ones the rules give for the state it is in.
    if status is Status.AWAITING_APPROVAL and not (
        state.phase is Phase.TOOLS and state.awaiting_approval
    ):
        raise InvalidTransition("run_finished awaiting_approval, but no call awaits a decision")
    if status is Status.SUCCESS:
        if state.settings.output_schema is not None:
            if not (state.phase is Phase.DONE and state.output_valid):
                raise InvalidTransition("run_finished success without a valid output")
        elif not (state.phase is Phase.DONE and turn_stop(state).status is Status.SUCCESS):
            raise InvalidTransition("run_finished success, but the model has not ended its turn")
    if status is Status.OUTPUT_INVALID and not (
        state.phase is Phase.DONE
        and state.settings.output_schema is not None
        and output_exhausted(state)
    ):
        raise InvalidTransition("run_finished output_invalid, but the output retries are not spent")
    if status in (Status.MAX_STEPS, Status.MAX_COST):
        stop = limit_stop(state) if state.phase is Phase.READY else None
        if stop is None or stop.status is not status:
            raise InvalidTransition(
                f"run_finished {status.value}, but no limit of the run stops it"
                f" ({state.step} of {state.settings.max_steps} steps,"
                f" ${state.cost} of {state.settings.max_cost})"
            )
    if event.steps != state.step:
        raise InvalidTransition(f"run_finished says {event.steps} steps; the run took {state.step}")
    if event.usage != state.usage:
        raise InvalidTransition("run_finished usage disagrees with the responses' usage")
    if event.cost is not None and event.cost != state.total_cost:
        raise InvalidTransition("run_finished cost disagrees with the responses' costs")
    # A resumed run finishes once per session; the state keeps the total wall time.
    return evolve(
        state,
        status=status,
        error=event.error,
        streamed_tokens=0,
        elapsed=state.elapsed + event.elapsed,
        last_seq=event.seq,
    )


def _on_output_checked(state: ExecutionContext, event: OutputChecked) -> ExecutionContext:
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
        return _on_tool_call_finished(after, answered)
    if feedback is None or output_exhausted(after):
        return after
    message = Message(role="user", content=(TextBlock(text=feedback),))
    return evolve(after, messages=(*after.messages, message))


_HOOK_DECISIONS = frozenset({"none", "allow", "deny", "ask", "block", "stop"})


def _on_hook_ran(state: ExecutionContext, event: HookRan) -> ExecutionContext:
    """A hook's logged answer, applied: the run's hooks say which may run when; what each
    decided changes the turn, the history or the run's end as Claude Code's contract says."""
    if event.decision not in _HOOK_DECISIONS:
        raise InvalidTransition(f"hook_ran with the decision {event.decision!r}")
    if not any(spec.event == event.hook_event for spec in state.settings.hooks):
        raise InvalidTransition(f"hook_ran for {event.hook_event}, which the run has no hook for")
    after = evolve(state, last_seq=event.seq)
    if event.decision == "stop":  # `continue: false`: the run ends, whatever the event
        return evolve(after, hook_stop=event.reason or f"a {event.hook_event} hook")
    match event.hook_event:
        case "PreToolUse":
            return _pre_tool_hook(after, event)
        case "PostToolUse":
            if state.phase is not Phase.TOOLS or event.tool_use_id not in state.tools_in_flight:
                raise InvalidTransition("hook_ran PostToolUse for no call that is running")
            return after
        case "UserPromptSubmit" | "SessionStart":
            if state.phase is not Phase.READY or state.step or state.messages[-1].role != "user":
                raise InvalidTransition(f"hook_ran {event.hook_event} after the run's start")
            after = evolve(after, start_hooks_ran=state.start_hooks_ran + 1)
            if event.decision == "block":
                return evolve(after, hook_stop=f"the prompt was blocked: {event.reason}")
            if event.context is None:
                return after
            first = after.messages[-1]
            note = TextBlock(text=hook_note(event.hook_event, event.context))
            message = evolve(first, content=(*first.content, note))
            return evolve(after, messages=(*after.messages[:-1], message))
        case "Stop":
            if state.phase is not Phase.DONE:
                raise InvalidTransition("hook_ran Stop before the model ended its turn")
            after = evolve(after, stop_hooked_step=state.step)
            if event.decision != "block":
                return after
            if state.messages[-1].role != "assistant":
                return after  # the end came through a tool (final_output): nothing to answer
            back = Message(
                role="user", content=(TextBlock(text=hook_note("Stop", str(event.reason))),)
            )
            # The model is called again with the hook's reason (Claude Code's Stop block).
            return evolve(
                after, messages=(*after.messages, back), stop_blocked=True, phase=Phase.READY
            )
        case "SessionEnd":
            return after
    raise InvalidTransition(f"hook_ran for the unknown event {event.hook_event!r}")


def _pre_tool_hook(state: ExecutionContext, event: HookRan) -> ExecutionContext:
    if state.phase is not Phase.TOOLS or event.tool_use_id is None:
        raise InvalidTransition("hook_ran PreToolUse outside a tool turn")
    index = _turn_position(state, event.tool_use_id, "hook_ran PreToolUse")
    if event.tool_use_id in state.tools_in_flight:
        raise InvalidTransition("hook_ran PreToolUse for a call that has started")
    if event.decision not in ("none", "allow", "deny", "ask"):
        raise InvalidTransition(f"a PreToolUse hook cannot decide {event.decision!r}")
    verdicts = {v.id: v for v in state.turn_pre}
    old = verdicts.get(event.tool_use_id, PreToolVerdict(id=event.tool_use_id))
    decision = stronger(old.decision, event.decision)
    reason = event.reason if decision == event.decision and event.reason else old.reason
    verdicts[old.id] = PreToolVerdict(id=old.id, ran=old.ran + 1, decision=decision, reason=reason)
    calls = state.turn_calls
    if event.updated_input is not None and decision != "deny":
        if deeper_than(event.updated_input):
            raise InvalidTransition(too_deep("a hook's updated tool input"))
        call = calls[index]
        calls = (*calls[:index], evolve(call, input=event.updated_input), *calls[index + 1 :])
    return evolve(state, turn_pre=tuple(verdicts.values()), turn_calls=calls)
