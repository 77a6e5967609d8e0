"""A fleet run's subagents are queued runs of their own (fleet/children.py): real DBOS on
SQLite, in this process as a worker runs it, and the local Messages API serving the parent
and each child from its own script."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from attrs import evolve
from dbos import DBOS, SetWorkflowID

from ruizn.agentdefs import Subagent, with_general
from ruizn.fleet.app import (
    QUEUE,
    TERMINAL,
    FleetContext,
    execute,
    launch,
    run_workflow,
    shutdown,
)
from ruizn.fleet.children import CHILD_QUEUE
from ruizn.fleet.database import BUDGETS, EVENTS, EventStore
from ruizn.fleet.driver import RunInput, input_to_json
from ruizn.fleet.signing import FleetKey
from ruizn.settings import RunSettings
from tests.cli.approval_helpers import write
from tests.cli.conftest import API_KEY
from tests.fakeapi.replies import Reply, Stream, Text, ToolUse, Usage, by_system, tool_results
from tests.fakeapi.replies import turns as turns_of
from tests.fleet.conftest import wait_for
from tests.fleet.tools import make_tools

MODEL = "claude-sonnet-5-5"
LEAD = "You are the lead."
REVIEWER = Subagent(name="reviewer", description="Reviews.", prompt="You review texts.")
# $2 and $10 per MTok: 0.45 a call (tests/fleet/batching.py)
CALL = 0.45
STEP = Usage(input_tokens=150_000, output_tokens=15_000)


WRITER = Subagent(name="writer", description="Writes.", prompt="You write files.")
DELEGATOR = Subagent(name="delegator", description="Delegates.", prompt="You delegate.")
AGENTS = {"Write": "writer", "Delegate": "delegator"}  # by a word of the goal; else reviewer


def lead(body: dict[str, Any], index: int) -> Reply:
    """The parent (and the delegator): one `agent` call (to the agent its goal names), then
    an answer quoting its result."""
    if turns_of(body) == 0:
        goal = json.dumps(body["messages"][0])
        agent = next((a for word, a in AGENTS.items() if word in goal), "reviewer")
        call = ToolUse(
            "toolu_ask",
            "agent",
            {"subagent_type": agent, "description": "do it", "prompt": "Do this."},
        )
        return Stream((Text("Asking."), call), stop_reason="tool_use", usage=STEP)
    said = " | ".join(str(r.get("content")) for r in tool_results(body))
    return Stream((Text(f"It said: {said}"),), usage=STEP)


def reviewer(body: dict[str, Any], index: int) -> Reply:
    return Stream((Text("Looks fine."),), usage=STEP)


def writer(body: dict[str, Any], index: int) -> Reply:
    if turns_of(body) == 0:
        return Stream((write("toolu_w", "out.txt", "yes"),), stop_reason="tool_use")
    return Stream((Text("Written."),))


@pytest.fixture
def api(server_factory: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    routes = {
        LEAD: lead,
        "You delegate.": lead,
        "You review texts.": reviewer,
        "You write files.": writer,
    }
    server = server_factory(by_system(routes))
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    return server


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetContext]:
    """A worker in this process: DBOS launched on a SQLite database, two runs at once (one
    for the module: each test's runs have their own ids)."""
    tmp_path = tmp_path_factory.mktemp("fleet")
    # (launch sets it if unset: the rest of this process's tests see the environment whole)
    telemetry = os.environ.get("DBOS__DISABLE_TELEMETRY")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    store = EventStore(url)
    key = FleetKey(secrets.token_bytes(32))
    launch(
        url,
        store=store,
        log_root=tmp_path / "logs",
        worker="w1",
        concurrency=2,
        tools=make_tools,
        workspace=str(workspace),
        polling=0.05,
        key=key,
    )
    try:
        yield FleetContext(
            store=store,
            log_root=tmp_path / "logs",
            worker="w1",
            tools=make_tools,
            workspace=str(workspace),
            key=key,
        )
    finally:
        shutdown()
        store.close()
        if telemetry is None:
            os.environ.pop("DBOS__DISABLE_TELEMETRY", None)


def parent(run_id: str, goal: str = "Have it reviewed.", **settings: Any) -> RunInput:
    return RunInput(
        run_id=run_id,
        goal=goal,
        settings=RunSettings(
            model=MODEL,
            system=LEAD,
            max_retries=0,
            subagents=with_general([REVIEWER, WRITER, DELEGATOR]),
            **settings,
        ),
    )


def queued(ctx: FleetContext, run: RunInput) -> dict[str, Any]:
    """The run queued as `ruizn submit` queues it, and its workflow's result."""
    assert ctx.key is not None
    with SetWorkflowID(run.run_id):
        DBOS.enqueue_workflow(QUEUE, run_workflow, ctx.key.signed(input_to_json(run)))
    return ended(run.run_id)


def ended(workflow_id: str) -> dict[str, Any]:
    """The workflow's result, once it has one (looked at every 20 ms: a handle's
    get_result looks once a second)."""
    status = wait_for(
        lambda: next(
            (w for w in DBOS.list_workflows(workflow_ids=[workflow_id]) if w.status in TERMINAL),
            None,
        ),
        30,
        f"{workflow_id} to end",
        every=0.02,
    )
    result: dict[str, Any] = status.output
    return result


def log(ctx: FleetContext, run_id: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ctx.store.lines(run_id)]


def child_of(ctx: FleetContext, run_id: str) -> str:
    (started,) = [e for e in log(ctx, run_id) if e["type"] == "subagent_started"]
    return str(started["run_id"])


def asked(server: Any, system: str) -> int:
    return sum(system in json.dumps(r.body.get("system")) for r in server.requests)


def test_a_fleet_runs_child_is_a_queued_run_of_its_own_on_the_childrens_queue(
    fleet: FleetContext, api: Any
) -> None:
    result = queued(fleet, parent("lead-1", max_cost=5.0))
    assert result["status"] == "success", result
    child = child_of(fleet, "lead-1")
    # Its own workflow, under its run id, on the children's queue, taken by the worker.
    (workflow,) = DBOS.list_workflows(workflow_ids=[child])
    assert (workflow.queue_name, workflow.status) == (CHILD_QUEUE, "SUCCESS")
    assert workflow.output["status"] == "success"
    # Its input names its parent and is signed with the operator's key, as every run's.
    (given,) = workflow.input["args"]
    assert fleet.key is not None
    assert fleet.key.verify(given)
    assert (given["parent"]["run_id"], given["parent"]["agent"]) == ("lead-1", "reviewer")
    # Its own log, naming its parent and agent, in the database and in its own folder.
    first = log(fleet, child)[0]
    assert first["type"] == "run_started"
    assert first["parent"] == {
        "run_id": "lead-1",
        "seq": first["parent"]["seq"],
        "kind": "agent",
        "agent": "reviewer",
        "call": "toolu_ask",
    }
    assert first["settings"]["system"] == "You review texts."
    assert (fleet.log_root / child / "events.jsonl").is_file()
    # The parent got its answer, and its log the child's end with the child's cost.
    assert "It said: Looks fine." in json.dumps(log(fleet, "lead-1"))
    (finished,) = [e for e in log(fleet, "lead-1") if e["type"] == "subagent_finished"]
    assert (finished["status"], finished["cost"]) == ("success", pytest.approx(CALL))
    # One budget for the tree in the database: both of the parent's calls and the child's.
    with fleet.store.engine.connect() as conn:
        tree = conn.execute(
            sa.select(BUDGETS.c.max_cost, BUDGETS.c.spent).where(
                BUDGETS.c.budget_id == "tree-lead-1"
            )
        ).one()
    assert tuple(tree) == (5.0, pytest.approx(3 * CALL))
    assert asked(api, "You review texts.") == 1


def test_a_child_on_another_worker_stops_at_what_the_tree_spent_and_its_parent_is_told(
    fleet: FleetContext, api: Any
) -> None:
    # The tree's budget as the database holds it when siblings elsewhere spent it all.
    fleet.store.open_budget("tree-lead-2", 5.0, [])
    with fleet.store.engine.begin() as conn:
        conn.execute(sa.update(BUDGETS).values(spent=5.0))
    result = queued(fleet, parent("lead-2", max_cost=5.0))
    assert result["status"] == "success", result
    child = child_of(fleet, "lead-2")
    assert log(fleet, child)[-1]["status"] == "max_cost"
    assert asked(api, "You review texts.") == 0  # stopped before its first call
    (finished,) = [e for e in log(fleet, "lead-2") if e["type"] == "subagent_finished"]
    assert finished["status"] == "max_cost"
    told = json.dumps(log(fleet, "lead-2"))
    assert f"agent reviewer (run {child}) stopped with max_cost" in told


def test_a_parent_driven_again_after_a_crash_waits_on_the_same_child(
    fleet: FleetContext, api: Any
) -> None:
    run = parent("lead-3")
    assert queued(fleet, run)["status"] == "success"
    child = child_of(fleet, "lead-3")
    # What a kill -9 of the parent's worker leaves: its log cut after the child was
    # queued (subagent_started), the child's workflow queued under the child's id.
    started = next(e["seq"] for e in log(fleet, "lead-3") if e["type"] == "subagent_started")
    with fleet.store.engine.begin() as conn:
        conn.execute(sa.delete(EVENTS).where(EVENTS.c.run_id == "lead-3", EVENTS.c.seq > started))
    taker = FleetContext(
        store=EventStore(fleet.store.url),
        log_root=fleet.log_root,
        worker="w2",
        tools=make_tools,
        workspace=fleet.workspace,
        key=fleet.key,
    )
    try:
        # As DBOS recovers the parent's workflow on another worker.
        assert execute(taker, run)["status"] == "success"
    finally:
        taker.store.close()
    assert asked(api, "You review texts.") == 1
    assert [w.workflow_id for w in DBOS.list_workflows(workflow_id_prefix=child)] == [child]
    assert [e["type"] for e in log(fleet, child)].count("run_started") == 1
    assert "It said: Looks fine." in json.dumps(log(fleet, "lead-3"))


def test_a_childs_call_that_needs_a_decision_stops_the_tree_until_resume_db_answers_it(
    fleet: FleetContext, api: Any
) -> None:
    from dbos import DBOSClient

    from ruizn.fleet.queueguard import serializer
    from ruizn.fleet.worker import _queue_resume
    from ruizn.shell.outcome import Resume

    run = parent("lead-4", goal="Write it.", approval="ask")
    assert queued(fleet, run)["status"] == "awaiting_approval"
    child = child_of(fleet, "lead-4")
    assert log(fleet, child)[-1]["status"] == "awaiting_approval"
    out = Path(fleet.workspace) / "out.txt"
    assert not out.exists()
    # `ruizn resume --db PARENT --approve ID`, the id one of the child's calls.
    client = DBOSClient(system_database_url=fleet.store.url, serializer=serializer())
    try:
        checked, workflow_id = _queue_resume(
            fleet.store,
            client,
            "lead-4",
            Resume(approve=("all",)),
            where="the test's database",
            key=fleet.key,
        )
    finally:
        client.destroy()
    assert checked.approve == ("toolu_w",)
    assert ended(workflow_id)["status"] == "success"
    assert out.read_text() == "yes"
    mine = log(fleet, child)
    assert [e["type"] for e in mine].count("tool_call_started") == 1
    assert [(e["id"], e["by"]) for e in mine if e["type"] == "tool_approval_decided"] == [
        ("toolu_w", "user")
    ]
    # The child's resume was its own order on the children's queue, applied once.
    assert {w.workflow_id: w.queue_name for w in DBOS.list_workflows(workflow_id_prefix=child)} == {
        child: CHILD_QUEUE,
        f"{child}/resume-1": CHILD_QUEUE,
    }
    assert "It said: Written." in json.dumps(log(fleet, "lead-4"))


def test_a_queued_child_no_key_signed_runs_nothing(fleet: FleetContext) -> None:
    from ruizn.events import Parent

    forged = evolve(
        parent("forged-1"),
        parent=Parent(run_id="lead-1", seq=3, kind="agent", agent="reviewer", call="toolu_ask"),
    )
    with SetWorkflowID("forged-1"):
        DBOS.enqueue_workflow(CHILD_QUEUE, run_workflow, input_to_json(forged))
    assert ended("forged-1")["error"] == "not queued with this operator's fleet key: not run"
    assert not fleet.store.has_run("forged-1")


def test_a_grandchild_is_queued_too_names_the_top_run_and_draws_on_the_trees_budget(
    fleet: FleetContext, api: Any
) -> None:
    from ruizn.fleet.database import TREE_RUNS

    result = queued(fleet, parent("lead-5", goal="Delegate it.", max_cost=5.0, max_depth=2))
    assert result["status"] == "success", result
    child = child_of(fleet, "lead-5")
    grandchild = child_of(fleet, child)
    first = log(fleet, grandchild)[0]
    assert (first["parent"]["run_id"], first["parent"]["root"]) == (child, "lead-5")
    (workflow,) = DBOS.list_workflows(workflow_ids=[grandchild], load_input=False)
    assert (workflow.queue_name, workflow.status) == (CHILD_QUEUE, "SUCCESS")
    assert "It said: It said: Looks fine." in json.dumps(log(fleet, "lead-5"))
    with fleet.store.engine.connect() as conn:
        runs = conn.execute(
            sa.select(TREE_RUNS.c.run_id).where(TREE_RUNS.c.tree_id == "tree-lead-5")
        ).scalars()
        assert set(runs) == {"lead-5", child, grandchild}
        spent = conn.execute(
            sa.select(BUDGETS.c.spent).where(BUDGETS.c.budget_id == "tree-lead-5")
        ).scalar()
    # two calls each of the parent and the child, one of the grandchild
    assert spent == pytest.approx(5 * CALL)
