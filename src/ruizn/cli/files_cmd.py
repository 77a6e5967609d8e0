"""What runs did to the workspace's files: `ruizn rewind`, `ruizn diff RUN --files` and the
lines `ruizn show` gives them (docs/checkpoints.md)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from ruizn.cli.common import run_store
from ruizn.cli.exits import EXIT_ERROR, EXIT_OK, Exit, fail
from ruizn.cli.options import where_options

__all__ = [
    "changed_steps",
    "checkpoints_group",
    "diff_files",
    "file_lines",
    "rewind_command",
    "rewind_files",
]

T = TypeVar("T")
_WORDS = {"M": "changed", "T": "changed", "A": "added", "D": "removed"}


@click.command("rewind")
@click.argument("run")
@click.option(
    "--to",
    "to",
    type=click.IntRange(min=1),
    metavar="SEQ",
    help="The checkpoint at SEQ (the last taken at or before it).",
)
@click.option(
    "--step",
    type=click.IntRange(min=1),
    metavar="N",
    help="The files as they were before step N's tools ran.",
)
@click.option("--undo", is_flag=True, help="Put back what the last rewind of RUN replaced.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask (needed without a terminal).")
@click.option(
    "--force",
    is_flag=True,
    help="Rewind even files changed since the run's last checkpoint by something else.",
)
@where_options
def rewind_command(
    run: str,
    *,
    to: int | None,
    step: int | None,
    undo: bool,
    yes: bool,
    force: bool,
    workspace: str,
    log_dir: str | None,
) -> None:
    """Put the workspace's files back as they were at one of RUN's checkpoints.

    Shows what will change (files changed, added, removed) and asks first. Refuses, naming
    them, files changed since the run's last checkpoint by anything but the run, unless
    --force. The tree as it is now is checkpointed first: `ruizn rewind RUN --undo` puts it
    back. Files checkpoints leave out (ignored, secret, too big) are never touched.
    """
    if sum((to is not None, step is not None, undo)) != 1:
        fail("rewind: give one of --to SEQ, --step N or --undo")
    files = _checked(lambda: _files(workspace, log_dir, run))
    rewind_files(files, to=to, step=step, undo=undo, yes=yes, force=force)
    raise Exit(EXIT_OK)


def rewind_files(
    files: Any, *, to: int | None, step: int | None, undo: bool, yes: bool, force: bool
) -> None:
    """Show what rewinding `files` (a RunFiles) would change, ask (unless `yes`), do it.
    A refusal, or a no, is an `Exit` with its line (`ruizn rewind`, a session's /rewind)."""
    from ruizn.shell.rewind import plan_rewind, rewind
    from ruizn.terminal import visible

    plan = _checked(lambda: plan_rewind(files, to=to, step=step, undo=undo))
    where = visible(str(files.workspace))
    if not plan.changes:
        print(f"{where} is already as at {plan.label}: nothing to change")
        return
    print(f"rewind {where} to {plan.label} of run {visible(files.run_id)}: {_counts(plan.changes)}")
    for change in plan.changes:
        print(f"  {_WORDS.get(change.status, change.status):<8} {visible(change.path)}")
    if plan.foreign and not force:
        _checked(lambda: rewind(plan))  # refused: it names the files
    if not yes:
        if not (sys.stdin.isatty() and sys.stderr.isatty()):
            fail("rewind: --yes is needed without a terminal")
        print("rewind? [y/N] ", end="", file=sys.stderr, flush=True)
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            print("not rewound", file=sys.stderr)
            raise Exit(EXIT_ERROR)
    _checked(lambda: rewind(plan, force=force))
    print(f"rewound; `ruizn rewind {visible(files.run_id)} --undo` puts back what was there")


def diff_files(workspace: str, log_dir: str | None, run: str, step: int | None) -> int:
    """`ruizn diff RUN --files [--step N]`: the unified diff of the files the run (or step
    N) changed, from the checkpoints around it."""
    from ruizn.checkpoints import step_files
    from ruizn.terminal import visible

    files = _checked(lambda: _files(workspace, log_dir, run))
    if not files.points:
        fail(
            f"run {visible(files.run_id)} has no checkpoints: it changed no files, or they were off"
        )
    if step is None:
        old, new = files.points[0], files.points[-1]
    else:
        spans = [s for s in step_files(files.points) if s.step == step]
        if not spans:
            fail(f"step {step} of run {visible(files.run_id)} has no checkpoint around it")
        old, new = spans[0].before, spans[0].after
    sys.stdout.write(visible(_checked(lambda: files.store.patch(old.tree, new.tree))))
    return EXIT_OK


def file_lines(store: Any, run: str, points: Sequence[Any]) -> list[tuple[str, str]]:
    """`ruizn show`'s lines on the files: per step with a checkpoint, how many it changed;
    the store's size for the run's checkpoints."""
    if not points:
        return []
    from ruizn.effects.checkpoints.store import CheckpointError
    from ruizn.effects.runlog.reader import LogError
    from ruizn.effects.runlog.writer import RunLocked
    from ruizn.effects.userconfig.dirs import state_dir
    from ruizn.format import counted, human_bytes
    from ruizn.shell.rewind import run_files, step_changes

    try:
        files = run_files(store, run, state_dir(os.environ))
        steps = step_changes(files)
        size = files.store.disk_usage([p.tree for p in files.points])
    except RunLocked:
        return [("files", f"{counted(len(points), 'checkpoint')} (the run is still going)")]
    except (CheckpointError, LogError, OSError, ValueError) as exc:
        return [("files", f"checkpoints unreadable: {exc}")]
    lines = [("files", f"{counted(len(points), 'checkpoint')}, {human_bytes(size)} in the store")]
    lines += [
        ("", f"step {span.step}: {counted(len(changes), 'file')} changed")
        for span, changes in steps
    ]
    return lines


def changed_steps(store: Any, run: str) -> tuple[Any, list[tuple[int, int]]]:
    """A session's /rewind: the run's files (a RunFiles), and its steps that changed some,
    with how many; a store that cannot say is an `Exit` with its line."""
    from ruizn.effects.userconfig.dirs import state_dir
    from ruizn.shell.rewind import run_files, step_changes

    files = _checked(lambda: run_files(store, run, state_dir(os.environ)))
    spans = _checked(lambda: step_changes(files))
    return files, [(span.step, len(changes)) for span, changes in spans if changes]


def _files(workspace: str, log_dir: str | None, run: str) -> Any:
    from ruizn.effects.userconfig.dirs import state_dir
    from ruizn.shell.rewind import run_files

    return run_files(run_store(workspace, log_dir, None), run, state_dir(os.environ))


def _checked(action: Callable[[], T]) -> T:
    """`action`, with the errors a person can act on as one line."""
    from ruizn.effects.checkpoints.store import CheckpointError
    from ruizn.effects.runlog.reader import LogError
    from ruizn.effects.runlog.store import RunNotFound
    from ruizn.effects.runlog.writer import RunLocked
    from ruizn.shell.rewind import RewindRefused
    from ruizn.terminal import visible

    try:
        return action()
    except (RewindRefused, CheckpointError, RunNotFound, RunLocked, LogError) as exc:
        fail(visible(str(exc)), EXIT_ERROR if isinstance(exc, RewindRefused) else 2)


def _counts(changes: Sequence[Any]) -> str:
    from ruizn.format import counted

    tally = {"changed": 0, "added": 0, "removed": 0}
    for change in changes:
        tally[_WORDS.get(change.status, "changed")] += 1
    return ", ".join(f"{counted(n, 'file')} {word}" for word, n in tally.items() if n)


@click.group("checkpoints")
def checkpoints_group() -> None:
    """The checkpoint store: `checkpoints gc` deletes the checkpoints no run folder needs.

    docs/checkpoints.md says what is kept and where.
    """


@checkpoints_group.command("gc")
@click.option(
    "--workspace",
    "-w",
    "workspaces",
    multiple=True,
    type=click.Path(file_okay=False),
    help="A workspace whose runs to keep, besides those the store lists (repeatable;"
    " the current folder is one).",
)
def gc_command(workspaces: tuple[str, ...]) -> None:
    """Reclaim the checkpoint store: keep every checkpoint of a run whose folder still
    exists (and what a rewind of it can undo), delete the rest, and say what was freed."""
    from pathlib import Path

    from ruizn.effects.checkpoints.gc import collect_garbage
    from ruizn.effects.userconfig.dirs import state_dir
    from ruizn.format import counted, human_bytes

    given = [Path(w) for w in (".", *workspaces)]
    report = _checked(lambda: collect_garbage(state_dir(os.environ), workspaces=given))
    freed = max(report.before - report.after, 0)
    line = (
        f"freed {human_bytes(freed)} ({human_bytes(report.before)} -> {human_bytes(report.after)});"
        f" kept {counted(report.trees, 'tree')} of {counted(report.runs, 'run')}"
    )
    if report.dropped_runs or report.dropped_workspaces:
        line += (
            f"; dropped the checkpoints of {counted(report.dropped_runs, 'deleted run folder')}"
            f" and the index of {counted(report.dropped_workspaces, 'deleted workspace')}"
        )
    print(line)
    raise Exit(EXIT_OK)
