"""Putting a workspace's files back to a run's checkpoint (`ruizn rewind`, `Agent.rewind`),
and reading what a run did to them (`ruizn diff --files`, `show`).

A rewind first checkpoints the tree as it is, so `--undo` can put it back; it refuses, naming
them, when files changed since the run's last checkpoint by anything but the run (unless
forced). What a rewind wrote and what it replaced is kept beside the store
(`checkpoints/rewinds/RUN.json`): it is an act on the workspace, not a fact of the run, so it
is not in the run's log.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from attrs import evolve, frozen

from ruizn.checkpoints import StepFiles, checkpoints_of, files_at, pick, step_files
from ruizn.effects.checkpoints.store import Change, CheckpointError, GitStore, Snapshot
from ruizn.effects.runlog.reader import iter_events
from ruizn.effects.runlog.store import RunStore, settled
from ruizn.events import Checkpointed, RunStarted
from ruizn.fork import ForkRefused
from ruizn.reducers import rebuild
from ruizn.settings import RunSettings

__all__ = [
    "RewindPlan",
    "RewindRefused",
    "RunFiles",
    "Tree",
    "files_into",
    "plan_rewind",
    "rewind",
    "run_files",
    "step_changes",
]


class RewindRefused(ValueError):
    """A rewind that cannot be done as asked; the message is one line (it names the files)."""


@frozen(kw_only=True)
class Tree:
    """A checkpoint's files: the store's tree id and the empty folders git does not keep."""

    tree: str
    empty_dirs: tuple[str, ...] = ()


@frozen(kw_only=True)
class RunFiles:
    """What a run's log says of the workspace's files: where, and its checkpoints."""

    run_id: str
    workspace: Path
    points: tuple[Checkpointed, ...]
    store: GitStore


def run_files(store: RunStore, run: str, state_folder: Path) -> RunFiles:
    """The run's checkpoints (RunNotFound, RunLocked, LogError as `settled` raises them)."""
    ref, _ = settled(store, run)
    events = list(iter_events(ref.path))
    state = rebuild(events)
    workspace = Path(state.settings.workspace)
    return RunFiles(
        run_id=ref.run_id,
        workspace=workspace,
        points=checkpoints_of(events),
        store=GitStore.for_workspace(state_folder, workspace),
    )


@frozen(kw_only=True)
class RewindPlan:
    """A rewind, worked out and not yet done: the files it changes (`changes`, from the
    workspace as it is to `target`), and the ones changed since the run's last checkpoint by
    something else (`foreign`: it refuses those unless forced)."""

    files: RunFiles
    target: Tree
    label: str
    current: Snapshot
    expected: Tree
    changes: tuple[Change, ...]
    foreign: tuple[Change, ...]
    undo: bool


def plan_rewind(
    files: RunFiles, *, to: int | None = None, step: int | None = None, undo: bool = False
) -> RewindPlan:
    """What rewinding `files`' workspace to the checkpoint at seq `to` (the last at or
    before it), before step `step`, or back to before the last rewind (`undo`) would do. The
    current tree is checkpointed now (that is what `undo` later restores)."""
    record = _record(files)
    if undo:
        if record is None:
            raise RewindRefused(f"run {files.run_id} was never rewound: nothing to undo")
        target, expected = record[0], record[1]
        label = "before the last rewind"
    else:
        try:
            point = pick(files.points, seq=to, step=step)
        except ValueError as exc:
            raise RewindRefused(str(exc)) from None
        target = Tree(tree=point.tree, empty_dirs=point.empty_dirs)
        where = "the run's end" if point.final else f"before step {point.step}"
        label = f"seq {point.seq} ({where})"
        last = files.points[-1] if files.points else point
        expected = record[1] if record else Tree(tree=last.tree, empty_dirs=last.empty_dirs)
    if not files.workspace.is_dir():
        raise RewindRefused(f"the run's workspace {files.workspace} is not a folder")
    current = files.store.snapshot()
    return RewindPlan(
        files=files,
        target=target,
        label=label,
        current=current,
        expected=expected,
        changes=files.store.changes(current.tree, target.tree),
        foreign=files.store.changes(expected.tree, current.tree),
        undo=undo,
    )


def rewind(plan: RewindPlan, *, force: bool = False) -> None:
    """Do `plan`: refused (RewindRefused, naming the files) when files changed since the run
    left them, unless `force`; CheckpointError when the store fails."""
    if plan.foreign and not force:
        raise RewindRefused(
            f"{_names(plan.foreign)} changed since run {plan.files.run_id}'s last checkpoint"
            " by something other than the run: rewinding would lose that (--force to do it"
            " anyway; --undo puts it back)"
        )
    before = Tree(tree=plan.current.tree, empty_dirs=plan.current.empty_dirs)
    plan.files.store.restore(plan.target.tree, plan.target.empty_dirs, plan.current)
    _keep(plan.files, undo=before, wrote=plan.target)


def files_into(state_folder: Path, log: Path, at: int, into: Path) -> RunSettings:
    """Write the files of `log`'s run as they were at seq `at` into the folder `into` (new or
    empty): the settings of a fork that works there (`fork --into`). ForkRefused when no
    checkpoint holds them; CheckpointError when the folder is not empty."""
    first = next(iter_events(log))
    assert isinstance(first, RunStarted)
    try:
        point = files_at(checkpoints_of(iter_events(log)), at)
    except ValueError as exc:
        raise ForkRefused(str(exc)) from None
    folder = into.resolve()
    GitStore.for_workspace(state_folder, folder).write_to(point.tree, point.empty_dirs, folder)
    return evolve(first.settings, workspace=str(folder))


def step_changes(files: RunFiles) -> tuple[tuple[StepFiles, tuple[Change, ...]], ...]:
    """Each step's changed files (a step with a checkpoint: one whose tools could change
    them)."""
    return tuple(
        (span, files.store.changes(span.before.tree, span.after.tree))
        for span in step_files(files.points)
    )


def _names(changes: Sequence[Change], most: int = 10) -> str:
    names = [c.path for c in changes[:most]]
    more = f" and {len(changes) - most} more" if len(changes) > most else ""
    return ", ".join(names) + more


def _record_path(files: RunFiles) -> Path:
    return files.store.root / "rewinds" / f"{files.run_id}.json"


def _record(files: RunFiles) -> tuple[Tree, Tree] | None:
    """(the tree the last rewind replaced, the tree it wrote), if the run was rewound."""
    try:
        data = json.loads(_record_path(files).read_text())
        return (
            Tree(tree=data["undo"]["tree"], empty_dirs=tuple(data["undo"]["empty_dirs"])),
            Tree(tree=data["wrote"]["tree"], empty_dirs=tuple(data["wrote"]["empty_dirs"])),
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{_record_path(files)} is unreadable: {exc}") from None


def _keep(files: RunFiles, *, undo: Tree, wrote: Tree) -> None:
    path = _record_path(files)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "undo": {"tree": undo.tree, "empty_dirs": list(undo.empty_dirs)},
        "wrote": {"tree": wrote.tree, "empty_dirs": list(wrote.empty_dirs)},
    }
    temp = path.with_suffix(f".{os.getpid()}.tmp")
    temp.write_text(json.dumps(body))
    os.replace(temp, path)
