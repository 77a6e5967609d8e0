"""How a stopped run goes on, decided from its state alone: the calls a stop interrupted
(never run twice), the decisions given for waiting calls, the limits of a resume or a
continue."""

from __future__ import annotations

import math
from collections.abc import Callable

from attrs import evolve, field, frozen

from ruizn.decide import NeedsApproval, approval_candidates
from ruizn.defaults import ApprovalMode, CompactionForm, Effort
from ruizn.format import counted
from ruizn.grant import Grant, grant_of
from ruizn.limits import Limits
from ruizn.rules import (
    ApprovalDecision,
)
from ruizn.settings import RunSettings
from ruizn.state import (
    ErrorType,
    ExecutionContext,
    Phase,
    Status,
    ToolCall,
    ToolResult,
)


def interrupted_calls(
    state: ExecutionContext, read_only: Callable[[str], bool]
) -> tuple[ToolCall, ...]:
    """The tool calls a stop interrupted that must be answered `interrupted` on resume.

    A call that was started and not finished may or may not have taken effect. It runs
    again only if the log says that is safe: its tool was read-only when the run started
    (`tool_sources`) and the call asked for no approval; and the tool still says so now
    (`read_only`). Any other is never run twice: the model is told instead.
    """
    recorded = {source.tool for source in state.settings.tool_sources if source.read_only}
    in_flight = set(state.tools_in_flight)
    return tuple(
        call
        for call in state.pending_tool_calls
        if call.id in in_flight
        and not (
            call.name in recorded
            and read_only(call.name)
            and state.turn_approvals[state.turn_index[call.id]] is None
        )
    )


def interrupted_result(call: ToolCall) -> ToolResult:
    return ToolResult.error(
        ErrorType.INTERRUPTED,
        f"{call.name} was interrupted when the run stopped and was not run again:"
        " it may or may not have taken effect",
    )


class ResumeRefused(ValueError):
    """A resume that cannot go on; the message is one line for the user."""


ALL = "all"


def resume_decisions(
    state: ExecutionContext,
    needs_approval: NeedsApproval,
    *,
    approve: tuple[str, ...] = (),
    deny: tuple[str, ...] = (),
    reason: str | None = None,
    always: tuple[str, ...] = (),
) -> tuple[ApprovalDecision, ...]:
    """A person's decisions given with a resume (`--approve ID|all`, `--deny ID|all`,
    `--reason TEXT` for the denials), in tool_use order. Each ID must be a call that awaits
    (or is about to ask for) a decision; anything else is refused before a line is written.
    A named id wins over `all`; a call named by neither waits on."""
    if reason is not None and not deny:
        raise ResumeRefused("--reason goes with --deny (it is what the model is told)")
    if not approve and not deny:
        return ()
    candidates = approval_candidates(state, needs_approval)
    ids = [call.id for call in candidates]
    if not candidates:
        raise ResumeRefused(f"run {state.run_id} has no tool call awaiting approval")
    for given in (*approve, *deny):
        if given != ALL and given not in ids:
            raise ResumeRefused(
                f"{given!r} is not a tool call awaiting approval in run {state.run_id}"
                f" (awaiting: {', '.join(ids)})"
            )
    both = set(approve) & set(deny)
    if both:
        raise ResumeRefused(f"both --approve and --deny name {sorted(both)[0]!r}")
    decisions = []
    for call in candidates:
        if call.id in approve or (ALL in approve and call.id not in deny):
            decisions.append(
                ApprovalDecision(id=call.id, approved=True, by="user", always=call.id in always)
            )
        elif call.id in deny or ALL in deny:
            decisions.append(
                ApprovalDecision(id=call.id, approved=False, by="user", reason=reason or None)
            )
    return tuple(decisions)


def _steps_set(_plan: object, _attribute: object, limits: Limits) -> None:
    if limits.max_steps is None:
        raise ValueError("a resume plan sets the run's step total")


@frozen(kw_only=True)
class ResumePlan:
    # The limits the run goes on with: max_steps always set (the new total), the others
    # None to keep the run's own.
    limits: Limits = field(validator=_steps_set)
    # What a person chose when accepting a run ruizn did not start (None: unchanged).
    workspace: str | None = None
    approval: ApprovalMode | None = None
    # The log's approvals are asked again (events.RunResumed.reask).
    reask: bool = False
    # The log's --sandbox off, --allow-command patterns and --shell-allow-domain hosts are
    # withdrawn (RunResumed.confine).
    confine: bool = False
    # The time of the session before, which ended with no run_finished (RunResumed.elapsed).
    lost: float = 0.0
    # The calls of a turn a person cancelled, answered before the new message (a session's
    # Ctrl-C, `cancelled_answers`): each tool_use is answered, none is run.
    answers: tuple[tuple[ToolCall, ToolResult], ...] = ()


@frozen(kw_only=True)
class SettingChange:
    """Settings a person changes with a message (events.SettingsChanged's fields): None,
    unchanged."""

    model: str | None = None
    effort: Effort | None = None
    context_window: int | None = None
    compaction: CompactionForm | None = None


def plan_resume(state: ExecutionContext, limits: Limits) -> ResumePlan | None:
    """The limits a resume continues with, or None when there is nothing to do.

    A run stopped by its step limit gets another batch of the same size unless `max_steps`
    says otherwise; `max_steps` is the new total for the run, not the number added. A run
    stopped by its budget goes on only with a new budget (`max_cost`, the new total for the
    whole run, above what it has spent): money is never added without being asked for.
    """
    if state.status is Status.SUCCESS:
        return None
    max_steps, max_tokens = limits.max_steps, limits.max_tokens
    max_cost, max_context = limits.max_cost, limits.max_context
    if max_tokens is not None and max_tokens < 1:
        raise ResumeRefused("--max-tokens must be >= 1")
    if max_context is not None and max_context < 0:
        raise ResumeRefused("--max-context must be >= 0 (0: off)")
    _check_budget(state, max_cost)
    if max_steps is None:
        max_steps = state.settings.max_steps
        if state.status is Status.MAX_STEPS:
            max_steps = state.step + state.settings.max_steps
    needs_call = state.messages[-1].role == "user" or state.phase is Phase.STREAMING
    if max_steps <= state.step and needs_call:
        raise ResumeRefused(
            f"--max-steps {max_steps} leaves no step: the run has taken {state.step} already"
        )
    if (
        state.phase in (Phase.DONE, Phase.FINISHED)
        and state.messages[-1].role == "assistant"
        and state.stop_reason == "max_tokens"
        and state.turn_open == 0
        and (max_tokens is None or max_tokens <= state.settings.max_tokens)
    ):
        raise ResumeRefused(
            f"the answer was cut off at max_tokens ({state.settings.max_tokens}): resume with"
            f" --max-tokens larger than {state.settings.max_tokens} to let it go on"
        )
    return ResumePlan(limits=evolve(limits, max_steps=max_steps))


def _check_budget(state: ExecutionContext, max_cost: float | None) -> None:
    spent = state.cost
    if max_cost is None:
        budget = state.settings.max_cost
        if state.status is Status.MAX_COST and budget is not None and spent >= budget:
            raise ResumeRefused(
                f"run {state.run_id} stopped at its budget (${spent:.2f} spent of"
                f" ${budget:.2f}): resume with --max-cost N, a new total above ${spent:.2f}"
            )
        return
    if not math.isfinite(max_cost) or max_cost <= spent:
        raise ResumeRefused(
            f"--max-cost {max_cost:g} leaves nothing to spend: run {state.run_id} has spent"
            f" ${spent:.2f} (the budget is a total for the whole run)"
        )
    unpriced = state.cost_unknown + state.unpriced_steps
    if unpriced:
        raise ResumeRefused(
            f"run {state.run_id} has {counted(unpriced, 'model call')} with no"
            " price in its log (no known price for its model, cut short before the API said"
            " its usage, or logged before ruizn priced calls): a --max-cost budget could not"
            " count them"
        )


def cancelled_answers(state: ExecutionContext) -> tuple[tuple[ToolCall, ToolResult], ...]:
    """The answers to the calls of a turn a person cancelled (Ctrl-C in a session), so a new
    message can follow it. Nothing is run again: a call that was in flight and may have
    changed something is `interrupted` (its effects unknown); one that never started, or a
    read-only one (as the log records its tool), was not run."""
    if state.status is not Status.CANCELLED:
        return ()
    maybe_ran = {call.id for call in interrupted_calls(state, lambda _name: True)}
    started = set(state.tools_in_flight)
    answers = []
    for call in state.pending_tool_calls:
        if call.id in maybe_ran:
            result = interrupted_result(call)
        elif call.id in started:
            result = ToolResult.error(
                ErrorType.INTERRUPTED,
                f"{call.name} was stopped before it finished: the person cancelled the turn",
            )
        else:
            result = ToolResult.error(
                ErrorType.INTERRUPTED, f"{call.name} was not run: the person cancelled the turn"
            )
        answers.append((call, result))
    return tuple(answers)


def plan_continue(
    state: ExecutionContext,
    message: str,
    limits: Limits,
    answers: tuple[tuple[ToolCall, ToolResult], ...] = (),
) -> ResumePlan:
    """The limits a run goes on with after a person adds `message` (`ruizn continue`).

    `limits.max_steps` is the budget for this message: the run's new total is the steps it
    has taken plus that many (None: the run's own limit); the other limits apply as given.
    A run that stopped in the middle of a model call, or with tool calls not answered
    (waiting for approval, or cut off by a stop), is refused: `resume` finishes that first,
    so the message never lands inside a turn. `answers` (`cancelled_answers`: a turn a
    person cancelled) answer every open call instead.
    """
    if not message.strip():
        raise ResumeRefused("the message must not be empty")
    try:
        message.encode("utf-8")
    except UnicodeEncodeError:
        raise ResumeRefused("the message is not valid UTF-8") from None
    max_steps, max_tokens = limits.max_steps, limits.max_tokens
    if max_tokens is not None and max_tokens < 1:
        raise ResumeRefused("--max-tokens must be >= 1")
    if max_steps is not None and max_steps < 1:
        raise ResumeRefused("--max-steps must be >= 1")
    run = state.run_id
    if state.phase is Phase.STREAMING:
        raise ResumeRefused(
            f"run {run} stopped in the middle of a model call: finish it with"
            f" `ruizn resume {run}`, then continue it"
        )
    if answers:
        if {call.id for call, _ in answers} != {c.id for c in state.pending_tool_calls}:
            raise ResumeRefused(f"run {run}: the answers do not match its open tool calls")
    elif state.turn_open:
        waiting = state.awaiting_approval
        if waiting:
            raise ResumeRefused(
                f"run {run} waits for a decision on {len(waiting)} tool call(s): decide with"
                f" `ruizn resume {run} --approve ID|all` (or --deny), then continue it"
            )
        raise ResumeRefused(
            f"run {run} stopped with {state.turn_open} tool call(s) of its last turn not"
            f" answered: answer them with `ruizn resume {run}`, then continue it"
        )
    budget = state.settings.max_steps if max_steps is None else max_steps
    return ResumePlan(limits=evolve(limits, max_steps=state.step + budget), answers=answers)


# Whom a resume trusts ------------------------------------------------------------------------
# A run this user's ruizn started here (its trust record matches the log) goes on as
# recorded; any other only once a person accepts what its log grants, in the folder that
# person works in, and never with approvals or a loosened shell the log holds that they did
# not accept now (docs/trust.md). The shell finds the facts (the trust record, the folders
# resolved); these functions decide.


class UntrustedRun(Exception):
    """A run ruizn did not start on this machine (or whose log changed since it last wrote
    it): its log is not obeyed until a person accepts what it would grant (`trust=True`)."""

    def __init__(self, run_id: str, reason: str, grant: Grant, *, verb: str = "resume") -> None:
        super().__init__(
            f"run {run_id} {reason}: its log would grant {grant.summary()};"
            f" check it, then {verb} with --trust"
        )
        self.run_id = run_id
        self.reason = reason
        self.grant = grant


@frozen(kw_only=True)
class TrustFacts:
    """What the shell found out before a resume: why the run's log is not vouched for (None:
    this user's ruizn started it here, or its store vouches for it), the folder the person
    works in and the run's recorded workspace, both resolved."""

    problem: str | None
    here: str
    recorded: str


@frozen(kw_only=True)
class TrustAnswer:
    """What the person said with the resume: a new approval mode (None: the run's own),
    whether they accept the run's grant, and with it the log's approvals and its shell."""

    approval: ApprovalMode | None = None
    accepted: bool = False
    keep_approvals: bool = False
    keep_shell: bool = False
    verb: str = "resume"


def trusted_plan(
    plan: ResumePlan, state: ExecutionContext, facts: TrustFacts, answer: TrustAnswer
) -> ResumePlan:
    """The plan with what trust decides. A vouched-for run goes on as recorded, with what
    the command line overrides. Any other goes on only if a person accepted its grant, and
    then in the folder that person works in, never with an `always` approval, the log's
    own approvals or a loosened shell they did not accept now."""
    approval = answer.approval
    if facts.problem is None:
        return evolve(plan, approval=approval)
    if not answer.accepted:
        raise UntrustedRun(
            state.run_id, facts.problem, grant_of(state.settings, state), verb=answer.verb
        )
    if facts.here != facts.recorded:
        raise ResumeRefused(
            f"run {state.run_id} names the workspace {state.settings.workspace}, not"
            f" {facts.here}: run from there, or give --workspace {state.settings.workspace}"
        )
    if approval is None and state.settings.approval == "always":
        approval = "ask"  # an `always` read from a log is never applied silently
    # Nor are the log's approvals (a call approved and not run, an "always" rule):
    # asked again, unless the person accepted them all, seeing them in the grant.
    reask = not answer.keep_approvals and holds_approvals(state)
    # Nor is its shell's loosening (commands unconfined, patterns that approve commands):
    # the sandbox is on and every command is asked, unless the person accepted them.
    confine = not answer.keep_shell and loosens_shell(state)
    return evolve(plan, workspace=facts.here, approval=approval, reask=reask, confine=confine)


def fork_refusal(state: ExecutionContext, facts: TrustFacts) -> str | None:
    """Why `trust=True` may not vouch for a fork of a run not started here (None: it may),
    as `resume --trust` accepts a run: the workspace must be the one the person works in;
    an `always` approval or a loosened shell read from a log is never vouched for (a resume
    of the fork, asked first, shows them)."""
    if facts.here != facts.recorded:
        return (
            f"run {state.run_id} names the workspace {state.settings.workspace}, not"
            f" {facts.here}: fork from there, or give --workspace {state.settings.workspace}"
        )
    if state.settings.approval == "always":
        return (
            f"run {state.run_id} approves every tool call (approval always) and was not"
            " started here: fork it without --trust, then `ruizn resume NEW` asks"
        )
    if loosens_shell(state):
        return (
            f"run {state.run_id} runs bash commands unconfined (--sandbox off), approves"
            " them by --allow-command patterns or lets them reach hosts"
            " (--shell-allow-domain), and was not started here: fork it without"
            " --trust, then `ruizn resume NEW` asks"
        )
    return None


def resumed_settings(state: ExecutionContext, plan: ResumePlan) -> RunSettings:
    """The settings a resume goes on with: as the reducer makes them of its run_resumed."""
    settings = evolve(
        state.settings,
        workspace=plan.workspace or state.settings.workspace,
        approval=plan.approval or state.settings.approval,
    )
    if not plan.confine:
        return settings
    return evolve(settings, sandbox=True, allow_commands=(), shell_allow_domains=())


def confined_notice(run_id: str) -> str:
    return (
        f"run {run_id}: its log's --shell-allow-domain hosts, --sandbox off and"
        " --allow-command patterns are not applied (not accepted): bash commands run in"
        " the sandbox, no pattern approves one, and no proxy is given"
    )


def loosens_shell(state: ExecutionContext) -> bool:
    """Whether the log's settings run commands unconfined, approve them by pattern, or let
    them reach hosts through the proxy."""
    settings = state.settings
    return bool(settings.shell) and (
        not settings.sandbox or bool(settings.allow_commands) or bool(settings.shell_allow_domains)
    )


def holds_approvals(state: ExecutionContext) -> bool:
    grant = grant_of(state.settings, state)
    return bool(grant.preapproved or grant.always_tools)
