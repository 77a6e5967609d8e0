"""`ruizn rewind`, `diff --files`, `show`, `fork --into` and `rerun` at the command line, over
a run whose files changed (made in-process, the real file tools and git)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.checkpoints.test_store import tree_hash
from tests.cli.conftest import offline_env, read_events, run_cli

WRITES = [
    {"path": "k.txt", "content": "keep\n"},
    {"path": "sub/n.txt", "content": "new\n"},
    {"path": "k.txt", "content": "kept twice\n"},
]


def test_rewind_diff_show_fork_and_rerun_at_the_command_line(
    shell_run: Callable[..., Any], tmp_path: Path
) -> None:
    _, run_id, seen, ws = shell_run(WRITES, tool="write_file")
    end = tree_hash(ws)

    diff = run_cli(["diff", run_id, "--files", "--step", "3"], workspace=ws)
    assert diff.code == 0, diff.stderr
    assert "--- a/k.txt\n+++ b/k.txt\n@@ -1 +1 @@\n-keep\n+kept twice\n" in diff.stdout
    show = run_cli(["show", run_id], workspace=ws)
    assert "4 checkpoints" in show.stdout
    assert "step 2: 1 file changed" in show.stdout

    page = run_cli(["view", run_id, "-o", str(tmp_path / "v.html")], workspace=ws)
    assert page.code == 0, page.stderr
    html = (tmp_path / "v.html").read_text()
    # Step 2's checkpoint mark lists the file the step added.
    assert '"kind": "checkpoint"' in html or '"kind":"checkpoint"' in html
    assert '"changed": ["sub/n.txt"]' in html or '"changed":["sub/n.txt"]' in html

    (ws / "k.txt").write_text("the user's\n")
    mine = tree_hash(ws)
    asked = run_cli(["rewind", run_id, "--step", "2"], workspace=ws)
    assert asked.code == 1
    assert "k.txt changed since run" in asked.stderr
    unasked = run_cli(["rewind", run_id, "--step", "2", "--force"], workspace=ws)
    assert unasked.code == 2
    assert "--yes is needed without a terminal" in unasked.stderr
    assert tree_hash(ws) == mine
    done = run_cli(["rewind", run_id, "--step", "2", "--force", "--yes"], workspace=ws)
    assert done.code == 0, done.stderr
    assert "changed  k.txt" in done.stdout
    assert "removed  sub/n.txt" in done.stdout
    assert tree_hash(ws) == seen[2]
    undo = run_cli(["rewind", run_id, "--undo", "--yes"], workspace=ws)
    assert undo.code == 0, undo.stderr
    assert tree_hash(ws) == mine

    seq = next(
        e["seq"]
        for e in read_events(_log(ws, run_id))
        if e["type"] == "tool_call_finished" and e["id"] == "t1"
    )
    fork = run_cli(["fork", run_id, "--at", str(seq), "--into", str(tmp_path / "f")], workspace=ws)
    assert fork.code == 0, fork.stderr
    assert tree_hash(tmp_path / "f") == seen[2]

    rerun = run_cli(["rerun", run_id], workspace=ws, env=offline_env())
    assert rerun.code == 0, rerun.stdout + rerun.stderr
    assert "files: the tools ran in a scratch copy of the files" in rerun.stderr
    assert tree_hash(ws) == mine
    scratch = Path(rerun.stderr.rsplit(": ", 1)[1].strip())
    assert tree_hash(scratch) == end
    shutil.rmtree(scratch)


def _log(ws: Path, run_id: str) -> Path:
    return ws / ".ruizn" / "runs" / run_id / "events.jsonl"
