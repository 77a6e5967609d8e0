"""What the runner (shell/runner.py) must do next, decided from the state alone.

Every policy of the loop is here, pure and testable: when to stop and what a stop reason
means (`next_action`), whether a failed model call is retried and after how long
(`after_failure`), what a resume may do (`plan_resume`), which tool calls a crash
interrupted (`interrupted_calls`) and which calls need a human's approval and who decides
them (`next_action` with `needs_approval`, `approval_candidates`). The runner executes what
these return and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

from attrs import field, frozen

from ruizn.compaction import (
    between_steps,
    blocked,
    due,
    enabled,
    postcompact_due,
    precompact_ran,
    too_long,
    window_exceeded,
)
from ruizn.events import ClearedResult
from ruizn.hooks import denied_text, matching
from ruizn.rules import (
    ApprovalDecision,
    Finish,
    OutputVerdict,
    check_output,
    compacted_too_big,
    limit_stop,
    output_call,
    output_exhausted,
    pre_decision,
    reply_problem,
    rule_decision,
    spent_stop,
    turn_stop,
)
from ruizn.settings import HookSpec
from ruizn.state import (
    Approval,
    ContentBlock,
    ErrorType,
    ExecutionContext,
    JsonObject,
    Phase,
    Status,
    ToolCall,
    ToolResult,
)
from ruizn.window import context_limit, over_limit, plan_clearing


@frozen(kw_only=True)
class CallModel:
    step: int  # the step this call will be (1-based)
    attempt: int = 1  # 1 for the first try, then 2, 3... for retries
    delay: float = 0.0  # seconds to wait before the call (the back-off of a retry)


@frozen(kw_only=True)
class ClearContext:
    """Log a clearing of these tool results before the next model call (see ruizn.window)."""

    results: tuple[ClearedResult, ...]
    limit: int


@frozen(kw_only=True)
class CompactContext:
    """Compact the history before the next model call (see ruizn.compaction): attempt
    `attempt` of the compaction call, after `delay` seconds."""

    attempt: int = 1
    delay: float = 0.0
    trigger: str = "auto"


@frozen(kw_only=True)
class RunTools:
    calls: tuple[ToolCall, ...]


@frozen(kw_only=True)
class RefuseTools:
    """Answer these calls with an error result instead of running them."""

    calls: tuple[ToolCall, ...]
    reason: str


@frozen(kw_only=True)
class RequestApproval:
    """Log an approval request for each of these calls (before anything asks or decides)."""

    calls: tuple[ToolCall, ...]


@frozen(kw_only=True)
class DecideApprovals:
    """Decisions the run's rules make without a person: log them."""

    decisions: tuple[ApprovalDecision, ...]


@frozen(kw_only=True)
class AskApproval:
    """Ask a person about this call (one at a time: an `a` answer can decide the rest)."""

    call: ToolCall


@frozen(kw_only=True)
class AnswerDenied:
    """Answer each denied call with its `denied` error result, so every tool_use is answered."""

    answers: tuple[tuple[ToolCall, ToolResult], ...] = field(hash=False)


@frozen(kw_only=True)
class AnswerStale:
    """Answer each call whose tool changed after the model made it (tools_changed) with why;
    it is never run against the tool that now has its name."""

    answers: tuple[tuple[ToolCall, ToolResult], ...] = field(hash=False)


@frozen(kw_only=True)
class CheckOutput:
    """Log the final answer's check against the run's output schema."""

    verdict: OutputVerdict = field(hash=False)


@frozen(kw_only=True)
class RunHooks:
    """Run these hook commands for `event` (about `call`, for a tool event) and log each
    answer (hook_ran)."""

    event: str
    specs: tuple[HookSpec, ...]
    call: ToolCall | None = None


@frozen(kw_only=True)
class Finished:
    """The run already ended; nothing to do."""

    status: Status


Action = (
    CallModel
    | ClearContext
    | CompactContext
    | RunTools
    | RefuseTools
    | RequestApproval
    | DecideApprovals
    | AskApproval
    | AnswerDenied
    | AnswerStale
    | CheckOutput
    | RunHooks
    | Finish
    | Finished
)

# Whether a call needs a person's approval before it runs: the runner's answer from the tool
# (BaseTool.approval_required), passed in like `read_only` is to interrupted_calls.
NeedsApproval = Callable[[str, JsonObject], bool]


def _never(name: str, input: JsonObject) -> bool:
    return False


# A turn cut off by max_tokens may hold a tool_use whose JSON was never finished: running it
# would act on a guess. The model is told instead and can ask again (see README).
TRUNCATED_TOOL_CALL = (
    "this tool call was not run: the response hit max_tokens before the call was complete;"
    " ask again with a shorter input, or split the work"
)

# A retry-after longer than this is not waited for: the call gives up instead of hanging.
MAX_RETRY_AFTER = 60.0
# Our own back-off doubles from the base delay up to this.
MAX_BACKOFF = 30.0


def next_action(
    state: ExecutionContext,
    needs_approval: NeedsApproval = _never,
    *,
    can_ask: bool = False,
) -> Action:
    """The next thing to do. `needs_approval` says which tool calls need a decision before
    they run; `can_ask` whether a person (a terminal, a callback) can be asked now: when
    nobody can, a run with a call awaiting a decision stops `awaiting_approval`."""
    if state.status is not Status.RUNNING:
        return Finished(status=state.status)
    if state.hook_stop is not None:
        return Finish(status=Status.ERROR, error=f"stopped by a hook: {state.hook_stop}")
    action = _next(state, needs_approval, can_ask=can_ask)
    if isinstance(action, Finish) and action.status is Status.SUCCESS:
        # Claude Code's Stop hooks see each end of a turn, once; a block sends the model back.
        stop_hooks = matching(state.settings, "Stop")
        if stop_hooks and state.stop_hooked_step != state.step:
            return RunHooks(event="Stop", specs=stop_hooks)
    return action


def _next(state: ExecutionContext, needs_approval: NeedsApproval, *, can_ask: bool) -> Action:
    match state.phase:
        case Phase.READY:
            if state.step == 0 and state.attempt == 0 and state.failure is None:
                starting = (
                    *matching(state.settings, "SessionStart"),
                    *matching(state.settings, "UserPromptSubmit"),
                )
                if len(starting) > state.start_hooks_ran:
                    spec = starting[state.start_hooks_ran]
                    return RunHooks(event=spec.event, specs=(spec,))
            after_compaction = postcompact_due(state)
            if after_compaction:
                return RunHooks(event="PostCompact", specs=after_compaction)
            failure = state.failure
            if failure is not None and not failure.will_retry:
                said = _gave_up(failure.message, state.attempt)
                if state.compacting is not None:
                    said = f"the compaction failed: {said}"
                elif too_long(400, failure.message):
                    said = compacted_too_big(state) or said
                return Finish(status=Status.ERROR, error=said)
            if failure is not None and state.compacting is not None:
                # A compaction call to try again.
                return CompactContext(attempt=state.attempt + 1, delay=failure.retry_in)
            if failure is not None and failure.compact:
                # The prompt did not fit: compact (its PreCompact hooks first), then again.
                return _compacting(state, CompactContext(attempt=state.attempt + 1))
            if failure is None and (stop := spent_stop(state)) is not None:
                return Finish(status=stop.status, error=stop.error)
            if failure is None and state.attempt == 0 and due(state):
                return _compacting(state, CompactContext())
            if failure is None and (stop := limit_stop(state)) is not None:
                return Finish(status=stop.status, error=stop.error)
            if failure is None and state.attempt == 0 and over_limit(state):
                limit = context_limit(state.settings)
                assert limit is not None  # over_limit says there is one
                return ClearContext(results=plan_clearing(state).results, limit=limit)
            delay = failure.retry_in if failure is not None else 0.0
            return CallModel(step=state.step + 1, attempt=state.attempt + 1, delay=delay)
        case Phase.TOOLS:
            pending = state.pending_tool_calls
            if state.stop_reason == "max_tokens":
                return RefuseTools(calls=pending, reason=TRUNCATED_TOOL_CALL)
            stale = tuple(
                (call, stale_result(state, call)) for call in pending if call.id in state.turn_stale
            )
            if stale:
                return AnswerStale(answers=stale)
            if output_call(state) is not None and not output_exhausted(state):
                return CheckOutput(verdict=check_output(state))
            hooked = _pre_tool_hooks(state, pending)
            if hooked is not None:
                return hooked
            return _tools_turn(state, pending, needs_approval, can_ask=can_ask)
        case Phase.DONE:
            if window_exceeded(state):
                return _compacting(state, CompactContext(attempt=state.attempt + 1))
            if state.settings.output_schema is not None:
                return _structured_end(state)
            stop = turn_stop(state)
            return Finish(status=stop.status, error=stop.error)
        case Phase.STREAMING:
            # Only a crash leaves a run here, and a resume moves it on; a live loop never
            # asks mid-stream.
            return Finish(status=Status.ERROR, error="the model call in flight was lost")
        case Phase.FINISHED:  # pragma: no cover - status is not running then
            return Finished(status=state.status)


def _compacting(state: ExecutionContext, action: CompactContext) -> Action:
    """The compaction, after the PreCompact hooks that match "auto" (once a step). One that
    blocked it: a full window then ends the run; a history past --compact-at goes on
    uncompacted (`due` says no more this step)."""
    specs = matching(state.settings, "PreCompact", "auto")
    ran = precompact_ran(state)
    if ran < len(specs):
        return RunHooks(event="PreCompact", specs=specs[ran:])
    why = blocked(state)
    if why is None:
        return action
    if action.attempt == 1 and state.phase is Phase.READY and state.failure is None:
        return next_action(state)  # due() is False now: the step goes on uncompacted
    return Finish(
        status=Status.ERROR, error=f"the compaction was blocked by a PreCompact hook: {why}"
    )


def _pre_tool_hooks(state: ExecutionContext, pending: tuple[ToolCall, ...]) -> Action | None:
    """PreToolUse hooks first, before any approval: a call's hooks run (once), then a call a
    hook denied is answered with the hook's reason and never runs."""
    for call in pending:
        if call.id in state.turn_stale or call.id in state.tools_in_flight:
            continue
        specs = matching(state.settings, "PreToolUse", call.name)
        ran = next((v.ran for v in state.turn_pre if v.id == call.id), 0)
        if ran < len(specs):
            return RunHooks(event="PreToolUse", specs=specs[ran:], call=call)
    denied = tuple(
        (call, ToolResult.error(ErrorType.DENIED, denied_text(verdict.reason)))
        for call in pending
        for verdict in state.turn_pre
        if verdict.id == call.id and verdict.decision == "deny"
    )
    return AnswerDenied(answers=denied) if denied else None


def _structured_end(state: ExecutionContext) -> Action:
    """The end of a run with an output schema: success only with a valid output; a turn that
    ended otherwise (cut off, refused) ends as it would without one; an answer not checked
    yet is checked; no retries left is output_invalid."""
    if state.output_valid:
        return Finish(status=Status.SUCCESS)
    if output_exhausted(state):
        return Finish(
            status=Status.OUTPUT_INVALID,
            error=f"the answer did not match the output schema after"
            f" {state.output_checks} tries (--output-retries {state.settings.output_retries})",
        )
    if state.messages[-1].role == "assistant":
        stop = turn_stop(state)
        if stop.status is not Status.SUCCESS:
            return Finish(status=stop.status, error=stop.error)
    return CheckOutput(verdict=check_output(state))


def stale_result(state: ExecutionContext, call: ToolCall) -> ToolResult:
    """The answer to a call whose tool changed after the model made it."""
    offered = any(tool.get("name") == call.name for tool in state.settings.tools)
    what = (
        "has changed (its input schema, origin or read-only flag)"
        if offered
        else "is no longer offered"
    )
    return ToolResult.error(
        ErrorType.UNKNOWN_TOOL,
        f"not run: the tool {call.name} {what}: its MCP server changed its tool list"
        " (notifications/tools/list_changed) after this call was made; call it again"
        " if it is still offered",
    )


def _tools_turn(
    state: ExecutionContext,
    pending: tuple[ToolCall, ...],
    needs_approval: NeedsApproval,
    *,
    can_ask: bool,
) -> Action:
    """The approval steps of a turn, in order: log every request first (so a stop at any
    later point still knows what waits), let the run's rules decide what they can, answer
    the denied calls, ask a person about the rest (or stop and wait for one), and only then
    run every call that needs no approval or has it, in one batch."""
    to_request = approvals_to_request(state, needs_approval)
    if to_request:
        return RequestApproval(calls=to_request)
    waiting = state.awaiting_approval
    decisions = tuple(
        decision for call in waiting if (decision := rule_decision(state, call)) is not None
    )
    if decisions:
        return DecideApprovals(decisions=decisions)
    denied = tuple(
        (call, denied_result(call, approval))
        for call, approval in _approvals(state, pending)
        if approval is not None and approval.approved is False
    )
    if denied:
        return AnswerDenied(answers=denied)
    if waiting:
        if can_ask:
            return AskApproval(call=waiting[0])
        return Finish(status=Status.AWAITING_APPROVAL)
    # A subagent that stopped for a decision holds its call open: the run stops with it.
    held = {child.id for child in state.children_awaiting}
    runnable = tuple(call for call in pending if call.id not in held)
    if held and not runnable:
        return Finish(status=Status.AWAITING_APPROVAL)
    return RunTools(calls=runnable)


def _approvals(
    state: ExecutionContext, calls: tuple[ToolCall, ...]
) -> tuple[tuple[ToolCall, Approval | None], ...]:
    return tuple((call, state.turn_approvals[state.turn_index[call.id]]) for call in calls)


def approvals_to_request(
    state: ExecutionContext, needs_approval: NeedsApproval
) -> tuple[ToolCall, ...]:
    """Unanswered calls of the turn that need approval and have not asked for it yet."""
    if state.phase is not Phase.TOOLS or state.stop_reason == "max_tokens":
        return ()
    return tuple(
        call
        for call, approval in _approvals(state, state.pending_tool_calls)
        if approval is None
        and call.id not in state.turn_stale
        and _needs(state, call, needs_approval)
    )


def _needs(state: ExecutionContext, call: ToolCall, needs_approval: NeedsApproval) -> bool:
    """A PreToolUse hook's `ask` makes a person decide; its `allow` spares the asking."""
    decided = pre_decision(state, call.id)
    if decided in ("ask", "allow"):
        return decided == "ask"
    return needs_approval(call.name, call.input)


def approval_candidates(
    state: ExecutionContext, needs_approval: NeedsApproval
) -> tuple[ToolCall, ...]:
    """The calls a person may decide now (`ruizn resume --approve/--deny`): those awaiting a
    decision and those that will ask for one as soon as the run goes on, in tool_use order."""
    if state.phase is not Phase.TOOLS and not (state.phase is Phase.FINISHED and state.turn_open):
        return ()
    if state.stop_reason == "max_tokens":
        return ()
    return tuple(
        call
        for call, approval in _approvals(state, state.pending_tool_calls)
        if (approval is None and _needs(state, call, needs_approval))
        or (approval is not None and approval.approved is None)
    )


def denied_result(call: ToolCall, approval: Approval) -> ToolResult:
    """What the model is told about a denied call: not run, who refused it, and why."""
    who = "the approval policy" if approval.by == "policy" else "the user"
    text = f"{call.name} was not run: {who} denied this call"
    if approval.reason:
        text += f". Reason: {approval.reason}"
    return ToolResult.error(ErrorType.DENIED, text)


def _gave_up(message: str, attempts: int) -> str:
    return message if attempts <= 1 else f"{message} (after {attempts} attempts)"


@frozen(kw_only=True)
class RetryDecision:
    will_retry: bool
    retry_in: float  # the wait before the next attempt (0 when giving up)
    compact: bool = False  # the prompt did not fit: compact the history, then try again


def after_failure(
    state: ExecutionContext,
    *,
    retryable: bool,
    retry_after: float | None = None,
    status_code: int | None = None,
    message: str = "",
) -> RetryDecision:
    """Retry attempt `state.attempt` of the call, or give up.

    Up to `max_retries` retries. The wait is the server's retry-after when it sent one (up
    to MAX_RETRY_AFTER; a longer one gives up rather than hang), otherwise the base delay
    doubled per attempt, capped at MAX_BACKOFF. No jitter: the core has no randomness, and
    one ruizn process makes one call at a time.

    A prompt too long for the window (`status_code`, `message`) is tried again at once,
    after a compaction, when the run compacts (see `compacts_after`).
    """
    if compacts_after(state, status_code, message):
        return RetryDecision(will_retry=True, retry_in=0.0, compact=True)
    if not retryable or state.attempt > state.settings.max_retries:
        return RetryDecision(will_retry=False, retry_in=0.0)
    if retry_after is not None and retry_after >= 0:
        if retry_after > MAX_RETRY_AFTER:
            return RetryDecision(will_retry=False, retry_in=0.0)
        return RetryDecision(will_retry=True, retry_in=retry_after)
    backoff = state.settings.retry_base_delay * 2 ** (state.attempt - 1)
    return RetryDecision(will_retry=True, retry_in=min(backoff, MAX_BACKOFF))


def compacts_after(state: ExecutionContext, status_code: int | None, message: str) -> bool:
    """A failed call whose prompt was too long for the window is made again once the
    history is compacted (not twice for one step: a history just compacted that still does
    not fit ends the run)."""
    return (
        too_long(status_code, message)
        and enabled(state)
        and state.compacting is None
        and state.compacted_step != state.step
        and between_steps(state)
    )


def reply_refusal(content: tuple[ContentBlock, ...]) -> str | None:
    """Why a reply cannot become a response (it is then a failed, retryable call)."""
    problem = reply_problem(content)
    return None if problem is None else f"invalid response: {problem}"


__all__ = [
    "TRUNCATED_TOOL_CALL",
    "Action",
    "AnswerDenied",
    "AskApproval",
    "CallModel",
    "ClearContext",
    "CompactContext",
    "DecideApprovals",
    "Finish",
    "Finished",
    "NeedsApproval",
    "RefuseTools",
    "RequestApproval",
    "RetryDecision",
    "RunTools",
    "after_failure",
    "approval_candidates",
    "approvals_to_request",
    "compacts_after",
    "denied_result",
    "next_action",
    "reply_refusal",
]
