"""What a recovered workflow does with the events stored before the crash (no DBOS needed:
the workflow's body is called as DBOS calls it on recovery)."""

from __future__ import annotations

import json
from pathlib import Path

from ruizn.events import LlmCallStarted, LlmResponse, RunStarted, ToolCallStarted
from ruizn.fleet.app import FleetContext, execute
from ruizn.fleet.driver import RunSpec
from ruizn.fleet.store import EventStore
from ruizn.serde import encode
from ruizn.state import ToolUseBlock
from tests.fleet.tools import NOTES, NoteTool, make_tools


def test_a_tool_in_flight_at_the_crash_is_answered_interrupted_and_never_run_again(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = EventStore(f"sqlite:///{tmp_path / 'fleet.sqlite'}")
    call = {"text": "once"}
    stored = [
        RunStarted(
            seq=1,
            ts=1.0,
            run_id="r1",
            goal="note it",
            model="test",
            max_steps=5,
            max_tokens=100,
            system="s",
            tools=(NoteTool(workspace).schema(),),
            workspace=str(workspace),
        ),
        LlmCallStarted(seq=2, ts=1.0, step=1),
        LlmResponse(
            seq=3,
            ts=1.0,
            content=(ToolUseBlock(id="toolu_1", name="note", input=call),),
            stop_reason="tool_use",
        ),
        # Committed before the tool ran; then the worker died.
        ToolCallStarted(seq=4, ts=1.0, id="toolu_1", name="note", input=call),
    ]
    store.append("r1", [(e.seq, encode(e)) for e in stored])
    ctx = FleetContext(
        store=store,
        log_root=tmp_path / "logs",
        worker="w2",
        tools=make_tools,
        workspace=str(workspace),
    )
    spec = RunSpec(
        run_id="r1",
        goal="note it",
        model="test",
        max_steps=5,
        max_tokens=100,
        system="s",
        workspace=str(workspace),
    )
    result = execute(ctx, spec)
    assert result["status"] == "success"
    assert not (workspace / NOTES).exists(), "the interrupted tool ran again"
    log = tmp_path / "logs" / "r1" / "events.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[4]["type"] == "run_resumed"
    assert events[5]["type"] == "tool_call_finished"
    assert events[5]["result"]["error_type"] == "interrupted"
    assert "".join(line + "\n" for line in store.lines("r1")) == log.read_text()
    # DBOS may run the workflow again after the end (a crash before it recorded the
    # outcome): nothing more happens.
    before = log.read_bytes()
    assert execute(ctx, spec)["status"] == "success"
    assert log.read_bytes() == before
