"""All state transitions: `reduce(state, event) -> state`.

The state machine lives here: the table of transitions and the one `match` that dispatches
every event; the cases for model calls are in `ruizn.model_turns`, those for a turn's tool
calls in `ruizn.tool_turns`. Pure: no clock, no I/O.

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
from ruizn.checkpoints import on_checkpoint
from ruizn.child_turns import on_subagent_finished, on_subagent_started
from ruizn.compaction import on_context_compacted
from ruizn.events import (
    BudgetSpent,
    Checkpointed,
    ContextCleared,
    ContextCompacted,
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
    SettingsChanged,
    SubagentFinished,
    SubagentStarted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallFinished,
    ToolCallStarted,
    ToolsChanged,
    UserMessage,
)
from ruizn.media import result_size, tally_of_run
from ruizn.model_turns import (
    on_llm_call_failed,
    on_llm_call_started,
    on_llm_response,
    on_output_checked,
)
from ruizn.rules import InvalidTransition as InvalidTransition  # noqa: PLC0414 - its home here
from ruizn.rules import (
    call_cut,
    limit_stop,
    output_exhausted,
    phase_after_call,
    phase_after_hook,
    phase_after_output,
    phase_after_result,
    phase_after_resume,
    phase_after_turn,
    turn_stop,
)
from ruizn.state import (
    Approval,
    ExecutionContext,
    Message,
    Phase,
    Status,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from ruizn.tool_turns import (
    on_approval_decided,
    on_approval_requested,
    on_hook_ran,
    on_tool_call_finished,
    on_tool_call_started,
    on_tools_changed,
)
from ruizn.window import cleared_tokens, last_turn_start


class Rule(enum.Enum):
    """A next phase that depends on the state the event leaves (see `ruizn.rules`)."""

    AFTER_TURN = "after_turn"
    AFTER_RESULT = "after_result"
    AFTER_RESUME = "after_resume"
    AFTER_OUTPUT = "after_output"
    AFTER_HOOK = "after_hook"
    AFTER_CALL = "after_call"


RULES: Mapping[Rule, Callable[[ExecutionContext], Phase]] = {
    Rule.AFTER_TURN: phase_after_turn,
    Rule.AFTER_RESULT: phase_after_result,
    Rule.AFTER_RESUME: phase_after_resume,
    Rule.AFTER_OUTPUT: phase_after_output,
    Rule.AFTER_HOOK: phase_after_hook,
    Rule.AFTER_CALL: phase_after_call,
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
    (_S, LlmCallFailed.TAG): Rule.AFTER_CALL,
    # Compaction (ruizn.compaction): a compaction call starts where a step would (READY),
    # after an answer that hit the model's window (DONE), or in a stopped run (`ruizn
    # compact`); context_compacted ends it.
    (_D, LlmCallStarted.TAG): _S,
    (_F, LlmCallStarted.TAG): _S,
    (_S, ContextCompacted.TAG): Rule.AFTER_CALL,
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
    # A session's `/model` or `/effort`: logged after the run_resumed, before the message.
    (_R, SettingsChanged.TAG): _R,
    (_D, SettingsChanged.TAG): _D,
    # A run with an output schema: its final answer checked (a text answer, DONE) or its
    # final_output call answered (tool mode, TOOLS); a miss goes back to the model (READY).
    (_D, OutputChecked.TAG): Rule.AFTER_OUTPUT,
    (_T, OutputChecked.TAG): Rule.AFTER_OUTPUT,
    # A hook ran (ruizn.hooks): at the start (READY), around a tool call (TOOLS), at the end
    # of a turn (DONE: a Stop hook that blocks sends the model back, READY).
    (_R, HookRan.TAG): _R,
    (_T, HookRan.TAG): _T,
    (_D, HookRan.TAG): Rule.AFTER_HOOK,
    # The workspace's files saved: before a step's tools that may change them (TOOLS), or
    # when the run ends (READY, TOOLS, DONE). The phase stays.
    (_R, Checkpointed.TAG): _R,
    (_T, Checkpointed.TAG): _T,
    (_D, Checkpointed.TAG): _D,
    # PreCompact and PostCompact hooks around `ruizn compact` in a stopped run.
    (_F, HookRan.TAG): _F,
    # A subagent (an `agent` call's child run) starts and ends inside its call.
    (_T, SubagentStarted.TAG): _T,
    (_T, SubagentFinished.TAG): _T,
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
        agent_of=_agent_of(event),
        agent_root=(
            (event.parent.root or event.parent.run_id)
            if event.parent is not None and event.parent.kind == "agent"
            else None
        ),
    )


def _agent_of(event: RunStarted) -> tuple[str, str] | None:
    parent = event.parent
    if parent is None or parent.kind != "agent":
        return None
    return (parent.run_id, parent.agent or "agent")


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
            after = on_llm_call_started(state, event)
        case LlmToken():
            # The hot path: one counter, no copies of the text (it lives in the log).
            return evolve(state, streamed_tokens=state.streamed_tokens + 1, last_seq=event.seq)
        case LlmCallFailed():
            after = on_llm_call_failed(state, event)
        case LlmResponse():
            after = on_llm_response(state, event)
        case ToolCallStarted():
            after = on_tool_call_started(state, event)
        case ToolCallFinished():
            after = on_tool_call_finished(state, event)
        case ToolApprovalRequested():
            after = on_approval_requested(state, event)
        case ToolApprovalDecided():
            after = on_approval_decided(state, event)
        case ToolsChanged():
            after = on_tools_changed(state, event)
        case ContextCleared():
            after = _on_context_cleared(state, event)
        case ContextCompacted():
            after = on_context_compacted(state, event)
        case BudgetSpent():
            after = _on_budget_spent(state, event)
        case RunFinished():
            after = _on_run_finished(state, event)
        case UserMessage():
            after = _on_user_message(state, event)
        case SettingsChanged():
            after = _on_settings_changed(state, event)
        case OutputChecked():
            after = on_output_checked(state, event)
        case HookRan():
            after = on_hook_ran(state, event)
        case Checkpointed():
            after = on_checkpoint(state, event)
        case SubagentStarted():
            after = on_subagent_started(state, event)
        case SubagentFinished():
            after = on_subagent_finished(state, event)
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
            event.limits.over(settings),
            workspace=settings.workspace if event.workspace is None else event.workspace,
            approval=settings.approval if event.approval is None else event.approval,
        )
        if event.confine:
            resumed_settings = evolve(
                resumed_settings, sandbox=True, allow_commands=(), shell_allow_domains=()
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
        compacting=None,
        # An answer that never matched gets a new round of retries.
        output_checks=state.output_checks if state.output_valid else 0,
        elapsed=state.elapsed + event.elapsed,
        last_seq=event.seq,
    )


def _on_settings_changed(state: ExecutionContext, event: SettingsChanged) -> ExecutionContext:
    if event.model is None and event.effort is None:
        raise InvalidTransition("settings_changed that changes nothing")
    if state.failure is not None:
        raise InvalidTransition("settings_changed between the attempts of a model call")
    settings = state.settings
    try:
        if event.model is not None:
            settings = evolve(
                settings,
                model=event.model,
                context_window=event.context_window,
                compaction=event.compaction,
            )
        if event.effort is not None:
            settings = evolve(settings, effort=event.effort)
    except (TypeError, ValueError) as bad:  # the settings' own validators
        raise InvalidTransition(f"settings_changed: {bad}") from None
    return evolve(state, settings=settings, last_seq=event.seq)


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


def _on_run_finished(state: ExecutionContext, event: RunFinished) -> ExecutionContext:
    status = event.status
    if status is Status.RUNNING:
        raise InvalidTransition("run_finished with status running")
    # A run may end in error or be cancelled at any point (a failure, an internal error, a
    # signal); the other endings are the ones the rules give for the state it is in.
    if status is Status.AWAITING_APPROVAL and not (
        state.phase is Phase.TOOLS and (state.awaiting_approval or state.children_awaiting)
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
        cost_unknown=state.cost_unknown + int(call_cut(state)),
        streamed_tokens=0,
        elapsed=state.elapsed + event.elapsed,
        last_seq=event.seq,
    )
