"""The batch tests' world: a goals file, the runs' logs, and the check that every run ended
once, each tool call noted once (test_batch and test_batch_helpers share it)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from ruizn.effects.runlog.reader import replay_file
from ruizn.fleet.database import EventStore
from ruizn.state import Status
from tests.cli.conftest import cli_env, read_events
from tests.fakeapi import Usage
from tests.fleet.conftest import SUBPROCESS_PATH, batch_db, requests_per_goal
from tests.fleet.tools import NOTES

# A priced step of the budget tests.
CALL = 0.45  # 150,000 tokens in and 15,000 out on claude-sonnet-5-5 ($2 and $10 per MTok)
STEP = Usage(input_tokens=150_000, output_tokens=15_000)

RUNS = 20
TOOL_TURNS = 2


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
