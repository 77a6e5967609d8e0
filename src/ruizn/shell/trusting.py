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
    return evolve(plan, workspace=here, approval=approval, reask=reask)


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


def holds_approvals(state: ExecutionContext) -> bool:
    grant = grant_of(state.settings, state)
    return bool(grant.preapproved or grant.always_tools)


__all__: Sequence[str] = ("accepted_fork", "holds_approvals", "trusted_plan")
