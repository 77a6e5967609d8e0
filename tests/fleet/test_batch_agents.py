"""`ruizn batch` finds subagents as `ruizn run` does: `--agents DIR` is the person's own
choice, a workspace's definitions stay data without a yes at a terminal, and a child the
model starts is a queued run of the batch's fleet with its own log (real CLI, DBOS)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import run_cli
from tests.fakeapi import Stream, Text
from tests.fakeapi.replies import Reply, ToolUse, by_system, tool_results, turns
from tests.fleet.conftest import batch_db

pytestmark = pytest.mark.slow

PLANTED = "---\nname: x\ndescription: Planted.\ntools: Read, Bash\n---\nYou are x.\n"
MINE = "---\nname: reviewer\ndescription: Reviews.\ntools: [Read]\nmaxTurns: 3\n---\nYou review.\n"


def test_batch_takes_agents_dirs_and_not_a_workspaces_definitions_unasked(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    planted = workspace / ".ruizn" / "agents"
    planted.mkdir(parents=True)
    (planted / "x.md").write_text(PLANTED, encoding="utf-8")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "reviewer.md").write_text(MINE, encoding="utf-8")

    def lead(body: dict[str, Any], index: int) -> Reply:
        if turns(body) == 0:
            call = {"subagent_type": "reviewer", "description": "review", "prompt": "Look."}
            return Stream((ToolUse("toolu_r", "agent", call),), stop_reason="tool_use")
        return Stream((Text(f"Reviewer: {tool_results(body)[0]['content']}"),))

    server = server_factory(
        by_system({"You review": lambda b, i: Stream((Text("Fine."),)), "": lead})
    )
    goals = workspace / "goals.jsonl"
    goals.write_text(json.dumps({"goal": "go", "id": "lead"}) + "\n", encoding="utf-8")
    proc = run_cli(
        ["batch", str(goals), "--agents", str(mine), "--concurrency", "2"],
        workspace=workspace,
        base_url=server.base_url,
        timeout=120,
    )
    assert proc.code == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert (
        "the workspace defines 1 subagent(s) (x); they do not run without a person's yes at"
        " a terminal, or --agents DIR naming them" in proc.stderr
    )
    root = workspace / ".ruizn" / "runs"
    lead_log = [json.loads(line) for line in (root / "lead" / "events.jsonl").open()]
    offered = [a["name"] for a in lead_log[0]["settings"]["subagents"]]
    assert offered == ["reviewer", "general"]
    started = next(e for e in lead_log if e["type"] == "subagent_started")
    ended = next(e for e in lead_log if e["type"] == "subagent_finished")
    assert ended["status"] == "success"
    # The child is a run of its own, queued on the fleet, its log naming its parent.
    child = next(p for p in root.rglob("events.jsonl") if started["run_id"] in str(p))
    first = json.loads(child.open().readline())
    assert first["parent"]["run_id"] == "lead"
    assert first["parent"]["agent"] == "reviewer"
    assert lead_log[-1]["type"] == "run_finished"
    database = batch_db(workspace).removeprefix("sqlite:///")
    with contextlib.closing(sqlite3.connect(database)) as conn:
        queued = conn.execute(
            "SELECT queue_name, status FROM workflow_status WHERE workflow_uuid = ?",
            (started["run_id"],),
        ).fetchall()
    assert queued == [("ruizn.children", "SUCCESS")]
    answer = [e for e in lead_log if e["type"] == "llm_response"][-1]
    assert answer["content"][0]["text"] == "Reviewer: Fine."
