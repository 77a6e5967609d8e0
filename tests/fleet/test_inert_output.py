"""What the fleet commands print from outside is inert: a goals-file id with control codes
is refused in one line, and what is read back from the database (run ids, goals, workers,
statuses) reaches the terminal through `ruizn.terminal.visible`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ruizn.fleet.database import EVENTS, RUNS, EventStore
from ruizn.terminal import UNSAFE
from tests.cli.conftest import Result, cli_env, run_cli
from tests.fakeapi import Stream, Text
from tests.fleet.conftest import SUBPROCESS_PATH, env, ruizn

pytestmark = pytest.mark.slow

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202eevil\r"
ID_RULE = "a run id (1-128 letters, digits, '.', '_' or '-', the first a letter or digit)"


def _raw_controls(text: str) -> set[str]:
    return {c for c in text if c in UNSAFE and c not in "\n"}


def _hostile_goals(workspace: Path) -> Path:
    goals = workspace / "goals.jsonl"
    lines = [{"goal": "fine"}, {"goal": "x", "id": "run" + HOSTILE}]
    goals.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return goals


def _one_inert_line(stderr: str, goals: Path) -> None:
    assert stderr.count("\n") == 1, stderr
    assert stderr.startswith(f"ruizn: error: {goals} line 2: 'id' must be {ID_RULE}, not ")
    assert _raw_controls(stderr) == set()


def _batch(goals: Path, workspace: Path, base_url: str) -> Result:
    env = cli_env(base_url, PYTHONPATH=SUBPROCESS_PATH)
    return run_cli(["batch", str(goals)], workspace=workspace, env=env, timeout=120)


def test_submit_refuses_an_id_with_control_codes_and_queues_nothing(
    fresh_db: str, workspace: Path
) -> None:
    goals = _hostile_goals(workspace)
    proc = ruizn(["submit", "--db", fresh_db, str(goals)], workspace, cli_env(None))
    assert (proc.returncode, proc.stdout) == (2, "")
    _one_inert_line(proc.stderr, goals)
    store = EventStore(fresh_db)
    assert store.runs() == []
    store.close()


def test_batch_refuses_an_id_with_control_codes_and_runs_nothing(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("done"),))])
    goals = _hostile_goals(workspace)
    proc = _batch(goals, workspace, server.base_url)
    assert (proc.code, proc.stdout) == (2, "")
    _one_inert_line(proc.stderr, goals)
    assert server.requests == []


def test_batch_lines_show_a_hostile_goal_inert(workspace: Path, server_factory: Any) -> None:
    server = server_factory(lambda body, index: Stream((Text("done"),)))
    goals = workspace / "goals.jsonl"
    goals.write_text(json.dumps({"goal": "clear" + HOSTILE, "id": "g1"}) + "\n")
    proc = _batch(goals, workspace, server.base_url)
    assert proc.code == 0, proc.stderr
    assert "batch: 1 run: 1 success" in proc.stdout
    assert "clear␛]0;pwned␇␛[2J\\x9b31m\\u202eevil" in proc.stdout
    assert _raw_controls(proc.stdout + proc.stderr) == set()


def test_runs_db_shows_rows_planted_in_the_database_inert(fresh_db: str, workspace: Path) -> None:
    store = EventStore(fresh_db)
    now = time.time()
    with store.engine.begin() as conn:
        conn.execute(
            sa.insert(RUNS),
            [
                {
                    "run_id": "planted" + HOSTILE,
                    "goal": "goal" + HOSTILE + "\nsecond line",
                    "worker": "w" + HOSTILE,
                    "status": "q\x1b[8m\x9b",
                    "submitted": now,
                    "updated": now,
                },
                {
                    "run_id": "garbled",
                    "goal": "its events do not replay",
                    "worker": None,
                    "status": "running",
                    "submitted": now + 1,
                    "updated": now + 1,
                },
            ],
        )
        conn.execute(sa.insert(EVENTS), [{"run_id": "garbled", "seq": 1, "line": "{nope"}])
    store.close()
    wide = {**env(None, fresh_db), "COLUMNS": "300"}  # lines are cut at the terminal's width
    proc = ruizn(["runs", "--db", fresh_db], workspace, wide)
    assert proc.returncode == 0, proc.stderr
    assert _raw_controls(proc.stdout) == set()
    lines = proc.stdout.splitlines()
    assert len(lines) == 3  # the header, one line a run: the goal's newline did not split it
    # Newest first, as every `runs` lists them.
    assert lines[2].startswith("planted␛]0;pwned␇␛[2J\\x9b31m\\u202eevil")
    assert "goal␛]0;pwned␇" in lines[2]
    assert lines[1].split()[:2] == ["garbled", "unreadable"]
