"""`ruizn rerun RUN`: a recorded run driven again, as a new run, with its model a `Cassette`.

The new run is a normal run of today's ruizn in a scratch copy of the workspace as it was
when the recording started (its first checkpoint written to a new folder; a copy of today's
files, `.ruizn/` left out, when it has none), so the tools it runs for real never touch your
tree; `in_place=True` runs it in today's workspace instead. It starts with the
recording's goal and settings (its tool specs, plug-ins and MCP servers loaded by today's
code), its tools run for real, and the model's replies come from the recording (no network,
no key). Each request is compared with the recorded one before it is answered; where the
recording's sessions stopped and went on (max_steps then `resume`, awaiting_approval then
`resume --approve/--deny`, `continue` with a message), the re-drive stops and goes on the same
way, and its stop is compared too (status, steps, the last turn's results). The first
difference ends the re-drive: `Rerun.divergence` says where.

A recording is data like any log: its tool modules are imported, its MCP commands started
and its answers at the prompt replayed only when this user's ruizn recorded it here (or a
person accepts it: `trust=True`); an `always` approval from a recording nobody vouches for
becomes `ask`, and its shell runs confined with no --allow-command pattern. Interrupted
sessions (Ctrl-C, a crash) cannot be stopped again where they were: the re-drive goes
through them, and what the interruption changed (a call answered `interrupted`) shows as a
difference.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from attrs import evolve, frozen

from ruizn.cassette.hooks import RecordedHooks
from ruizn.cassette.model import Cassette, RecordedApprover, beside
from ruizn.checkpoints import checkpoints_of
from ruizn.defaults import ApprovalMode
from ruizn.effects.checkpoints.store import CheckpointError, GitStore
from ruizn.effects.models.provider import ReplayDiverged
from ruizn.effects.runlog.reader import LogError, iter_events
from ruizn.effects.runlog.store import settled
from ruizn.events import Parent
from ruizn.grant import grant_of
from ruizn.recording import (
    Divergence,
    Recording,
    RecordingError,
    SessionEnd,
    compare_stop,
    recording_of,
)
from ruizn.reducers import InvalidTransition
from ruizn.resuming import UntrustedRun, confined_notice, loosens_shell
from ruizn.shell.agent import Agent
from ruizn.shell.outcome import Resume, Session
from ruizn.state import ExecutionContext, Status, ToolResultBlock
from ruizn.window import compact_threshold, context_limit


@frozen(kw_only=True)
class Rerun:
    """What a re-drive came to."""

    recording: str  # the recorded run's id
    run_id: str  # the new run's id
    log_path: Path | None
    divergence: Divergence | None  # None: identical to the recording
    calls: int  # recorded model call attempts served
    results: int  # tool results the re-drive produced
    state: ExecutionContext  # the new run's state where it stopped
    workspace: Path  # where its tools ran
    files: str  # what that folder started as, in words


def replayed_approvals(recording: Recording) -> tuple[str, ...]:
    """The recorded approvals a re-drive of `recording` gives again: at the prompt, and with
    a resume (`--approve`), in the recording's order; for the grant."""
    decided = [
        *recording.prompted.values(),
        *(d for stop in recording.stops for d in stop.decisions),
    ]
    return tuple(
        f"call {d.id}" + (" (and its tool always after)" if d.always else "")
        for d in sorted(decided, key=lambda d: d.seq)
        if d.approved
    )


async def rerun_async(
    agent: Agent, run: str | Path, *, trust: bool = False, in_place: bool = False
) -> Rerun:
    """Re-drive `run` (found in `agent`'s store) as a new run built by `agent.derive`, in a
    scratch copy of the workspace as the recording started (`in_place`: in the agent's).

    Raises, before anything is written or imported: `RunNotFound`, `LogError`, `RunLocked`
    (the recording is being written), `RecordingError` (it holds no model reply),
    `UntrustedRun` (not recorded here, and no `trust`), `ToolLoadError` (a tool it names is
    not in this workspace), `ConfigError` (the workspace is not a folder)."""
    ref, _ = settled(agent.store(), str(run))
    # Its children (subagents) are re-driven from their own logs, beside its.
    cassette = Cassette(events=iter_events(ref.path), logs=beside(ref.path), answers=True)
    recording = cassette.recording
    children = recorded_children(recording, beside(ref.path))
    problem = agent.trust_problem(ref.path)
    for name, path, _ in children:
        if problem is None and (why := agent.trust_problem(path)) is not None:
            problem = f"has a child run ({name}) that {why}"
    if problem is not None and not trust:
        replayed = [*replayed_approvals(recording)]
        replayed += [
            f"{line} of {name}" for name, _, r in children for line in replayed_approvals(r)
        ]
        grant = grant_of(recording.final.settings, replayed=tuple(replayed))
        raise UntrustedRun(recording.first.run_id, problem, grant, verb="rerun")
    if in_place:
        workspace, files = Path(agent.settings.workspace), "your workspace, in place"
    else:
        workspace, files = scratch_copy(agent, ref.path)
    base = recording.first.settings
    if problem is not None and loosens_shell(recording.final):
        # A recording nobody vouches for never runs its commands unconfined, nor approves
        # them by its patterns, even once accepted: as `resume --trust` confines a log.
        base = evolve(base, sandbox=True, allow_commands=())
        agent.notice(confined_notice(recording.first.run_id))
    settings = evolve(
        base,
        workspace=str(workspace),  # a scratch copy or today's checkout, never the recorded path
        approval=_approval(recording.first.settings.approval, vouched=problem is None),
        tools=(),
        tool_sources=(),
        # A recording made with no context limit (an unknown model, an older log) is
        # re-driven with none: `start` would otherwise look the window up today.
        max_context=0
        if context_limit(recording.first.settings) is None
        else recording.first.settings.max_context,
        # Likewise a recording that compacted nothing automatically (no known window, or
        # `--compact off`) is re-driven without compaction.
        compact_at=0
        if compact_threshold(recording.first.settings) is None
        else recording.first.settings.compact_at,
    )
    driver = agent.derive(
        cassette,
        settings=settings,
        approver=RecordedApprover(recording),
        hook_runner=RecordedHooks(iter_events(ref.path)),
    )
    lineage = Parent(run_id=recording.first.run_id, seq=recording.final.last_seq, kind="rerun")
    async with driver.start(recording.first.goal, parent=lineage) as session:
        state, divergence = await _drive(session)
    run_id, log_path = session.run_id, session.log_path
    for stop in recording.stops:
        if divergence is not None:
            break
        if stop.resumed is not None and not _reproducible(stop):
            continue  # the re-drive went through where the recording was interrupted
        divergence = compare_stop(recording, stop, state)
        if divergence is not None or stop.resumed is None:
            break
        request = _with_children(_resume_of(stop, state, vouched=problem is None), cassette, state)
        async with driver.start_resume(run_id, request) as session:
            state, divergence = await _drive(session)
    return Rerun(
        recording=recording.first.run_id,
        run_id=run_id,
        log_path=log_path,
        divergence=divergence,
        calls=cassette.served_in_tree,
        results=_results(state),
        state=state,
        workspace=workspace,
        files=files,
    )


def recorded_children(
    recording: Recording, logs: Callable[[str], Path]
) -> list[tuple[str, Path, Recording]]:
    """The child runs (subagents) a recording started, and theirs, each as its name, its log
    and its recording; those whose logs are missing or unreadable are left out (the re-drive
    diverges where it reaches them)."""
    found: list[tuple[str, Path, Recording]] = []
    for child in recording.final.children:
        path = logs(child.run_id)
        try:
            inner = recording_of(iter_events(path))
        except (LogError, RecordingError, InvalidTransition, OSError):
            continue
        found.append((f"agent {child.agent} (run {child.run_id})", path, inner))
        found += recorded_children(inner, logs)
    return found


def scratch_copy(agent: Agent, log: Path) -> tuple[Path, str]:
    """A new folder holding the files the recording at `log` started with: its first
    checkpoint, or (none, or not in this machine's store: a recording made elsewhere) a copy
    of the agent's workspace without `.ruizn/`; and what it is, in words."""
    points = checkpoints_of(iter_events(log))
    # In the state folder (never a workspace), kept after the rerun for a look at its files.
    scratch = agent.state_folder() / "reruns"
    scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder = Path(tempfile.mkdtemp(prefix=f"{log.parent.name}-", dir=scratch))
    why = "the recording has no checkpoint"
    if points:
        first = points[0]
        store = GitStore.for_workspace(agent.state_folder(), folder)
        try:
            store.write_to(first.tree, first.empty_dirs, folder)
        except CheckpointError:  # recorded on another machine: its store is not here
            shutil.rmtree(folder)
            folder.mkdir()
            why = "the recording's checkpoints are not in this machine's store"
        else:
            return folder, f"a scratch copy of the files at the recording's seq {first.seq}"
    source = Path(agent.settings.workspace)
    shutil.copytree(
        source, folder, symlinks=True, dirs_exist_ok=True, ignore=_not_copied(scratch.parent)
    )
    return folder, f"a scratch copy of your workspace ({why})"


def _not_copied(state: Path) -> Callable[[str, list[str]], set[str]]:
    """`.ruizn/`, and the state folder when it lies inside the workspace (the copy would
    otherwise copy itself, deeper at each level, until a name is too long)."""
    state = state.resolve()

    def ignore(folder: str, names: list[str]) -> set[str]:
        here = Path(folder).resolve()
        return {n for n in names if n == ".ruizn" or here / n == state}

    return ignore


async def _drive(session: Session) -> tuple[ExecutionContext, Divergence | None]:
    try:
        return (await session.drive()).state, None
    except ReplayDiverged as left:
        return session.state, left.divergence


def _reproducible(stop: SessionEnd) -> bool:
    """A stop the re-drive makes too: one the run's own rules gave (not Ctrl-C, not a crash)."""
    return stop.finished is not None and stop.finished.status is not Status.CANCELLED


def _approval(mode: ApprovalMode, *, vouched: bool) -> ApprovalMode:
    return "ask" if mode == "always" and not vouched else mode


def _resume_of(stop: SessionEnd, state: ExecutionContext, *, vouched: bool) -> Resume:
    """The resume the recording made after `stop`, for the re-driven run."""
    resumed = stop.resumed
    assert resumed is not None
    approve = tuple(d.id for d in stop.decisions if d.approved)
    # A person's `a` at the prompt right after the resume: the tool stays approved after.
    always = tuple(d.id for d in stop.decisions if d.approved and d.always)
    deny = tuple(d.id for d in stop.decisions if not d.approved)
    reasons = [d.reason for d in stop.decisions if not d.approved and d.reason]
    limits = resumed.limits
    if stop.message is not None:  # continue's --max-steps is the budget for the message
        limits = evolve(limits, max_steps=resumed.max_steps - state.step)
    approval = None if resumed.approval is None else _approval(resumed.approval, vouched=vouched)
    return Resume(
        limits=limits,
        approve=approve,
        deny=deny,
        always=always,
        reason=reasons[0] if reasons else None,
        approval=approval,
        message=stop.message,
    )


def _with_children(request: Resume, cassette: Cassette, state: ExecutionContext) -> Resume:
    """The resume with the decisions the recording's resume handed to the children that
    wait (each child's log holds those it was given), as `resume PARENT --approve` hands
    them on."""
    approve, deny, always = list(request.approve), list(request.deny), list(request.always)
    reason = request.reason
    for child in state.children_awaiting:
        stop = cassette.child_stop(child.id, frozenset(call.id for call in child.awaiting))
        if stop is None:
            continue  # it stays waiting: the parent's stop after the resume shows it
        for decided in stop.decisions:
            (approve if decided.approved else deny).append(decided.id)
            if decided.approved and decided.always:
                always.append(decided.id)
            if not decided.approved and decided.reason and reason is None:
                reason = decided.reason
    return evolve(
        request, approve=tuple(approve), deny=tuple(deny), always=tuple(always), reason=reason
    )


def _results(state: ExecutionContext) -> int:
    blocks = (block for message in state.messages for block in message.content)
    return sum(isinstance(block, ToolResultBlock) for block in blocks)
