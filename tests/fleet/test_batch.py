"""`ruizn batch` on SQLite against the local fake API: real CLI, real SDK, real DBOS."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ruizn.effects.runlog.reader import replay_file
from ruizn.fleet.database import EventStore
from ruizn.state import Status
from tests.fleet.conftest import SUBPROCESS_PATH, batch_db, note_loop, requests_per_goal, wait_for
from tests.fleet.tools import NOTES
from tests.shell.cli.conftest import cli_env, read_events, run_cli, start_cli

RUNS = 20
TOOL_TURNS = 2

pytestmark = pytest.mark.slow


def env(base_url: str) -> dict[str, str]:
    return cli_env(base_url, PYTHONPATH=SUBPROCESS_PATH)


def batch_args(goals: Path, concurrency: int = 4) -> list[str]:
    return [
        "batch",
        str(goals),
        "--concurrency",
        str(concurrency),
        "--tools-from",
        "tests.fleet.tools:make_tools",
    ]


def write_goals(workspace: Path, count: int = RUNS) -> Path:
    goals = workspace / "goals.jsonl"
    goals.write_text(
        "".join(json.dumps({"goal": f"goal {i:02d}"}) + "\n" for i in range(count)),
        encoding="utf-8",
    )
    return goals


def logs(workspace: Path) -> dict[str, Path]:
    root = workspace / ".ruizn" / "runs"
    return {p.parent.name: p for p in root.glob("*/events.jsonl")}


def finished(path: Path) -> bool:
    lines = path.read_bytes().splitlines()
    return bool(lines) and b'"type":"run_finished"' in lines[-1]


def mid_tool_turn(path: Path) -> bool:
    """The run has answered a tool call and is not finished: a kill now cuts it mid-way."""
    data = path.read_bytes()
    return b'"type":"tool_call_finished"' in data and not finished(path)


def check_every_run(workspace: Path, server_requests: list[Any]) -> int:
    """Check every run; return how many went on after a stop (run_resumed)."""
    runs = logs(workspace)
    assert len(runs) == RUNS
    store = EventStore(batch_db(workspace))
    notes = Counter((workspace / NOTES).read_text(encoding="utf-8").splitlines())
    assert max(notes.values()) == 1, f"a tool ran twice: {notes.most_common(3)}"
    seen = requests_per_goal(server_requests)
    resumed_runs = 0
    for run_id, path in runs.items():
        state = replay_file(path).state
        assert state.status is Status.SUCCESS, (run_id, state.error)
        assert state.step == TOOL_TURNS + 1
        lines = read_events(path)
        # The database's copy is the live log, byte for byte.
        assert "".join(line + "\n" for line in store.lines(run_id)) == path.read_text()
        assert sum(e["type"] == "llm_response" for e in lines) == TOOL_TURNS + 1
        resumed = any(e["type"] == "run_resumed" for e in lines)
        resumed_runs += resumed
        for turn in range(TOOL_TURNS + 1):
            asked = seen[(state.goal, turn)]
            # Each step's request reached the server once; a second time only for the step
            # a kill cut short, which the log marks with run_resumed.
            assert asked == 1 or (resumed and asked == 2), (run_id, turn, asked)
        for e in lines:
            if e["type"] == "tool_call_finished" and not e["result"]["is_error"]:
                turn = int(e["id"].split("_")[1])
                assert notes[f"{state.goal} #{turn}"] == 1
    store.close()
    return resumed_runs


def test_batch_runs_twenty_goals_four_at_a_time(workspace: Path, server_factory: Any) -> None:
    server = server_factory(note_loop(TOOL_TURNS))
    goals = write_goals(workspace)
    proc = run_cli(batch_args(goals), workspace=workspace, env=env(server.base_url), timeout=120)
    assert proc.code == 0, proc.stderr
    progress = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert len(progress) == RUNS
    assert f"batch: {RUNS} runs: {RUNS} success" in proc.stdout
    assert "Traceback" not in proc.stderr
    assert check_every_run(workspace, server.requests) == 0
    # The batch's process asks the Models API about the runs' model once a slot at most
    # (the runs that start together), not once a run: it remembers the answer.
    assert 1 <= len(server.model_gets) <= 4, server.model_gets
    # Nothing is run again by a second batch of the same file.
    asked = len(server.requests)
    again = run_cli(batch_args(goals), workspace=workspace, env=env(server.base_url), timeout=120)
    assert again.code == 0, again.stderr
    assert len(server.requests) == asked


def test_batch_killed_mid_way_resumes_without_loss_or_duplicates(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(note_loop(TOOL_TURNS, token_delay=0.03))
    goals = write_goals(workspace)
    proc = start_cli(batch_args(goals), workspace=workspace, env=env(server.base_url), text=False)
    try:
        wait_for(
            lambda: (
                sum(finished(p) for p in logs(workspace).values()) >= 5
                and any(mid_tool_turn(p) for p in logs(workspace).values())
            ),
            60,
            "five finished runs and one in the middle of its tool turns",
        )
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(10)
    done = sum(finished(p) for p in logs(workspace).values())
    assert done < RUNS, "the batch finished before the kill: nothing was tested"
    time.sleep(0.1)
    again = run_cli(batch_args(goals), workspace=workspace, env=env(server.base_url), timeout=120)
    assert again.code == 0, again.stderr
    assert f"batch: {RUNS} runs: {RUNS} success" in again.stdout
    # The kill cut runs in the middle, and they went on from their logs.
    assert check_every_run(workspace, server.requests) >= 1


def test_a_malformed_goals_line_is_one_error_and_nothing_runs(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(note_loop(TOOL_TURNS))
    goals = workspace / "goals.jsonl"
    goals.write_text('{"goal": "fine"}\n{"goal": "broken"\n', encoding="utf-8")
    proc = run_cli(batch_args(goals), workspace=workspace, env=env(server.base_url))
    assert proc.code == 2
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith(f"ruizn: error: {goals} line 2: not JSON")
    assert server.requests == []
    assert not (workspace / ".ruizn").exists()
