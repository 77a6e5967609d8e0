"""Checkpoints of the workspace's files, the pure part: when a run takes one, what the
reducer accepts, and which checkpoint a step or a seq stands for (`rewind`, `diff --files`,
`fork --into`). The snapshot itself is an effect (ruizn.effects.checkpoints)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from attrs import evolve, frozen

from ruizn.events import Checkpointed, Event
from ruizn.format import counted, human_bytes
from ruizn.rules import InvalidTransition
from ruizn.state import ExecutionContext, ToolCall

__all__ = [
    "StepFiles",
    "checkpoint_at_end",
    "checkpoint_before",
    "checkpoint_line",
    "checkpoints_of",
    "files_at",
    "on_checkpoint",
    "pick",
    "step_files",
]

_TREE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def checkpoint_before(
    state: ExecutionContext, calls: Sequence[ToolCall], read_only: Callable[[str], bool]
) -> bool:
    """Whether the workspace is saved before `calls` run: the run keeps checkpoints and one
    of the calls is of a tool that may change files (not read-only: the file tools that
    write, bash, an MCP tool or a function not marked read-only)."""
    return state.settings.checkpoints and any(not read_only(call.name) for call in calls)


def checkpoint_at_end(state: ExecutionContext) -> bool:
    """Whether the run saves the workspace as it ends: when it saved it before any step, so
    the last step's changes are kept too (and `rewind` knows what the run left)."""
    return state.settings.checkpoints and state.checkpoint is not None


def on_checkpoint(state: ExecutionContext, event: Checkpointed) -> ExecutionContext:
    if not state.settings.checkpoints:
        raise InvalidTransition("checkpoint in a run that keeps none")
    if event.step != state.step:
        raise InvalidTransition(f"checkpoint of step {event.step} at step {state.step}")
    if min(event.files, event.bytes, event.more_left_out) < 0:
        raise InvalidTransition("checkpoint with a negative count")
    if event.error is None:
        if _TREE.fullmatch(event.tree) is None:
            raise InvalidTransition(f"checkpoint with tree {event.tree!r}")
    elif event.tree:
        raise InvalidTransition("a failed checkpoint names a tree")
    for path in (*event.empty_dirs, *(item.path for item in event.left_out)):
        if not path or path.startswith("/") or ".." in path.split("/"):
            raise InvalidTransition(f"checkpoint names a path outside the workspace: {path!r}")
    tree = event.tree or state.checkpoint
    return evolve(state, checkpoint=tree, last_seq=event.seq)


def checkpoints_of(events: Iterable[Event]) -> tuple[Checkpointed, ...]:
    """The run's checkpoints that saved something, in order."""
    return tuple(e for e in events if isinstance(e, Checkpointed) and not e.error)


def pick(points: Sequence[Checkpointed], *, seq: int | None, step: int | None) -> Checkpointed:
    """The checkpoint `--to SEQ` (the last taken at or before SEQ) or `--step N` (the first of
    step N: the files as they were before its tools ran). ValueError says why none."""
    if not points:
        raise ValueError("the run has no checkpoints (they were off, or no tool changed files)")
    if step is not None:
        for point in points:
            if point.step == step and not point.final:
                return point
        steps = sorted({p.step for p in points if not p.final})
        raise ValueError(f"no checkpoint before step {step} (steps with one: {_list(steps)})")
    assert seq is not None
    before = [p for p in points if p.seq <= seq]
    if not before:
        raise ValueError(f"no checkpoint at or before seq {seq} (the first is at {points[0].seq})")
    return before[-1]


def files_at(points: Sequence[Checkpointed], seq: int) -> Checkpointed:
    """The checkpoint holding the files as they were at `seq` (a point between steps): the
    first taken at or after it, since only tools change files and a checkpoint precedes every
    tool that may (and the run's end). ValueError when the run has none there (it was killed
    before it took one, or checkpoints were off)."""
    for point in points:
        if point.seq >= seq:
            return point
    raise ValueError(
        f"no checkpoint records the files at seq {seq}"
        + (f" (the last is at seq {points[-1].seq})" if points else " (the run has none)")
    )


@frozen(kw_only=True)
class StepFiles:
    """The files one step changed: from `before` (its first checkpoint) to `after` (the
    next step's first, or the run's last)."""

    step: int
    before: Checkpointed
    after: Checkpointed


def step_files(points: Sequence[Checkpointed]) -> tuple[StepFiles, ...]:
    """Each step that has a checkpoint, with the checkpoints around its changes."""
    firsts: list[Checkpointed] = []
    for point in points:
        if not point.final and (not firsts or firsts[-1].step != point.step):
            firsts.append(point)
    spans = []
    for first in firsts:
        later = [p for p in points if p.seq > first.seq and (p.final or p.step != first.step)]
        if later:
            spans.append(StepFiles(step=first.step, before=first, after=later[0]))
    return tuple(spans)


def checkpoint_line(point: Checkpointed) -> str:
    """One line for a checkpoint (the printer, `replay`): when, how much, what was left out."""
    when = "at the run's end" if point.final else f"before step {point.step}'s tools"
    if point.error is not None:
        return f"checkpoint {when} failed: {point.error}"
    line = f"saved {when}: {counted(point.files, 'file')}, {human_bytes(point.bytes)}"
    if point.empty_dirs:
        line += f", {counted(len(point.empty_dirs), 'empty folder')}"
    whys: dict[str, int] = {}
    for item in point.left_out:
        whys[item.why] = whys.get(item.why, 0) + 1
    if point.more_left_out:
        whys["more"] = point.more_left_out
    if whys:
        line += " · left out " + ", ".join(f"{n} {why}" for why, n in whys.items())
    return line


def _list(numbers: Sequence[int]) -> str:
    return ", ".join(str(n) for n in numbers) or "none"
