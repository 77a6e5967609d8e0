"""The pure part of checkpoints: what the reducer refuses, which checkpoint a step, a seq or
a fork point stands for, and when a run takes one."""

from __future__ import annotations

from typing import Any

import pytest
from attrs import evolve

from ruizn.checkpoints import checkpoint_before, files_at, pick, step_files
from ruizn.events import Checkpointed, LeftOut
from ruizn.reducers import InvalidTransition, rebuild
from ruizn.serde import decode, encode
from ruizn.state import ToolCall
from tests.core_world import CALL, FIRST, STARTED, TOOL_TURN, after, then

TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
GOOD: dict[str, Any] = {"step": 1, "tree": TREE, "files": 2, "bytes": 10}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"tree": "HEAD"}, "with tree"),
        ({"step": 2}, "of step 2 at step 1"),
        ({"files": -1}, "negative"),
        ({"empty_dirs": ("/etc",)}, "outside the workspace"),
        ({"left_out": (LeftOut(path="../x", why="secret"),)}, "outside the workspace"),
        ({"error": "git failed"}, "failed checkpoint names a tree"),
    ],
)
def test_the_reducer_refuses_a_checkpoint_no_run_could_take(
    change: dict[str, Any], problem: str
) -> None:
    state = after(STARTED, TOOL_TURN)
    with pytest.raises(InvalidTransition, match=problem):
        then(state, Checkpointed, **{**GOOD, **change})


def test_a_checkpoint_is_refused_in_a_run_that_keeps_none_and_round_trips_the_log() -> None:
    off = evolve(FIRST, settings=evolve(FIRST.settings, checkpoints=False))
    state = rebuild([off])
    with pytest.raises(InvalidTransition, match="keeps none"):
        then(state, Checkpointed, **{**GOOD, "step": 0})
    point = Checkpointed(seq=4, ts=1.0, **GOOD, empty_dirs=("e",), final=True)
    assert decode(encode(point)) == point
    state = then(after(STARTED, TOOL_TURN), Checkpointed, **GOOD)
    assert state.checkpoint == TREE


def test_only_calls_that_may_change_files_ask_for_a_checkpoint() -> None:
    state = after(STARTED, TOOL_TURN)
    calls = (ToolCall(id=CALL.id, name=CALL.name, input=CALL.input),)
    assert not checkpoint_before(state, calls, lambda name: True)
    assert checkpoint_before(state, calls, lambda name: False)
    off = evolve(state, settings=evolve(state.settings, checkpoints=False))
    assert not checkpoint_before(off, calls, lambda name: False)


def _point(seq: int, step: int, *, final: bool = False) -> Checkpointed:
    return Checkpointed(seq=seq, ts=0.0, step=step, tree=f"{seq:040x}", final=final)


def test_steps_seqs_and_fork_points_name_the_checkpoints_around_them() -> None:
    points = (_point(5, 1), _point(9, 1), _point(14, 2), _point(20, 3, final=True))
    assert pick(points, seq=None, step=1).seq == 5
    assert pick(points, seq=13, step=None).seq == 9
    assert files_at(points, 10).seq == 14  # after step 1's tools: the next checkpoint
    spans = step_files(points)
    assert [(s.step, s.before.seq, s.after.seq) for s in spans] == [(1, 5, 14), (2, 14, 20)]
    with pytest.raises(ValueError, match="before step 3"):
        pick(points, seq=None, step=3)
    with pytest.raises(ValueError, match="no checkpoint records the files at seq 21"):
        files_at(points, 21)
