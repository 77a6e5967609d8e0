"""What `ruizn.Agent` reads of a stopped run's log before it goes on from it (resume,
continue) or forks it: the log's sessions as it is replayed, the core's plan for the request
(resuming.py), the facts the trust decision needs, and a fork's new log. The decisions are the
core's; this part gathers the facts and writes."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attrs import evolve

from ruizn.decide import NeedsApproval
from ruizn.effects.runlog.reader import LOG_NAME, iter_events
from ruizn.effects.runlog.store import RunRef, RunStore, fleet_owner, new_run_id, settled
from ruizn.effects.runlog.trust import TrustStore
from ruizn.events import Event, LlmToken, Parent, RunFinished, RunResumed, RunStarted
from ruizn.fork import fork_prefix
from ruizn.reducers import reasked, rebuild, reduce
from ruizn.reducers import start as start_state
from ruizn.resuming import (
    ResumePlan,
    ResumeRefused,
    SettingChange,
    TrustAnswer,
    TrustFacts,
    cancelled_answers,
    fork_refusal,
    plan_continue,
    plan_resume,
    resume_decisions,
    resumed_settings,
    trusted_plan,
)
from ruizn.rules import ApprovalDecision
from ruizn.settings import ConfigError, RunSettings
from ruizn.shell.outcome import NothingToResume, Resume, RunResult, Session
from ruizn.shell.rewind import files_into
from ruizn.shell.wiring import Wiring
from ruizn.state import ExecutionContext
from ruizn.terminal import Notice
from ruizn.version import __version__


def fleet_refusal(ref: RunRef, request: Resume) -> None:
    """One truth per fleet run: a second copy resumed here would run its calls again and be
    overwritten by the database's on the fleet's next resume."""
    owner = None if request.vouched else fleet_owner(ref.path)
    if owner is not None:
        raise ResumeRefused(
            f"run {ref.run_id} belongs to the fleet database {owner}: resume it there,"
            f" with `ruizn resume --db {owner} {ref.run_id}`"
        )


def plan_of(state: ExecutionContext, request: Resume) -> ResumePlan:
    """The core's plan for `request` (a resume, or a continue with a message); raises
    `ResumeRefused` for what cannot apply, `NothingToResume` for a run that needs nothing."""
    plan: ResumePlan | None
    if request.message is not None:
        if request.approve or request.deny:
            raise ResumeRefused("--approve/--deny go with resume, not with a message")
        answers = cancelled_answers(state) if request.cancelled else ()
        plan = plan_continue(state, request.message, request.limits, answers)
    else:
        if request.model is not None or request.effort is not None:
            raise ResumeRefused("a new model or effort goes with a message")
        plan = plan_resume(state, request.limits)
    if plan is None:
        if request.approve or request.deny:  # a decision for a run that waits for none
            raise ResumeRefused(
                f"run {state.run_id} finished with {state.status.value}: no call awaits approval"
            )
        raise NothingToResume(state)
    return plan


def changed(settings: RunSettings, change: SettingChange) -> RunSettings:
    """`settings` with a message's change of model or effort."""
    return evolve(
        settings,
        model=change.model or settings.model,
        context_window=change.context_window if change.model else settings.context_window,
        compaction=change.compaction if change.model else settings.compaction,
        effort=change.effort or settings.effort,
    )


def forwarded(
    forward: Mapping[str, Mapping[str, tuple[str, ...]]], request: Resume
) -> dict[str, dict[str, Any]]:
    """The decisions a resume hands to the children its `agent` calls wait on, by call."""
    return {
        call: {
            **ids,
            "reason": request.reason if ids["deny"] else None,
            "always": tuple(i for i in request.always if i in ids["approve"]),
        }
        for call, ids in forward.items()
    }


def trusted(
    plan: ResumePlan, state: ExecutionContext, request: Resume, facts: TrustFacts
) -> ResumePlan:
    """The plan as far as the person's answer on trust lets it go (the core decides)."""
    answer = TrustAnswer(
        approval=request.approval,
        accepted=request.trust,
        keep_approvals=request.keep_approvals,
        keep_shell=request.keep_shell,
        verb="resume" if request.message is None else "continue",
    )
    return trusted_plan(plan, state, facts, answer)


def workspace_notice(run_id: str, workspace: str, here: str) -> str | None:
    """Refused when the run's workspace is gone; a line when it is not the folder `here`."""
    if not Path(workspace).is_dir():
        raise ResumeRefused(f"the run's workspace {workspace} no longer exists")
    if Path(workspace).resolve() == Path(here).resolve():
        return None
    # A copy of a project resumes into the folder the run was started in: say so.
    return f"run {run_id} works in its own workspace {workspace}, not {Path(here).resolve()}"


def decisions_of(
    state: ExecutionContext,
    plan: ResumePlan,
    needs_approval: NeedsApproval,
    request: Resume,
    split: tuple[tuple[str, ...], tuple[str, ...], Mapping[str, Mapping[str, tuple[str, ...]]]],
) -> tuple[ApprovalDecision, ...]:
    """The decisions a resume gives for the run's own waiting calls (the core's), of its
    `--approve/--deny` ids split from its children's (`children.split_decisions`)."""
    approve, deny, forward = split
    return resume_decisions(
        reasked(state) if plan.reask else state,
        needs_approval,
        approve=approve,
        deny=deny,
        # (the reason of a denial handed to a child is the child's)
        reason=request.reason if deny or not any(ids["deny"] for ids in forward.values()) else None,
        always=request.always,
    )


def trust_facts(problem: str | None, settings: RunSettings, state: Any) -> TrustFacts:
    """What the core's trust decision needs from the disk: the folders, resolved."""
    return TrustFacts(
        problem=problem,
        here=str(Path(settings.workspace).resolve()),
        recorded=str(Path(state.settings.workspace).resolve()),
    )


def torn_bytes(replayed: Any) -> int:
    return 0 if replayed.torn is None else int(replayed.torn.size)


class Sessions:
    """Watches a log as it is replayed (cheap: most events are tokens): its first event, and
    how long its last session ran if it ended with no run_finished (`RunResumed.elapsed`)."""

    def __init__(self) -> None:
        self.first: Event | None = None
        self._start = 0.0
        self._last = 0.0
        self._open = False

    def __call__(self, event: Event) -> None:
        self._last = event.ts
        kind = type(event)
        if kind is LlmToken:
            return
        if kind is RunStarted or kind is RunResumed:
            if self.first is None:
                self.first = event
            self._start = event.ts
            self._open = True
        elif kind is RunFinished:
            self._open = False

    def lost(self) -> float:
        return round(max(0.0, self._last - self._start), 3) if self._open else 0.0


async def going_on(
    wiring: Wiring,
    state: ExecutionContext,
    plan: ResumePlan,
    request: Resume,
    *,
    here: str,
    notice: Notice,
) -> tuple[RunSettings, SettingChange | None]:
    """The settings a resume goes on with (the core's), with a message's new model or
    effort; checked (the model, the budget's price, the workspace) before any write."""
    settings = resumed_settings(state, plan)
    change = await wiring.setting_change(request, settings)
    model = wiring.model
    if change is not None:
        settings = changed(settings, change)
    elif isinstance(model, str) and model != settings.model:
        raise ConfigError(f"run {state.run_id} uses model {settings.model}, not {model}")
    wiring.check_budget(settings.model, plan.limits.max_cost)
    elsewhere = workspace_notice(state.run_id, settings.workspace, here)
    if elsewhere is not None:
        notice(elsewhere)
    if request.read_timeout is not None:  # this session's stream timeout only
        settings = evolve(settings, read_timeout=request.read_timeout)
    return settings, change


def fork_run(
    store: RunStore,
    trust_store: TrustStore,
    settings: RunSettings,
    state_folder: Path,
    run: str | Path,
    *,
    at: int,
    trust: bool,
    into: str | Path | None,
) -> RunResult:
    """`Agent.fork`: a new log holding `run`'s events up to `at` under a run_started of its
    own, each event checked by the reducer before it is written, as a runner's are."""
    ref, _ = settled(store, str(run))
    events = fork_prefix(iter_events(ref.path), at)
    first = events[0]
    assert isinstance(first, RunStarted)
    problem = trust_store.problem(first, ref.path)
    if problem is not None and trust:
        state = rebuild(events)
        refusal = fork_refusal(state, trust_facts(problem, settings, state))
        if refusal is not None:
            raise ResumeRefused(refusal)
        problem = None
    vouched = problem is None
    if into is not None:
        first = evolve(first, settings=files_into(state_folder, ref.path, at, Path(into)))
    run_id = new_run_id()
    head = evolve(
        first,
        run_id=run_id,
        ts=time.time(),
        ruizn_version=__version__,
        parent=Parent(run_id=first.run_id, seq=at),
    )
    sink = store.new_writer(run_id)
    try:
        state = start_state(head)
        sink(head)
        for event in events[1:]:
            state = reduce(state, event)
            sink(event)
        sink.sync()
    finally:
        sink.close()
    log_path = store.root / run_id / LOG_NAME
    if vouched:
        trust_store.closed(head, log_path)
    return Session.of(state, run_id, log_path)


__all__: Sequence[str] = (
    "Sessions",
    "changed",
    "decisions_of",
    "fleet_refusal",
    "fork_run",
    "forwarded",
    "going_on",
    "plan_of",
    "torn_bytes",
    "trust_facts",
    "trusted",
    "workspace_notice",
)
