"""`runs`, `runs --db`, the batch table and `show` fit the terminal they print to.

Each command runs with a pseudo-terminal as its stdout (COLUMNS set, as a terminal's shell
sets it) at 80 and at 200 columns: no line is wider than the terminal, and the goal takes
the room that is left, cut with "…" only when it must. Piped, every line is whole.
"""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from tests.cli.conftest import cli_env, run_cli
from tests.cli.terminals import run_on_pty

pytestmark = pytest.mark.slow

GOAL = (
    "read every file of the project and write a short summary of what each module does,"
    " then list the three riskiest functions"
)  # 122 characters: cut at 80 columns, whole at 200


def _cells(line: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def _env(columns: int) -> dict[str, str]:
    env = cli_env(None, COLUMNS=str(columns))
    env.pop("ANTHROPIC_API_KEY")  # --model test needs none
    return env


def _piped(args: list[str], workspace: Path) -> str:
    done = run_cli(args, workspace=workspace, env=_env(80))
    assert done.code == 0, done.stderr
    return done.stdout


def _at_terminal(args: list[str], workspace: Path, columns: int) -> list[str]:
    code, shown = run_on_pty(args, workspace, _env(columns))
    assert code == 0, shown
    lines = shown.replace("\r\n", "\n").split("\n")
    # What a progress line erased (\r ESC[K) is no longer on the screen.
    lines = [line.rsplit("\r", 1)[-1].replace("\x1b[K", "") for line in lines]
    for line in lines:
        assert _cells(line) <= columns, f"{_cells(line)} > {columns}: {line!r}"
    return lines


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace with one run of GOAL and a batch of two goals (GOAL among them)."""
    workspace = tmp_path_factory.mktemp("fit")
    (workspace / "goals.jsonl").write_text(
        json.dumps({"goal": GOAL}) + "\n" + json.dumps({"goal": "hi"}) + "\n", encoding="utf-8"
    )
    _piped(["run", "--model", "test", "--goal", GOAL], workspace)
    return workspace


def _goal_row(lines: list[str]) -> str:
    return next(line for line in lines if line.startswith(("2", "goal-")) and "read every" in line)


@pytest.mark.parametrize("columns", [80, 200])
def test_runs_fits_the_terminal(ran: Path, columns: int) -> None:
    lines = _at_terminal(["runs"], ran, columns)
    assert lines[0].startswith("RUN ")
    assert lines[0].rstrip().endswith("GOAL")
    row = _goal_row(lines)
    if columns == 80:
        assert row.endswith("…")
        assert len(row.split("  ")[-1]) >= 20  # the goal keeps a useful share
    else:
        assert row.endswith(GOAL)


def test_runs_piped_is_whole(ran: Path) -> None:
    out = _piped(["runs"], ran)
    assert any(line.endswith(GOAL) for line in out.splitlines())


@pytest.mark.parametrize("columns", [80, 200])
def test_show_fits_the_terminal(ran: Path, columns: int) -> None:
    run_id = next(p.name for p in (ran / ".ruizn" / "runs").iterdir() if p.name[0].isdigit())
    lines = _at_terminal(["show", run_id], ran, columns)
    text = "\n".join(lines)
    assert lines[0] == f"run:       {run_id}"
    # The log's path is whole, whether on one line or wrapped under itself.
    path = str(ran / ".ruizn" / "runs" / run_id / "events.jsonl")
    joined = "".join(line[11:] if line.startswith(("log:", " " * 11)) else "\n" for line in lines)
    assert path in joined or path in text
    if columns == 200:
        assert f"goal:      {GOAL}" in lines


def test_show_piped_is_whole(ran: Path) -> None:
    out = _piped(["show", "last"], ran)
    assert f"goal:      {GOAL}" in out.splitlines()


@pytest.fixture(scope="module")
def batched(ran: Path) -> tuple[Path, dict[int, list[str]]]:
    """The batch, run at an 80-column terminal, then again (resumed: the same table) at
    200."""
    tables = {
        columns: _at_terminal(["batch", "goals.jsonl", "--model", "test"], ran, columns)
        for columns in (80, 200)
    }
    return ran, tables


@pytest.mark.parametrize("columns", [80, 200])
def test_batch_table_fits_the_terminal(
    batched: tuple[Path, dict[int, list[str]]], columns: int
) -> None:
    _, tables = batched
    lines = tables[columns]
    header = next(line for line in lines if line.startswith("RUN "))
    assert header.rstrip().endswith("GOAL")
    row = _goal_row(lines)
    assert row.endswith("…" if columns == 80 else GOAL)


@pytest.mark.parametrize("columns", [80, 200])
def test_runs_db_fits_the_terminal(
    batched: tuple[Path, dict[int, list[str]]], columns: int
) -> None:
    workspace, _ = batched
    from ruizn.fleet.batch import database_of

    # The batch's database, in the state directory the batch's environment names (#28).
    db = f"sqlite:///{database_of(workspace / '.ruizn' / 'runs', cli_env(None))}"
    lines = _at_terminal(["runs", "--db", db], workspace, columns)
    row = _goal_row(lines)
    assert "(batch)" in row  # the status names the worker, and still fits
    assert row.endswith("…" if columns == 80 else GOAL)
    piped = _piped(["runs", "--db", db], workspace)
    assert any(line.endswith(GOAL) for line in piped.splitlines())
