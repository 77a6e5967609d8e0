"""A batch's budget on a real Postgres, shared by two workers: every priced call is charged
once to the one budget in the database, runs in flight stop before their next call once it
is spent, and runs not started yet are not started."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ruizn.fleet.database import BUDGETS, EventStore
from ruizn.fleet.dbstore import DbRunStore
from tests.fakeapi import Reply, Stream, Text, ToolUse
from tests.fleet.batching import CALL, STEP
from tests.fleet.conftest import (
    env,
    first_text,
    ruizn,
    start_worker,
    statuses,
    stop_workers,
    wait_for,
)

pytestmark = pytest.mark.slow

RUNS = 6
BUDGET = 2.0


def priced_notes(body: dict[str, Any], index: int) -> Reply:
    """Two `note` calls, then an answer: three calls of $0.45, slow enough that both workers
    are running a run at once."""
    if first_text(body).startswith("eval "):  # a case of the eval below: one quick answer
        return Stream((Text("All noted."),), usage=STEP)
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if turns < 2:
        call = ToolUse(f"toolu_{turns:04d}_note", "note", {"text": f"{first_text(body)} #{turns}"})
        return Stream((Text("Noting it.", chunk=2), call), "tool_use", STEP, token_delay=0.1)
    return Stream((Text("All noted.", chunk=2),), usage=STEP, token_delay=0.1)


def lines_of(proc: Any) -> list[str]:
    seen: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            seen.append(line)

    threading.Thread(target=read, daemon=True).start()
    return seen


def test_two_workers_share_one_batch_budget_held_in_the_database(
    fresh_db: str, workspace: Path, server_factory: Any
) -> None:
    server = server_factory(priced_notes)
    environ = env(server.base_url, fresh_db)
    workers = {name: start_worker(name, workspace, environ, concurrency=1) for name in ("w1", "w2")}
    said = {name: lines_of(proc) for name, proc in workers.items()}
    try:
        wait_for(
            lambda: all(any("ready" in line for line in lines) for lines in said.values()),
            90,
            "both workers to be ready",
        )
        goals = workspace / "goals.jsonl"
        goals.write_text("".join(json.dumps({"goal": f"task {i}"}) + "\n" for i in range(RUNS)))
        submitted = ruizn(
            ["submit", str(goals), "--model", "claude-sonnet-5-5", "--batch-max-cost", str(BUDGET)],
            workspace,
            environ,
        )
        assert submitted.returncode == 0, submitted.stderr
        run_ids = submitted.stdout.split()
        done = {"success", "max_cost", "error"}
        wait_for(
            lambda: (
                set(run_ids) <= set(statuses(fresh_db))
                and all(statuses(fresh_db)[r][0] in done for r in run_ids)
            ),
            120,
            "every run to end",
        )
        calls = len(server.requests)
        # The same workers run an eval queued on their database (`ruizn eval --db`).
        evaluated = _eval_on(workspace, environ, fresh_db)
    finally:
        stop_workers(workers.values())
    _check_eval(evaluated, workspace, fresh_db)
    eval_runs = {t["run_id"] for t in evaluated["trials"]}
    final = {r: row for r, row in statuses(fresh_db).items() if r not in eval_runs}
    store = EventStore(fresh_db)
    try:
        runs = DbRunStore(store, workspace / "read")
        states = {r: runs.load(runs.find(r)).state for r in run_ids if store.has_run(r)}
        with store.engine.connect() as conn:
            (limit, spent) = conn.execute(sa.select(BUDGETS.c.max_cost, BUDGETS.c.spent)).one()
        lines = {r: list(store.lines(r)) for r in states}
    finally:
        store.close()
    assert limit == BUDGET
    # One spend for the whole batch, charged once per call, whoever made it.
    assert spent == pytest.approx(sum(s.cost for s in states.values()))
    assert spent == pytest.approx(CALL * calls)
    # Spent, and by no more than the calls the two runs in flight had begun when it was.
    assert BUDGET <= spent < BUDGET + 2 * CALL + 1e-9
    # Both workers drew on it.
    assert {worker for r, (status, worker) in final.items() if r in states} == {"w1", "w2"}
    # The runs not started once it was spent were not started: no event, no call.
    not_started = [r for r in run_ids if r not in states]
    assert not_started
    assert all(final[r][0] == "max_cost" for r in not_started)
    # A run it stopped logged why, and stopped before its next call.
    for run_id, state in states.items():
        if state.status.value == "max_cost":
            assert any('"type":"budget_spent"' in line for line in lines[run_id])
            assert state.step < 3
        else:
            assert state.status.value == "success"
    listing = ruizn(["runs"], workspace, environ)
    assert listing.returncode == 0, listing.stderr
    assert "COST" in listing.stdout.splitlines()[0]
    assert "$1.35" in listing.stdout or "$0.90" in listing.stdout or "$0.45" in listing.stdout


EVAL = {
    "cases": [
        {"name": name, "inputs": f"eval {name}", "expected_output": "All noted."}
        for name in ("one", "two")
    ],
    "evaluators": ["EqualsExpected", {"MaxSteps": 1}],
}


def _eval_on(workspace: Path, environ: dict[str, str], db: str) -> dict[str, Any]:
    (workspace / "eval.json").write_text(json.dumps(EVAL), encoding="utf-8")
    done = ruizn(
        ["eval", "eval.json", "--db", db, "--model", "claude-sonnet-5-5", "--json"],
        workspace,
        environ,
    )
    assert done.returncode == 0, done.stderr
    assert "2 runs queued on" in done.stderr  # the eval says who runs them
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _check_eval(report: dict[str, Any], workspace: Path, db: str) -> None:
    """Both cases passed, run by the workers; each is a run folder in the eval's runs folder
    (read back from the database: the workers kept theirs under their own log dirs)."""
    assert [t["outcome"] for t in report["trials"]] == ["passed", "passed"]
    ran_by = statuses(db)
    assert {ran_by[t["run_id"]][1] for t in report["trials"]} <= {"w1", "w2"}
    for trial in report["trials"]:
        log = workspace / ".ruizn" / "runs" / trial["run_id"] / "events.jsonl"
        assert trial["log_path"] == str(log)
        assert '"type":"run_finished"' in log.read_text(encoding="utf-8").splitlines()[-1]
