"""`ruizn checkpoints gc`: a deleted run's checkpoints are freed; another run's rewind (and
its undo) still works, byte for byte."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ruizn.checkpoints import checkpoints_of
from ruizn.effects.checkpoints.gc import collect_garbage
from ruizn.effects.checkpoints.store import CheckpointError, GitStore
from ruizn.effects.runlog.reader import iter_events
from tests.checkpoints.test_store import tree_hash
from tests.cli.conftest import run_cli


def test_gc_frees_a_deleted_runs_checkpoints_and_another_runs_rewind_still_works(
    shell_run: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # a store of its own
    big = os.urandom(60_000).hex()  # only the deleted run's step 2 checkpoint holds it
    writes = [{"path": "x.txt", "content": big}, {"path": "x.txt", "content": "small\n"}]
    _, gone, _, ws = shell_run(writes, tool="write_file")
    writes = [{"path": "b.txt", "content": "b\n"}, {"path": "b.txt", "content": "bb\n"}]
    agent, kept, seen, _ = shell_run(writes, tool="write_file")
    agent.rewind(kept, step=2)  # a rewind whose undo must survive gc
    rewound = tree_hash(ws)
    runs = ws / ".ruizn" / "runs"
    big_tree = checkpoints_of(iter_events(runs / gone / "events.jsonl"))[1].tree
    assert agent.state_folder() == tmp_path / "state" / "ruizn"
    store = GitStore.for_workspace(agent.state_folder(), ws)
    assert store.changes(big_tree, big_tree) == ()  # held
    shutil.rmtree(runs / gone)

    done = run_cli(["checkpoints", "gc"], workspace=ws)
    assert done.code == 0, done.stderr
    assert "dropped the checkpoints of 1 deleted run folder" in done.stdout
    freed = done.stdout.split()[1:3]  # "freed 58.3 KB (..."
    assert freed[1] == "KB", done.stdout
    assert float(freed[0]) > 50, done.stdout
    with pytest.raises(CheckpointError):
        store.changes(big_tree, big_tree)

    agent.rewind(kept, undo=True)
    assert tree_hash(ws) != rewound
    agent.rewind(kept, step=1)
    assert tree_hash(ws) == seen[1]
    agent.rewind(kept, to=10_000)
    again = collect_garbage(agent.state_folder())
    assert (again.before, again.dropped_runs, again.runs) == (again.after, 0, 1)


def test_gc_deletes_nothing_while_an_index_has_no_workspace_named(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    state = tmp_path / "state"
    store = GitStore.for_workspace(state, ws)
    tree = store.snapshot().tree
    store.index.with_name(store.index.name + ".workspace").unlink()  # as an older ruizn left it
    with pytest.raises(CheckpointError, match="no name for"):
        collect_garbage(state)
    assert store.changes(tree, tree) == ()
    # Named, the workspace's last checkpoint is kept (its next one reuses the objects).
    report = collect_garbage(state, workspaces=[ws])
    assert (report.trees, report.dropped_workspaces) == (1, 0)
    (ws / "b.txt").write_text("b\n")
    assert [c.path for c in store.changes(tree, store.snapshot().tree)] == ["b.txt"]
