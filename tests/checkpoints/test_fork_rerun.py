"""Forks and reruns with their files: `fork --into` starts from the tree at SEQ; `rerun` runs
in a scratch copy of the files as the recording started and leaves the workspace as it was."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from ruizn.cassette.rerun import rerun_async
from ruizn.effects.checkpoints.store import CheckpointError
from ruizn.effects.runlog.reader import iter_events
from ruizn.events import ToolCallFinished
from tests.checkpoints.test_store import tree_hash


def test_a_fork_into_a_folder_starts_from_the_files_at_seq(
    shell_run: Callable[..., Any], tmp_path: Path
) -> None:
    agent, run_id, seen, ws = shell_run()
    log = ws / ".ruizn" / "runs" / run_id / "events.jsonl"
    # After step 2's command answered: the files as step 3's tools were about to run.
    at = next(e.seq for e in iter_events(log) if isinstance(e, ToolCallFinished) and e.id == "t2")
    fork = agent.fork(run_id, at=at, into=tmp_path / "fork")
    assert tree_hash(tmp_path / "fork") == seen[3]
    assert fork.state.settings.workspace == str((tmp_path / "fork").resolve())
    assert fork.state.last_seq == at
    with pytest.raises(CheckpointError, match="not empty"):
        agent.fork(run_id, at=at, into=tmp_path / "fork")


def test_rerun_runs_in_a_scratch_copy_and_leaves_the_workspace_byte_identical(
    shell_run: Callable[..., Any],
) -> None:
    # The file tools: their results are the same every time (bash's say how long it took).
    writes = [
        {"path": "k.txt", "content": "keep\n"},
        {"path": "sub/n.txt", "content": "new\n"},
        {"path": "k.txt", "content": "kept twice\n"},
    ]
    agent, run_id, _, ws = shell_run(writes, tool="write_file")
    end = tree_hash(ws)
    (ws / "k.txt").write_text("changed by the user since\n")
    mine = tree_hash(ws)
    done = anyio.run(lambda: rerun_async(agent, run_id))
    assert done.divergence is None, done.divergence
    assert tree_hash(ws) == mine  # not one byte of the workspace changed
    assert done.workspace != ws
    assert tree_hash(done.workspace) == end  # the scratch copy went where the recording went
    assert "the recording's seq" in done.files
    shutil.rmtree(done.workspace)


def test_rerun_copies_a_workspace_holding_the_state_folder_without_copying_itself(
    shell_run: Callable[..., Any], tmp_path: Path
) -> None:
    """With the state folder inside the workspace (XDG_STATE_HOME=./state), the scratch copy
    leaves it out: the copy would otherwise hold the copy, deeper at each level."""
    environ = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "ws" / "state")}
    writes = [{"path": "k.txt", "content": "keep\n"}]
    agent, run_id, _, ws = shell_run(writes, tool="write_file", checkpoints=False, environ=environ)
    (ws / "k.txt").unlink()  # the files as the run started: the copy must be identical
    done = anyio.run(lambda: rerun_async(agent, run_id))
    assert done.divergence is None, done.divergence
    assert done.workspace.is_relative_to(ws / "state")
    assert (done.workspace / "k.txt").read_text() == "keep\n"
    assert not (done.workspace / "state" / "ruizn").exists()
    assert "your workspace" in done.files
