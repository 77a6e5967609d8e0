"""Approvals from any machine: a fleet run that needs a decision waits for one, and `ruizn
resume --db URL RUN --approve/--deny` given anywhere queues it with the decisions, which a
worker applies once (a real Postgres and worker, or `ruizn batch` on SQLite; the fake API)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOSClient

from tests.cli.approval_helpers import tool_results
from tests.cli.conftest import cli_env
from tests.fleet.conftest import (
    SUBPROCESS_PATH,
    batch_db,
    env,
    first_text,
    log_of,
    of_type,
    ruizn,
    start_worker,
    wait_for,
    writes_model,
)
from tests.fleet.conftest import statuses as stored_statuses

pytestmark = pytest.mark.slow


def workflows(db: str, run_id: str) -> dict[str, str]:
    client = DBOSClient(system_database_url=db)
    try:
        found = client.list_workflows(workflow_ids=[run_id], load_input=False, load_output=False)
        found += client.list_workflows(
            workflow_id_prefix=f"{run_id}/", load_input=False, load_output=False
        )
    finally:
        client.destroy()
    return {w.workflow_id: w.status for w in found}


def settled(db: str, run_id: str, status: str) -> bool:
    return stored_statuses(db).get(run_id, ("",))[0] == status and all(
        s == "SUCCESS" for s in workflows(db, run_id).values()
    )


def test_a_fleet_run_awaiting_approval_is_decided_from_another_machine(
    fresh_db: str, workspace: Path, tmp_path: Path, server_factory: Any
) -> None:
    server = server_factory(writes_model)
    environ = env(server.base_url, fresh_db)
    goals = workspace / "goals.jsonl"
    goals.write_text('{"goal": "approve", "id": "approve-me"}\n{"goal": "deny", "id": "deny-me"}\n')
    submitted = ruizn(
        ["submit", str(goals), "--model", "claude-sonnet-5-5", "--approval", "ask"],
        workspace,
        environ,
    )
    assert submitted.returncode == 0, submitted.stderr
    # The person deciding is on another machine: no workspace, no goals, no logs there.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    worker = start_worker("w1", workspace, environ)
    try:
        for run_id in ("approve-me", "deny-me"):
            wait_for(
                lambda r=run_id: settled(fresh_db, r, "awaiting_approval"), 60, f"{run_id} to wait"
            )
        listed = ruizn(["runs", "--db", fresh_db], elsewhere, environ)
        assert listed.returncode == 0, listed.stderr
        rows = {line.split()[0]: line.split()[1] for line in listed.stdout.splitlines()[1:]}
        assert rows == {"approve-me": "awaiting_approval", "deny-me": "awaiting_approval"}
        stopped = log_of(fresh_db, "approve-me")
        assert [e["id"] for e in of_type(stopped, "tool_approval_requested")] == ["toolu_w1"]
        assert not (workspace / "approved.txt").exists()

        # Without a decision a worker could only stop again: refused, nothing queued.
        bare = ruizn(["resume", "--db", fresh_db, "approve-me"], elsewhere, environ)
        assert (bare.returncode, bare.stdout) == (2, "")
        assert bare.stderr == (
            "ruizn: error: run approve-me is awaiting approval of tool calls (toolu_w1), which"
            " a fleet's workers cannot decide: give --approve ID|all or --deny ID|all\n"
        )
        # An id that does not wait is refused in one line, and nothing is queued.
        wrong = ruizn(
            ["resume", "--db", fresh_db, "approve-me", "--approve", "toolu_d1"], elsewhere, environ
        )
        assert (wrong.returncode, wrong.stdout) == (2, "")
        assert wrong.stderr == (
            "ruizn: error: 'toolu_d1' is not a tool call awaiting approval in run approve-me"
            " (awaiting: toolu_w1)\n"
        )
        assert workflows(fresh_db, "approve-me") == {"approve-me": "SUCCESS"}
        assert log_of(fresh_db, "approve-me") == stopped

        approved = ruizn(
            ["resume", "--db", fresh_db, "approve-me", "--approve", "toolu_w1"], elsewhere, environ
        )
        assert (approved.returncode, approved.stderr) == (0, "")
        assert approved.stdout == (
            "approve-me queued to resume on the fleet (max_steps 20; approve toolu_w1)\n"
        )
        # RUIZN_DB stands for --db.
        denied = ruizn(
            ["resume", "deny-me", "--deny", "all", "--reason", "not on a Friday"],
            elsewhere,
            environ,
        )
        assert (denied.returncode, denied.stderr) == (0, "")
        assert denied.stdout == (
            "deny-me queued to resume on the fleet (max_steps 20; deny toolu_d1, toolu_d2)\n"
        )
        for run_id in ("approve-me", "deny-me"):
            wait_for(lambda r=run_id: settled(fresh_db, r, "success"), 60, f"{run_id} to finish")
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=20)
    assert "Traceback" not in err, err
    assert "[worker w1] approve-me awaiting_approval · 1 step" in out
    assert "[worker w1] approve-me success · 2 steps" in out

    # The approved write was done once, decided once, by the person, after run_resumed.
    log = log_of(fresh_db, "approve-me")
    assert log[: len(stopped)] == stopped
    assert [e["type"] for e in log[len(stopped) : len(stopped) + 2]] == [
        "run_resumed",
        "tool_approval_decided",
    ]
    assert [(e["id"], e["approved"], e["by"]) for e in of_type(log, "tool_approval_decided")] == [
        ("toolu_w1", True, "user")
    ]
    assert [e["id"] for e in of_type(log, "tool_call_started")] == ["toolu_w1"]
    assert (workspace / "approved.txt").read_text() == "yes"
    assert workflows(fresh_db, "approve-me") == {
        "approve-me": "SUCCESS",
        "approve-me/resume-1": "SUCCESS",
    }

    # Both denied calls were answered with the person's reason, and nothing was written.
    log = log_of(fresh_db, "deny-me")
    assert [
        (e["id"], e["approved"], e["by"], e["reason"])
        for e in of_type(log, "tool_approval_decided")
    ] == [
        ("toolu_d1", False, "user", "not on a Friday"),
        ("toolu_d2", False, "user", "not on a Friday"),
    ]
    assert not of_type(log, "tool_call_started")
    assert not (workspace / "d1.txt").exists()
    assert not (workspace / "d2.txt").exists()
    told = next(
        tool_results(r.body)
        for r in server.requests
        if first_text(r.body) == "deny" and len(r.body["messages"]) == 3
    )
    assert {call: answer["content"] for call, answer in told.items()} == {
        call: "write_file was not run: the user denied this call. Reason: not on a Friday"
        for call in ("toolu_d1", "toolu_d2")
    }

    # A run that no longer waits takes no decision.
    late = ruizn(
        ["resume", "--db", fresh_db, "approve-me", "--approve", "toolu_w1"], elsewhere, environ
    )
    assert (late.returncode, late.stdout) == (2, "")
    assert late.stderr == (
        "ruizn: error: run approve-me finished with success: no call awaits approval\n"
    )


def test_a_batch_whose_runs_await_approval_exits_4_and_runs_their_decisions_next_time(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(writes_model)
    goals = workspace / "goals.jsonl"
    goals.write_text('{"goal": "approve", "id": "approve-me"}\n')
    environ = cli_env(server.base_url, PYTHONPATH=SUBPROCESS_PATH)

    def batch() -> subprocess.CompletedProcess[str]:
        return ruizn(["batch", str(goals), "--approval", "ask"], workspace, environ)

    first = batch()
    assert first.returncode == 4, first.stdout + first.stderr
    assert "batch: 1 run: 1 awaiting_approval" in first.stdout
    db = batch_db(workspace)
    approved = ruizn(["resume", "--db", db, "approve-me", "--approve", "all"], workspace, environ)
    assert (approved.returncode, approved.stderr) == (0, "")
    assert approved.stdout == (
        "approve-me queued to resume on the fleet (max_steps 20; approve toolu_w1)\n"
    )
    second = batch()
    assert second.returncode == 0, second.stdout + second.stderr
    assert "batch: 1 run: 1 success" in second.stdout
    assert (workspace / "approved.txt").read_text() == "yes"
    log = log_of(db, "approve-me")
    assert [e["id"] for e in of_type(log, "tool_call_started")] == ["toolu_w1"]
    # Again: nothing is run or decided a second time.
    third = batch()
    assert third.returncode == 0, third.stdout + third.stderr
    assert log_of(db, "approve-me") == log
    assert len(server.requests) == 2
