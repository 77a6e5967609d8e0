"""What a recovered workflow does with the events stored before the crash (no DBOS needed:
the workflow's body is called as DBOS calls it on recovery)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ruizn.events import LlmCallStarted, LlmResponse, RunStarted, ToolCallStarted
from ruizn.fleet.app import FleetContext, execute
from ruizn.fleet.database import EventStore
from ruizn.fleet.driver import RunInput
from ruizn.fleet.resume import ResumeOrder
from ruizn.limits import Limits
from ruizn.serde import encode
from ruizn.settings import RunSettings
from ruizn.state import ToolUseBlock
from tests.cli.conftest import API_KEY, read_events
from tests.fakeapi import HttpError
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
            settings=RunSettings(
                model="test",
                max_steps=5,
                max_tokens=100,
                system="s",
                tools=(NoteTool(workspace).schema(),),
                workspace=str(workspace),
            ),
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
    spec = RunInput(
        run_id="r1",
        goal="note it",
        settings=RunSettings(
            model="test", max_steps=5, max_tokens=100, system="s", workspace=str(workspace)
        ),
    )
    result = execute(ctx, spec)
    assert result["status"] == "success"
    assert not (workspace / NOTES).exists(), "the interrupted tool ran again"
    log = tmp_path / "logs" / "r1" / "events.jsonl"
    events = read_events(log)
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


def _context(tmp_path: Path, name: str = "fleet") -> FleetContext:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (workspace / "README.md").write_text("# Demo\n")
    return FleetContext(
        store=EventStore(f"sqlite:///{tmp_path / (name + '.sqlite')}"),
        log_root=tmp_path / name,
        worker=name,
        tools=make_tools,
        workspace=str(workspace),
    )


def _spec(model: str = "test", max_steps: int = 1) -> RunInput:
    return RunInput(
        run_id="r1",
        goal="read README.md",
        settings=RunSettings(
            model=model, max_steps=max_steps, max_tokens=100, system="s", max_retries=0
        ),
    )


def _events(store: EventStore) -> list[dict[str, Any]]:
    return [json.loads(line) for line in store.lines("r1")]


def test_a_resume_order_is_applied_once_however_often_its_workflow_runs(tmp_path: Path) -> None:
    ctx, spec = _context(tmp_path), _spec()
    assert execute(ctx, spec)["status"] == "max_steps"  # the offline model read README.md
    stopped = _events(ctx.store)
    order = ResumeOrder(run=spec, after_seq=len(stopped), limits=Limits(max_steps=2))
    result = execute(ctx, spec, order=order)
    assert (result["status"], result["steps"]) == ("success", 2)
    events = _events(ctx.store)
    assert events[: len(stopped)] == stopped
    assert events[len(stopped)]["type"] == "run_resumed"
    log = ctx.log_root / "r1" / "events.jsonl"
    assert "".join(line + "\n" for line in ctx.store.lines("r1")) == log.read_text()
    # DBOS runs the order's workflow again (its worker died before DBOS recorded the end):
    # the log has grown past the order's seq, so nothing more happens.
    before = log.read_bytes()
    assert execute(ctx, spec, order=order)["status"] == "success"
    assert log.read_bytes() == before


def test_a_resumed_run_that_stops_again_is_not_resumed_again_by_its_order(
    tmp_path: Path, server_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = server_factory([HttpError(500, "api_error", "down")] * 3)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    ctx, spec = _context(tmp_path), _spec("claude-sonnet-5-5", max_steps=5)
    assert execute(ctx, spec)["status"] == "error"  # no retries, the API is down
    order = ResumeOrder(run=spec, after_seq=len(_events(ctx.store)), limits=Limits(max_steps=5))
    assert execute(ctx, spec, order=order)["status"] == "error"  # down still
    after = _events(ctx.store)
    assert [e["type"] for e in after].count("run_resumed") == 1
    # The order's workflow runs again: the run stopped with error as before, but its log
    # has grown past the order, so the API is not called a third time.
    assert execute(ctx, spec, order=order)["status"] == "error"
    assert _events(ctx.store) == after
    assert len(server.requests) == 2


def test_a_resume_cut_short_goes_on_without_resuming_again(tmp_path: Path) -> None:
    ctx, spec = _context(tmp_path), _spec()
    execute(ctx, spec)
    after = len(_events(ctx.store))
    order = ResumeOrder(run=spec, after_seq=after, limits=Limits(max_steps=3, max_tokens=200))
    execute(ctx, spec, order=order)
    # The worker died right after the order's run_resumed and the next call's start: another
    # worker's database holds only that much when DBOS gives it the order's workflow.
    cut = list(ctx.store.lines("r1"))[: after + 2]
    taken = _context(tmp_path, "other")
    taken.store.append("r1", list(enumerate(cut, start=1)))
    assert execute(taken, spec, order=order)["status"] == "success"
    events = _events(taken.store)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    resumes = [
        (e["seq"], e["max_steps"], e["max_tokens"]) for e in events if e["type"] == "run_resumed"
    ]
    # The order's, once; then the recovery's, which keeps the limits and sets none.
    assert resumes == [(after + 1, 3, 200), (after + 3, 3, None)]
