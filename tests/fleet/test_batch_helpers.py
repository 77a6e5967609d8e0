"""`ruizn batch` runs part of its slots in a helper process, a fork of the batch (Linux; at
concurrency 16 here, with RUIZN_BATCH_HELPERS=1: on its own a batch forks one at 64): kill -9
of the batch takes its helper with it, and a helper killed alone has its runs finished by
the batch; in both, no run is lost and no tool runs twice. Also how many helpers a batch
forks on its own."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from ruizn.fleet.helpers import helper_count
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
from tests.fleet.tools import NOTES

on_linux = pytest.mark.skipif(
    helper_count(16, {"RUIZN_BATCH_HELPERS": "1"}) == 0, reason="helpers start on Linux"
)


@on_linux
@pytest.mark.parametrize(
    ("concurrency", "cores", "environ", "expected"),
    [
        (16, 8, {}, 0),  # one process keeps 32 runs busy
        (63, 8, {}, 0),
        (64, 2, {}, 1),  # two processes, one a core
        (64, 1, {}, 0),  # no second core to use
        (256, 2, {}, 1),
        (256, 16, {}, 7),  # one process per 32 slots
        (64, 2, {"RUIZN_BATCH_HELPERS": "0"}, 0),  # the user says
        (16, 1, {"RUIZN_BATCH_HELPERS": "3"}, 3),
        (4, 8, {"RUIZN_BATCH_HELPERS": "9"}, 3),  # never as many as the slots
        (64, 2, {"RUIZN_BATCH_HELPERS": "many"}, 1),  # not a number: the batch's own choice
    ],
)
def test_how_many_helpers_a_batch_forks(
    concurrency: int, cores: int, environ: dict[str, str], expected: int
) -> None:
    assert helper_count(concurrency, environ, cores=cores) == expected


def helped(base_url: str) -> dict[str, str]:
    return {**env(base_url), "RUIZN_BATCH_HELPERS": "1"}


def helpers_of(batch: int) -> list[int]:
    """The pids of the batch's helper processes: its children with its own command line (a
    helper is a fork of it; a tool's or git's process has another)."""
    try:
        command = Path(f"/proc/{batch}/cmdline").read_bytes()
    except OSError:
        return []
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            same = (entry / "cmdline").read_bytes() == command
        except OSError:
            continue
        if same and int(stat.rsplit(")", 1)[1].split()[1]) == batch:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@on_linux
@pytest.mark.slow
def test_a_batch_killed_takes_its_helper_and_a_smaller_batch_finishes_every_run(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(note_loop(TOOL_TURNS, token_delay=0.03))
    goals = write_goals(workspace)
    proc = start_cli(
        batch_args(goals, concurrency=16),
        workspace=workspace,
        env=helped(server.base_url),
        text=False,
    )
    try:
        helpers = wait_for(lambda: helpers_of(proc.pid), 60, "the batch's helper process")
        wait_for(
            lambda: any(mid_tool_turn(p) for p in logs(workspace).values()),
            60,
            "a run in the middle of its tool turns",
        )
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(10)
    # The kernel ends the helper with the batch: nothing writes a run while the next batch
    # resumes it.
    wait_for(lambda: not any(alive(pid) for pid in helpers), 10, "the helper to die")
    assert sum(finished(p) for p in logs(workspace).values()) < RUNS, "nothing was cut"
    # Started again with 4 slots (no helper): the helper's runs are resumed here too.
    again = run_cli(
        batch_args(goals, concurrency=4), workspace=workspace, env=env(server.base_url), timeout=180
    )
    assert again.code == 0, again.stderr
    assert f"batch: {RUNS} runs: {RUNS} success" in again.stdout
    assert check_every_run(workspace, server.requests) >= 1


@on_linux
@pytest.mark.slow
def test_a_helper_killed_alone_leaves_its_runs_to_the_batch(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(note_loop(TOOL_TURNS, token_delay=0.03))
    goals = write_goals(workspace)
    proc = start_cli(
        batch_args(goals, concurrency=16), workspace=workspace, env=helped(server.base_url)
    )
    try:
        helpers = wait_for(lambda: helpers_of(proc.pid), 60, "the batch's helper process")
        wait_for(
            lambda: any(mid_tool_turn(p) for p in logs(workspace).values()),
            60,
            "a run in the middle of its tool turns",
        )
        for pid in helpers:
            os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert f"batch: {RUNS} runs: {RUNS} success" in out
    assert "a helper process of the batch ended" in err
    assert "Traceback" not in err
    # The runs the helper had in flight went on in the batch, from their logs.
    assert check_every_run(workspace, server.requests) >= 1


@on_linux
@pytest.mark.slow
@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="a batch forks a helper only with a second core"
)
def test_a_batch_of_64_at_once_forks_a_helper_of_its_own_and_every_run_ends_once(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(note_loop(1, token_delay=0.02))
    goals = write_goals(workspace, 80)
    proc = start_cli(
        batch_args(goals, concurrency=64), workspace=workspace, env=env(server.base_url)
    )
    try:
        wait_for(lambda: helpers_of(proc.pid), 60, "the batch's helper process")
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "batch: 80 runs: 80 success" in out
    notes = (workspace / NOTES).read_text().splitlines()
    assert sorted(notes) == sorted(f"goal {i:02d} #0" for i in range(80))  # each tool ran once
