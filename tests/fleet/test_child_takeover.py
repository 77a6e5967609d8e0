"""A fleet run's child is a queued run another worker takes over: two real `ruizn worker`
processes on one SQLite database, the worker running a child killed with -9 while the
child's tool is in flight (and, beside it, a run's model call), and the other worker going
on with each in its own log."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ruizn.effects.runlog.reader import replay_file
from ruizn.fleet.database import EventStore
from ruizn.state import Status
from tests.cli.conftest import read_events
from tests.fakeapi.replies import Reply, Stream, Text, ToolUse, by_system, tool_results
from tests.fakeapi.replies import turns as turns_of
from tests.fleet.conftest import (
    env,
    first_text,
    log_of,
    of_type,
    requests_per_goal,
    ruizn,
    start_worker,
    statuses,
    stop_workers,
    wait_for,
)
from tests.fleet.tools import GATE, NOTES

pytestmark = pytest.mark.slow

LEAD = "You are the lead."
HELPER = "---\nname: helper\ndescription: Helps.\n---\nYou help.\n"  # the parent's tools
GOAL = "Have it done twice."
PROMPTS = ("first", "second")
# A run of its own beside the parent: one note, then a model call the server holds.
SOLO = "Note it."
# What the tools note: each once, the tool cut by the kill too.
NOTED = sorted(
    ["solo note", *(f"{prompt} {tool}" for prompt in PROMPTS for tool in ("note", "linger"))]
)


def lead(gate: Path) -> Any:
    """The parent's script: two `agent` calls in one turn, then an answer quoting both
    results. SOLO's: a `note`, then an answer the server sends only once `gate` exists."""

    def reply(body: dict[str, Any], index: int) -> Reply:
        if first_text(body) == SOLO:
            return solo(body, gate)
        return parent(body)

    return reply


def solo(body: dict[str, Any], gate: Path) -> Reply:
    if turns_of(body) == 0:
        call = ToolUse("toolu_note", "note", {"text": "solo note"})
        return Stream((call,), stop_reason="tool_use")
    deadline = time.monotonic() + 60
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return Stream((Text("Noted."),))


def parent(body: dict[str, Any]) -> Reply:
    if turns_of(body) == 0:
        calls = tuple(
            ToolUse(
                f"toolu_{prompt}",
                "agent",
                {"subagent_type": "helper", "description": prompt, "prompt": prompt},
            )
            for prompt in PROMPTS
        )
        return Stream((Text("Asking two."), *calls), stop_reason="tool_use")
    said = " | ".join(str(r.get("content")) for r in tool_results(body))
    return Stream((Text(f"They said: {said}"),))


def helper(body: dict[str, Any], index: int) -> Reply:
    """`note`, then `linger` (its note, then a wait for the gate file), then an answer."""
    prompt = first_text(body)
    turn = turns_of(body)
    if turn < 2:
        tool = ("note", "linger")[turn]
        call = ToolUse(f"toolu_{tool}", tool, {"text": f"{prompt} {tool}"})
        return Stream((call,), stop_reason="tool_use")
    return Stream((Text(f"Done: {prompt}"),))


def test_a_child_and_a_run_of_a_worker_killed_mid_call_go_on_on_the_other_worker(
    tmp_path: Path, workspace: Path, server_factory: Any
) -> None:
    server = server_factory(by_system({LEAD: lead(workspace / GATE), "You help.": helper}))
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "helper.md").write_text(HELPER, encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    environ = env(server.base_url, url)
    # One run and one child at once each: the parent and SOLO, and the parent's two
    # children, can only run on different workers.
    workers = {
        name: start_worker(
            name, workspace, environ, concurrency=1, tools="tests.fleet.tools:make_linger_tools"
        )
        for name in ("w1", "w2")
    }
    try:
        goals = tmp_path / "goals.jsonl"
        goals.write_text("".join(json.dumps({"goal": g}) + "\n" for g in (GOAL, SOLO)))
        options = ["--agents", str(agents), "--system", LEAD, "--max-retries", "0"]
        submitted = ruizn(
            ["submit", str(goals), "--model", "claude-sonnet-5-5", *options],
            workspace,
            environ,
        )
        assert submitted.returncode == 0, submitted.stderr
        top, alone = submitted.stdout.split()
        # Each child's `linger` has noted and waits (its tool_call_started is committed),
        # and SOLO's second model call waits on the server.
        wait_for(
            lambda: noted(workspace) == NOTED and asked_of(server)[(SOLO, 1)] == 1,
            60,
            "both children's tools and SOLO's model call to be in flight",
            every=0.05,
        )
        rows = statuses(url)
        keeper = rows[top][1]
        children = [e["run_id"] for e in of_type(log_of(url, top), "subagent_started")]
        assert len(children) == 2
        assert keeper in workers
        ((victim, lost),) = [(rows[c][1], c) for c in children if rows[c][1] != keeper]
        assert victim in workers
        assert rows[lost][0] == "running"
        assert rows[alone] == ("running", victim)
        os.kill(workers[victim].pid, signal.SIGKILL)
        workers[victim].wait(10)
        (workspace / GATE).touch()  # the keeper's own child goes on; the lost one is cut
        wait_for(
            lambda: all(statuses(url)[r][0] != "running" for r in (top, alone)),
            60,
            "the parent and SOLO to end",
            every=0.05,
        )
    finally:
        stop_workers(workers.values())
    workers[victim].communicate()
    out, err = workers[keeper].communicate()
    assert "Traceback" not in err, err
    assert f"worker {victim} is silent for 3s: 2 runs back on the queue" in out, out
    final = statuses(url)
    # Every run ended on the keeper, those the victim had too.
    assert [final[r] for r in (top, *children, alone)] == [("success", keeper)] * 4

    # The parent got both answers, the lost child's from its own log on the keeper.
    parent_log = read_events(workspace / "logs" / keeper / top / "events.jsonl")
    assert "They said: Done: first | Done: second" in json.dumps(parent_log)
    assert [e["status"] for e in of_type(parent_log, "subagent_finished")] == ["success"] * 2

    # The lost child went on where it was cut: its tool in flight answered interrupted,
    # never run again; its model calls each asked once.
    assert noted(workspace) == NOTED, "a tool ran twice"
    log = workspace / "logs" / keeper / lost / "events.jsonl"
    events = read_events(log)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["parent"]["run_id"] == top
    assert [e["type"] for e in events].count("run_resumed") == 1
    note, linger = of_type(events, "tool_call_finished")
    assert (note["result"]["is_error"], note["result"]["content"]) == (False, "noted")
    assert linger["result"]["error_type"] == "interrupted"
    assert replay_file(log).state.status is Status.SUCCESS
    # The database's copy is the keeper's live log, byte for byte; the dead worker's ends
    # with the start of the call it was running, and the keeper's goes on from there.
    assert "".join(line + "\n" for line in stored_lines(url, lost)) == log.read_text()
    cut = (workspace / "logs" / victim / lost / "events.jsonl").read_text()
    last = json.loads(cut.splitlines()[-1])
    assert (last["type"], last["name"]) == ("tool_call_started", "linger")
    assert log.read_text().startswith(cut)
    # SOLO went on from its log too: the model call in flight at the kill asked again,
    # and no other.
    solo_log = workspace / "logs" / keeper / alone / "events.jsonl"
    assert replay_file(solo_log).state.status is Status.SUCCESS
    cut = (workspace / "logs" / victim / alone / "events.jsonl").read_text().splitlines(True)
    assert json.loads(cut[-1])["type"] == "llm_call_started"
    # (that line may have been only in the dead worker's file: the database, which the
    # keeper goes on from, gets it with the call's answer; fleet/sink.py)
    assert solo_log.read_text().startswith("".join(cut[:-1]))
    once = {(GOAL, 0), (GOAL, 1), (SOLO, 0)} | {(p, t) for p in PROMPTS for t in (0, 1, 2)}
    assert asked_of(server) == Counter({**dict.fromkeys(once, 1), (SOLO, 1): 2})


def asked_of(server: Any) -> Counter[tuple[str, int]]:
    """(goal or prompt, turns in the request) -> how many times the model was asked it."""
    return requests_per_goal([r for r in server.requests if "messages" in r.body])


def noted(workspace: Path) -> list[str]:
    notes = workspace / NOTES
    return sorted(notes.read_text().splitlines()) if notes.exists() else []


def stored_lines(db: str, run_id: str) -> list[str]:
    store = EventStore(db)
    try:
        return list(store.lines(run_id))
    finally:
        store.close()
