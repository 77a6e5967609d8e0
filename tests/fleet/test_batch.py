"""`ruizn batch` on SQLite against the local fake API: real CLI, real SDK, real DBOS."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import run_cli, start_cli
from tests.fleet.batching import (
    RUNS,
    TOOL_TURNS,
    batch_args,
    check_every_run,
    env,
    finished,
    logs,
    mid_tool_turn,
    write_goals,
)
from tests.fleet.conftest import note_loop, wait_for

pytestmark = pytest.mark.slow


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
