"""Workers on a real Postgres: they share a batch, and one killed with -9 loses nothing."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ruizn.effects.runlog.reader import replay_file
from ruizn.fleet.database import EventStore
from ruizn.state import Status
from tests.cli.conftest import cli_env
from tests.fleet.conftest import (
    env,
    note_loop,
    ruizn,
    start_worker,
    statuses,
    stop_workers,
    wait_for,
)
from tests.fleet.tools import NOTES

RUNS = 12
TOOL_TURNS = 2

pytestmark = pytest.mark.slow


def mid_run(db: str, worker: str) -> list[str]:
    """The runs `worker` is running that have at least one model answer in the database."""
    store = EventStore(db)
    try:
        return [
            run_id
            for run_id, (status, by) in statuses(db).items()
            if (status, by) == ("running", worker)
            and any('"type":"llm_response"' in line for line in store.lines(run_id))
        ]
    finally:
        store.close()


def test_three_workers_finish_twelve_runs_while_one_is_killed(
    fresh_db: str, workspace: Path, server_factory: Any
) -> None:
    server = server_factory(note_loop(TOOL_TURNS, token_delay=0.05))
    environ = env(server.base_url, fresh_db)
    goals = workspace / "goals.jsonl"
    goals.write_text("".join(json.dumps({"goal": f"task {i:02d}"}) + "\n" for i in range(RUNS)))
    submitted = ruizn(["submit", str(goals), "--model", "claude-sonnet-5-5"], workspace, environ)
    assert submitted.returncode == 0, submitted.stderr
    run_ids = submitted.stdout.split()
    assert len(run_ids) == RUNS
    workers = {name: start_worker(name, workspace, environ) for name in ("w1", "w2", "w3")}
    try:
        # Kill w1 in the middle of a run: one model call answered, the next ones to come.
        wait_for(lambda: mid_run(fresh_db, "w1"), 60, "w1 to be in the middle of a run")
        os.kill(workers["w1"].pid, signal.SIGKILL)
        killed_runs = mid_run(fresh_db, "w1")
        assert killed_runs
        wait_for(
            lambda: all(s[0] == "success" for s in statuses(fresh_db).values()),
            90,
            "all runs to succeed",
        )
    finally:
        stop_workers(workers.values())
    for name in ("w2", "w3"):
        out, err = workers[name].communicate()
        assert "Traceback" not in err, err
        assert f"[worker {name}] stopped" in out
    final = statuses(fresh_db)
    assert set(final) == set(run_ids)
    assert all(worker in ("w2", "w3") for _, worker in (final[r] for r in killed_runs))
    notes = Counter((workspace / NOTES).read_text().splitlines())
    assert max(notes.values()) == 1, f"a non-read-only tool ran twice: {notes.most_common(2)}"
    store = EventStore(fresh_db)
    for run_id in run_ids:
        worker = final[run_id][1]
        assert worker is not None
        live = workspace / "logs" / worker / run_id / "events.jsonl"
        assert replay_file(live).state.status is Status.SUCCESS
        exported = workspace / "export" / run_id / "events.jsonl"
        store.export(run_id, exported)
        assert exported.read_bytes() == live.read_bytes()
    store.close()
    # The killed worker's runs went on from their logs on another worker.
    taken_over = [
        (workspace / "logs" / final[r][1] / r / "events.jsonl").read_text() for r in killed_runs
    ]
    for text in taken_over:
        assert '"type":"run_resumed"' in text, text
    listing = ruizn(["runs"], workspace, environ)
    assert listing.returncode == 0, listing.stderr
    for run_id in killed_runs:
        assert any(
            run_id in line and final[run_id][1] in line for line in listing.stdout.splitlines()
        )
    replay = ruizn(["replay", run_ids[0]], workspace, environ)
    assert replay.returncode == 0, replay.stderr
    assert "All noted." in replay.stdout


def test_an_unreachable_database_is_one_line_and_exit_2(workspace: Path) -> None:
    environ = cli_env(None)
    db = "postgresql://ruizn:hunter2@127.0.0.1:1/fleet"
    for args in (
        ["worker", "--db", db],
        ["submit", "--db", db, "--goal", "x"],
        ["runs", "--db", db],
        ["resume", "--db", db, "r1"],
    ):
        proc = ruizn(args, workspace, environ)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1
        assert proc.stderr.startswith("ruizn: error: cannot reach")
        assert "hunter2" not in proc.stderr


def test_a_run_id_not_in_the_database_is_one_error(fresh_db: str, workspace: Path) -> None:
    for command in ("show", "replay", "resume"):
        proc = ruizn([command, "--db", fresh_db, "no-such-run"], workspace, cli_env(None))
        assert (proc.returncode, proc.stdout) == (2, "")
        assert (
            proc.stderr == "ruizn: error: no run 'no-such-run' in the database " + fresh_db + "\n"
        )


def test_a_malformed_line_submits_nothing(fresh_db: str, workspace: Path) -> None:
    goals = workspace / "goals.jsonl"
    goals.write_text('{"goal": "fine"}\n{"goal": 3}\n')
    proc = ruizn(["submit", "--db", fresh_db, str(goals)], workspace, cli_env(None))
    assert proc.returncode == 2
    assert proc.stderr == f"ruizn: error: {goals} line 2: 'goal' must be a non-empty string\n"
    assert proc.stdout == ""
    store = EventStore(fresh_db)
    assert store.runs() == []
    store.close()
