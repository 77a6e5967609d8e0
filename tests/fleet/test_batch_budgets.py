"""On `batch`, `--max-cost` is each run's own budget and `--batch-max-cost` the whole batch's:
two budgets, two options (a goals line may set the first, never the second). And a fleet
command that cannot start says why in one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ruizn.fleet.database import BUDGETS, EventStore
from tests.cli.conftest import cli_env
from tests.fakeapi import Reply, Stream, Text, ToolUse
from tests.fleet.batching import CALL, STEP
from tests.fleet.conftest import SUBPROCESS_PATH, batch_db, first_text, ruizn
from tests.warm_client import run_ruizn

pytestmark = pytest.mark.slow

RUNS = 3


def priced_notes(body: dict[str, Any], index: int) -> Reply:
    """Two `note` calls, then an answer: three calls of $0.45 a run."""
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if turns < 2:
        call = ToolUse(f"toolu_{turns:04d}_note", "note", {"text": f"{first_text(body)} #{turns}"})
        return Stream((Text("Noting it."), call), "tool_use", STEP)
    return Stream((Text("All noted."),), usage=STEP)


def batch(workspace: Path, base_url: str | None, *options: str) -> Any:
    goals = workspace / "goals.jsonl"
    goals.write_text("".join(json.dumps({"goal": f"task {i}"}) + "\n" for i in range(RUNS)))
    args = ["batch", str(goals), "--concurrency", "1", "--model", "claude-sonnet-5-5"]
    args += ["--tools-from", "tests.fleet.tools:make_tools"]
    return run_ruizn(
        [*args, *options],
        cwd=workspace,
        env=cli_env(base_url, PYTHONPATH=SUBPROCESS_PATH),
        timeout=300,  # three runs in a row, on a loaded machine
    )


def budgets(workspace: Path) -> list[tuple[float, float]]:
    store = EventStore(batch_db(workspace))
    try:
        with store.engine.connect() as conn:
            rows = conn.execute(sa.select(BUDGETS.c.max_cost, BUDGETS.c.spent)).all()
        return [(float(limit), float(spent)) for limit, spent in rows]
    finally:
        store.close()


def test_max_cost_on_a_batch_is_each_runs_budget_only(workspace: Path, server_factory: Any) -> None:
    # Three calls of $0.45 a run: under $1 before its third, so each run ends; together
    # they spend $4.05, four times the --max-cost, and no run is stopped for it.
    server = server_factory(priced_notes)
    done = batch(workspace, server.base_url, "--max-cost", "1")
    assert done.returncode == 0, done.stderr
    assert f"batch: {RUNS} runs: {RUNS} success" in done.stdout
    assert len(server.requests) == 3 * RUNS
    assert budgets(workspace) == []  # no budget shared by the batch


def test_batch_max_cost_is_the_whole_batchs_budget(workspace: Path, server_factory: Any) -> None:
    # The first run spends $1.35 (its third call starts under $1); the others never start.
    server = server_factory(priced_notes)
    done = batch(workspace, server.base_url, "--batch-max-cost", "1")
    assert done.returncode == 1, done.stderr
    assert f"batch: {RUNS} runs: {RUNS - 1} max_cost, 1 success" in done.stdout
    assert len(server.requests) == 3
    assert budgets(workspace) == [(1.0, pytest.approx(3 * CALL))]


def test_a_goals_line_never_sets_the_batchs_budget(workspace: Path) -> None:
    goals = workspace / "goals.jsonl"
    goals.write_text('{"goal": "a", "batch_max_cost": 5}\n')
    refused = ruizn(
        ["batch", str(goals), "--model", "test"], workspace, cli_env(None, PYTHONPATH="")
    )
    assert refused.returncode == 2
    assert refused.stderr == (
        f"ruizn: error: {goals} line 1: batch_max_cost is the whole batch's budget: give"
        " --batch-max-cost USD on the command line (a line's max_cost is its run's own"
        " budget)\n"
    )
    assert refused.stdout == ""


def test_a_batch_budget_for_a_model_without_a_price_is_refused_before_anything_runs(
    workspace: Path,
) -> None:
    # Its runs would spend without counting: refused as `--max-cost` is for one run.
    goals = workspace / "goals.jsonl"
    goals.write_text('{"goal": "a"}\n{"goal": "b", "model": "claude-sonnet-5-5"}\n')
    environ = cli_env(None, PYTHONPATH="")
    db = workspace / "fleet.sqlite"
    budget = ["--model", "test", "--batch-max-cost", "1"]
    for args in (["batch", str(goals)], ["submit", "--db", f"sqlite:///{db}", "--goal", "a"]):
        refused = ruizn([*args, *budget], workspace, environ)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.startswith("ruizn: error: no known price for model test (")
        assert refused.stderr.endswith(": a --batch-max-cost budget cannot be kept for it\n")
        assert refused.stdout == ""
    assert not (workspace / ".ruizn").exists()
    assert not db.exists()


def test_a_worker_whose_log_dir_cannot_be_made_says_so_in_one_line(workspace: Path) -> None:
    (workspace / "afile").write_text("not a folder\n")
    where = workspace / "afile" / "runs"
    refused = ruizn(
        ["worker", "--db", f"sqlite:///{workspace / 'fleet.db'}", "--log-dir", str(where)],
        workspace,
        cli_env(None, PYTHONPATH=""),
    )
    assert refused.returncode == 2
    assert refused.stderr == f"ruizn: error: cannot create the log dir {where}: Not a directory\n"
