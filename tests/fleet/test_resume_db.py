"""`ruizn resume --db URL RUN` on a real Postgres: a stopped run goes back to the fleet and a
worker (a real process, against the fake API) continues it in the same log."""

from __future__ import annotations

import json
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOSClient

from ruizn.effects.runlog.reader import replay_file
from ruizn.fleet.database import EventStore
from ruizn.fleet.dbstore import DbRunStore
from ruizn.state import Status
from tests.cli.conftest import cli_env
from tests.fakeapi import HttpError, Reply
from tests.fleet.conftest import (
    env,
    first_text,
    note_loop,
    requests_per_goal,
    ruizn,
    start_worker,
    statuses,
    wait_for,
)
from tests.fleet.tools import NOTES

pytestmark = pytest.mark.slow

GOALS = [
    # Asks for the note tool at each of its first two steps: stops at max_steps after one.
    {"goal": "loop", "id": "loop", "max_steps": 1},
    # Its first call fails and the run is submitted with no retries: it stops with error.
    {"goal": "flaky", "id": "flaky", "max_steps": 5},
    # Held at its first call until the test lets it go: a run a live worker holds.
    {"goal": "held", "id": "held"},
]


def script(gate: threading.Event) -> Any:
    notes = note_loop(tool_turns=2)
    failed: list[int] = []

    def reply(body: dict[str, Any], index: int) -> Reply:
        goal = first_text(body)
        if goal == "held":
            gate.wait(60)
        if goal == "flaky" and not failed:
            failed.append(index)
            return HttpError(500, "api_error", "the fake API fails once")
        return notes(body, index)

    return reply


def workflows(client: DBOSClient, run_id: str) -> dict[str, str]:
    """The run's DBOS workflows (its own and its resumes) -> their status."""
    found = client.list_workflows(workflow_ids=[run_id], load_input=False, load_output=False)
    found += client.list_workflows(
        workflow_id_prefix=f"{run_id}/", load_input=False, load_output=False
    )
    return {w.workflow_id: w.status for w in found}


def settled(client: DBOSClient, db: str, run_id: str, status: str) -> bool:
    """The run ended with `status` and DBOS has recorded the end of its workflows."""
    return statuses(db).get(run_id, ("",))[0] == status and all(
        s == "SUCCESS" for s in workflows(client, run_id).values()
    )


def event_types(db: str, run_id: str) -> list[str]:
    store = EventStore(db)
    try:
        return [json.loads(line)["type"] for line in store.lines(run_id)]
    finally:
        store.close()


def test_resume_db_continues_a_stopped_run_on_the_fleet(
    fresh_db: str, workspace: Path, server_factory: Any
) -> None:
    gate = threading.Event()
    server = server_factory(script(gate))
    environ = env(server.base_url, fresh_db)
    goals = workspace / "goals.jsonl"
    goals.write_text("".join(json.dumps(goal) + "\n" for goal in GOALS))
    submitted = ruizn(
        ["submit", str(goals), "--model", "claude-sonnet-5-5", "--max-retries", "0"],
        workspace,
        environ,
    )
    assert submitted.returncode == 0, submitted.stderr
    # No worker yet: the run is on the queue, and a resume would run it twice.
    queued = ruizn(["resume", "--db", fresh_db, "loop"], workspace, environ)
    assert (queued.returncode, queued.stdout) == (2, "")
    assert queued.stderr == (
        "ruizn: error: run loop is queued on the fleet (loop); wait for a worker to run it\n"
    )
    client = DBOSClient(system_database_url=fresh_db)
    worker = start_worker("w1", workspace, environ, concurrency=3)
    try:
        wait_for(lambda: settled(client, fresh_db, "loop", "max_steps"), 60, "loop to stop")
        wait_for(lambda: settled(client, fresh_db, "flaky", "error"), 60, "flaky to fail")
        wait_for(
            lambda: (
                workflows(client, "held") == {"held": "PENDING"}
                and statuses(fresh_db)["held"] == ("running", "w1")
            ),
            60,
            "w1 to hold the held run",
        )
        held = ruizn(["resume", "--db", fresh_db, "held"], workspace, environ)
        assert (held.returncode, held.stdout) == (2, "")
        assert held.stderr == (
            "ruizn: error: run held is being run by worker w1 on the fleet; wait for it to end\n"
        )
        too_few = ruizn(
            ["resume", "--db", fresh_db, "loop", "--max-steps", "1"], workspace, environ
        )
        assert (too_few.returncode, too_few.stdout) == (2, "")
        assert too_few.stderr == (
            "ruizn: error: --max-steps 1 leaves no step: the run has taken 1 already\n"
        )
        stopped = event_types(fresh_db, "loop")
        assert stopped[-1] == "run_finished"

        resumed = ruizn(
            ["resume", "--db", fresh_db, "loop", "--max-steps", "3"], workspace, environ
        )
        assert (resumed.returncode, resumed.stderr) == (0, "")
        assert resumed.stdout == "loop queued to resume on the fleet (max_steps 3)\n"
        # RUIZN_DB stands for --db; an errored run goes on within its own limit.
        retried = ruizn(["resume", "flaky"], workspace, environ)
        assert (retried.returncode, retried.stderr) == (0, "")
        assert retried.stdout == "flaky queued to resume on the fleet (max_steps 5)\n"
        gate.set()
        for run_id in ("loop", "flaky", "held"):
            wait_for(lambda r=run_id: settled(client, fresh_db, r, "success"), 60, f"{run_id}")
    finally:
        gate.set()
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=20)
    assert "Traceback" not in err, err
    assert "[worker w1] loop success · 3 steps" in out

    # As a local resume says it (#28): nothing to resume, exit 0.
    again = ruizn(["resume", "--db", fresh_db, "loop"], workspace, environ)
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout == "run loop already finished with success; nothing to resume\n"
    # One resume workflow per run: the refusals queued nothing.
    assert workflows(client, "loop") == {"loop": "SUCCESS", "loop/resume-1": "SUCCESS"}
    client.destroy()

    types = event_types(fresh_db, "loop")
    assert types[: len(stopped)] == stopped  # the same log, appended to
    assert types[len(stopped)] == "run_resumed"
    assert types.count("run_resumed") == 1
    store = EventStore(fresh_db)
    resumed_event = json.loads(list(store.lines("loop"))[len(stopped)])
    assert (resumed_event["max_steps"], resumed_event["max_tokens"]) == (3, None)
    # The table replays to the state the worker's own log replays to, and exports to it
    # byte for byte.
    live = workspace / "logs" / "w1" / "loop" / "events.jsonl"
    runs = DbRunStore(store, workspace)
    final = runs.load(runs.find("loop")).state
    assert (final.status, final.step) == (Status.SUCCESS, 3)
    assert final == replay_file(live).state
    exported = workspace / "export" / "loop" / "events.jsonl"
    store.export("loop", exported)
    assert exported.read_bytes() == live.read_bytes()
    store.close()
    from_db = ruizn(["replay", "--db", fresh_db, "loop"], workspace, environ)
    from_file = ruizn(["replay", str(live)], workspace, cli_env(None))
    assert (from_db.returncode, from_file.returncode) == (0, 0), from_db.stderr + from_file.stderr
    assert from_db.stdout == from_file.stdout
    assert "All noted." in from_db.stdout

    # Each model call was asked once, but flaky's first, which failed and was asked again.
    seen = requests_per_goal(server.requests)
    assert {key: n for key, n in seen.items() if key[0] == "loop"} == {
        ("loop", 0): 1,
        ("loop", 1): 1,
        ("loop", 2): 1,
    }
    assert {key: n for key, n in seen.items() if key[0] == "flaky"} == {
        ("flaky", 0): 2,
        ("flaky", 1): 1,
        ("flaky", 2): 1,
    }
    notes = Counter((workspace / NOTES).read_text().splitlines())
    assert notes == Counter(["loop #0", "loop #1", "flaky #0", "flaky #1", "held #0", "held #1"])


def test_resume_db_refuses_what_only_a_local_resume_can_do(workspace: Path) -> None:
    # Refused before the database is asked anything: the URL leads nowhere.
    db = "postgresql://ruizn@127.0.0.1:1/fleet"
    given = ruizn(
        ["resume", "--db", db, "r1", "--approve", "all", "--workspace", ".", "--trust"],
        workspace,
        cli_env(None),
    )
    assert (given.returncode, given.stdout) == (2, "")
    assert given.stderr == (
        "ruizn: error: --workspace: not with --db: a fleet's run is continued by a"
        " worker, with the worker's workspace, logs, tools and MCP header values, in the run's"
        " own approval mode\n"
    )
    from_env = ruizn(
        ["resume", "r1", "--mcp-header", "s:K=V"], workspace, cli_env(None, RUIZN_DB=db)
    )
    assert from_env.returncode == 2
    assert from_env.stderr.startswith("ruizn: error: --mcp-header: not with --db (from RUIZN_DB):")
