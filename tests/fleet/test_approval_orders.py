"""Decisions for a fleet run that waits for approval: checked against the stored events on
the asking machine, and applied once by the worker however often DBOS runs the order's
workflow (its body is called here as DBOS calls it; SQLite, the fake API)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ruizn.fleet.app import FleetContext, execute
from ruizn.fleet.database import EventStore
from ruizn.fleet.dbstore import DbRunStore
from ruizn.fleet.driver import RunInput
from ruizn.fleet.resume import Checked, FleetResumeRefused, check_resume
from ruizn.limits import Limits
from ruizn.settings import RunSettings
from ruizn.state import ExecutionContext
from tests.cli.approval_helpers import tool_results, turns_model, write
from tests.cli.conftest import API_KEY
from tests.fleet.tools import make_tools

WRITES = [write("toolu_a", "a.txt", "one"), write("toolu_b", "b.txt", "two")]


@pytest.fixture
def api(server_factory: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fake API: one turn asking for two writes, then "Done."."""
    server = server_factory(turns_model([WRITES]))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    return server


def context(tmp_path: Path, name: str) -> FleetContext:
    """A worker's context: its own database and log root; the workspace is the one the run
    recorded (a resumed run goes on in it)."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    (tmp_path / name).mkdir()
    return FleetContext(
        store=EventStore(f"sqlite:///{tmp_path / name / 'fleet.sqlite'}"),
        log_root=tmp_path / name / "logs",
        worker=name,
        tools=make_tools,
        workspace=str(workspace),
    )


SPEC = RunInput(
    run_id="r1",
    goal="write both files",
    settings=RunSettings(model="claude-sonnet-5-5", system="s", max_retries=0, approval="ask"),
)


def events(ctx: FleetContext) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ctx.store.lines("r1")]


def state_of(ctx: FleetContext) -> ExecutionContext:
    runs = DbRunStore(ctx.store, ctx.log_root)
    return runs.load(runs.find("r1")).state


def check(state: ExecutionContext, **decisions: Any) -> Checked:
    return check_resume("r1", state, (), limits=Limits(), **decisions)


def decided(log: list[dict[str, Any]]) -> list[tuple[str, bool, str, str | None]]:
    return [
        (e["id"], e["approved"], e["by"], e["reason"])
        for e in log
        if e["type"] == "tool_approval_decided"
    ]


def started(log: list[dict[str, Any]]) -> list[str]:
    return [e["id"] for e in log if e["type"] == "tool_call_started"]


def test_a_worker_has_nobody_to_ask_so_an_ask_run_waits(tmp_path: Path, api: Any) -> None:
    ctx = context(tmp_path, "w1")
    assert execute(ctx, SPEC)["status"] == "awaiting_approval"
    log = events(ctx)
    assert [e["id"] for e in log if e["type"] == "tool_approval_requested"] == [
        "toolu_a",
        "toolu_b",
    ]
    assert log[-1]["status"] == "awaiting_approval"
    assert not started(log)
    assert not (Path(ctx.workspace) / "a.txt").exists()
    assert ctx.store.runs()[0].status == "awaiting_approval"


def test_decisions_are_checked_against_the_calls_the_stored_events_show_waiting(
    tmp_path: Path, api: Any
) -> None:
    ctx = context(tmp_path, "w1")
    execute(ctx, SPEC)
    state = state_of(ctx)

    def refused(**decisions: Any) -> str:
        with pytest.raises(FleetResumeRefused) as caught:
            check(state, **decisions)
        return str(caught.value)

    assert refused() == (
        "run r1 is awaiting approval of tool calls (toolu_a, toolu_b), which a fleet's workers"
        " cannot decide: give --approve ID|all or --deny ID|all"
    )
    assert refused(approve=("toolu_zz",)) == (
        "'toolu_zz' is not a tool call awaiting approval in run r1 (awaiting: toolu_a, toolu_b)"
    )
    assert refused(approve=("toolu_a",), deny=("toolu_a",)) == (
        "both --approve and --deny name 'toolu_a'"
    )
    assert refused(approve=("all",), reason="why") == (
        "--reason goes with --deny (it is what the model is told)"
    )
    # `all` becomes the ids that wait now: a worker can decide nothing else.
    every = check(state, approve=("all",))
    assert (every.approve, every.deny, every.reason) == (("toolu_a", "toolu_b"), (), None)
    # A named id wins over `all`; a call named by neither waits on.
    mixed = check(state, approve=("all",), deny=("toolu_b",), reason="not b")
    assert (mixed.approve, mixed.deny, mixed.reason) == (("toolu_a",), ("toolu_b",), "not b")
    one = check(state, deny=("toolu_a",))
    assert (one.approve, one.deny) == ((), ("toolu_a",))


def test_an_order_decides_once_however_often_its_workflow_runs(tmp_path: Path, api: Any) -> None:
    ctx = context(tmp_path, "w1")
    execute(ctx, SPEC)
    state = state_of(ctx)
    stopped = events(ctx)
    checked = check(state, approve=("toolu_a",), deny=("all",), reason="not b")
    order = checked.order(SPEC, after_seq=state.last_seq)
    assert execute(ctx, SPEC, order=order)["status"] == "success"
    log = events(ctx)
    assert log[: len(stopped)] == stopped
    assert [e["type"] for e in log[len(stopped) : len(stopped) + 3]] == [
        "run_resumed",
        "tool_approval_decided",
        "tool_approval_decided",
    ]
    assert decided(log) == [
        ("toolu_a", True, "user", None),
        ("toolu_b", False, "user", "not b"),
    ]
    assert started(log) == ["toolu_a"]
    workspace = Path(ctx.workspace)
    assert (workspace / "a.txt").read_text() == "one"
    assert not (workspace / "b.txt").exists()
    # The model is told who denied the call, and why.
    answers = tool_results(api.requests[-1].body)
    assert answers["toolu_b"]["is_error"] is True
    assert answers["toolu_b"]["content"] == (
        "write_file was not run: the user denied this call. Reason: not b"
    )
    # DBOS runs the order's workflow again (its worker died before DBOS recorded the end):
    # the log has grown past the order's seq, so nothing is decided or run again.
    before, asked = (ctx.log_root / "r1" / "events.jsonl").read_bytes(), len(api.requests)
    assert execute(ctx, SPEC, order=order)["status"] == "success"
    assert (ctx.log_root / "r1" / "events.jsonl").read_bytes() == before
    assert len(api.requests) == asked


@pytest.mark.parametrize("written", [1, 2], ids=["run_resumed", "one-decision"])
def test_a_worker_that_died_mid_order_leaves_no_decision_lost_or_doubled(
    tmp_path: Path, api: Any, written: int
) -> None:
    first = context(tmp_path, "w1")
    execute(first, SPEC)
    state = state_of(first)
    checked = check(state, approve=("toolu_a",), deny=("toolu_b",), reason="no")
    order = checked.order(SPEC, after_seq=state.last_seq)
    execute(first, SPEC, order=order)
    # The worker died after writing `written` lines of the order (run_resumed, then the
    # first decision): another worker's database holds that much when DBOS hands it the
    # order's workflow.
    cut = list(first.store.lines("r1"))[: state.last_seq + written]
    (Path(first.workspace) / "a.txt").unlink()  # as if the first worker never got to write it
    taken = context(tmp_path, "w2")
    taken.store.append("r1", list(enumerate(cut, start=1)))
    assert execute(taken, SPEC, order=order)["status"] == "success"
    log = events(taken)
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1))
    assert decided(log) == [("toolu_a", True, "user", None), ("toolu_b", False, "user", "no")]
    assert started(log) == ["toolu_a"]
    assert (Path(taken.workspace) / "a.txt").read_text() == "one"
    assert not (Path(taken.workspace) / "b.txt").exists()
    # Once more, as DBOS may: nothing changes.
    before = events(taken)
    execute(taken, SPEC, order=order)
    assert events(taken) == before
