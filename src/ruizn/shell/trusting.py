"""Whom a resume trusts: a run this user's ruizn started here (its trust record matches the
log) goes on as recorded; any other only once a person accepts what its log grants, in the
folder that person works in, and never with approvals the log holds that they did not give
now (docs/trust.md)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attrs import evolve

from ruizn.effects.runlog.trust import NOT_STARTED_HERE, TrustStore
from ruizn.events import RunStarted
from ruizn.grant import grant_of
from ruizn.resuming import ResumePlan, ResumeRefused
from ruizn.settings import RunSettings
from ruizn.shell.outcome import Resume, UntrustedRun
from ruizn.state import ExecutionContext


def trusted_plan(
    trust: TrustStore,
    *,
    workspace: str,
    state: ExecutionContext,
    first: RunStarted,
    log: Path,
    plan: ResumePlan,
    request: Resume,
) -> ResumePlan:
    """The plan with what trust decides. A run this user's ruizn started (its record
    matches the log) goes on as recorded, with what the command line overrides. Any other
    goes on only if a person accepted its grant (`trust`), and then in the folder that
    person names, and never with an `always` approval they did not give now."""
    approval = request.approval
    if request.vouched or trust.problem(first, log) is None:
        return evolve(plan, approval=approval)
    if not request.trust:
        reason = trust.problem(first, log) or NOT_STARTED_HERE
        verb = "resume" if request.message is None else "continue"
        raise UntrustedRun(state.run_id, reason, grant_of(state.settings, state), verb=verb)
    here = str(Path(workspace).resolve())
    if here != str(Path(state.settings.workspace).resolve()):
        raise ResumeRefused(
            f"run {state.run_id} names the workspace {state.settings.workspace}, not"
            f" {here}: run from there, or give --workspace {state.settings.workspace}"
        )
    if approval is None and state.settings.approval == "always":
        approval = "ask"  # an `always` read from a log is never applied silently
    # Nor are the log's approvals (a call approved and not run, an "always" rule):
    # asked again, unless the person accepted them all, seeing them in the grant.
    reask = not request.keep_approvals and holds_approvals(state)
    # Nor is its shell's loosening (commands unconfined, patterns that approve commands):
    # the sandbox is on and every command is asked, unless the person accepted them.
    confine = not request.keep_shell and loosens_shell(state)
    return evolve(plan, workspace=here, approval=approval, reask=reask, confine=confine)


def accepted_fork(workspace: str, state: ExecutionContext) -> None:
    """What `trust=True` may vouch for in a fork, as `resume --trust` accepts a run: the
    workspace must be the one this agent works in; an `always` approval read from a log
    is never vouched for (a resume of the fork, asked first, turns it into `ask`)."""
    here = str(Path(workspace).resolve())
    if here != str(Path(state.settings.workspace).resolve()):
        raise ResumeRefused(
            f"run {state.run_id} names the workspace {state.settings.workspace}, not"
            f" {here}: fork from there, or give --workspace {state.settings.workspace}"
        )
    if state.settings.approval == "always":
        raise ResumeRefused(
            f"run {state.run_id} approves every tool call (approval always) and was not"
            " started here: fork it without --trust, then `ruizn resume NEW` asks"
        )
    if loosens_shell(state):
        raise ResumeRefused(
            f"run {state.run_id} runs bash commands unconfined (--sandbox off) or approves"
            " them by --allow-command patterns, and was not started here: fork it without"
            " --trust, then `ruizn resume NEW` asks"
        )


def resumed_settings(state: ExecutionContext, plan: ResumePlan) -> RunSettings:
    """The settings a resume goes on with: as the reducer makes them of its run_resumed."""
    settings = evolve(
        state.settings,
        workspace=plan.workspace or state.settings.workspace,
        approval=plan.approval or state.settings.approval,
    )
    return evolve(settings, sandbox=True, allow_commands=()) if plan.confine else settings


def confined_notice(run_id: str) -> str:
    return (
        f"run {run_id}: its log's --sandbox off and --allow-command patterns are not"
        " applied (not accepted): bash commands run in the sandbox, and no pattern"
        " approves one"
    )


def loosens_shell(state: ExecutionContext) -> bool:
    """Whether the log's settings run commands unconfined or approve them by pattern."""
    settings = state.settings
    return bool(settings.shell) and (not settings.sandbox or bool(settings.allow_commands))


def holds_approvals(state: ExecutionContext) -> bool:
    grant = grant_of(state.settings, state)
    return bool(grant.preapproved or grant.always_tools)


__all__: Sequence[str] = (
    "accepted_fork",
    "confined_notice",
    "holds_approvals",
    "loosens_shell",
    "resumed_settings",
    "trusted_plan",
)
