"""When a fleet run's events reach the database (fleet/sink.py): grouped, one transaction a
step, but always before the effect each one enables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from ruizn.effects.runlog.store import FLEET_MARK
from ruizn.events import (
    LlmCallStarted,
    LlmResponse,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from ruizn.fleet.database import AppendConflict, EventStore
from ruizn.fleet.dbstore import DbRunStore
from ruizn.settings import RunSettings
from ruizn.state import ToolResult, ToolUseBlock


def _stored(store: EventStore) -> list[str]:
    return [json.loads(line)["type"] for line in store.lines("r1")]


def test_a_step_is_stored_before_the_effects_it_enables(tmp_path: Path) -> None:
    store = EventStore(f"sqlite:///{tmp_path / 'fleet.sqlite'}")
    store.open_budget("b", 10.0, ["r1"])
    sink = DbRunStore(store, tmp_path / "logs").new_writer("r1")
    settings = RunSettings(model="test", max_steps=5, max_tokens=100, system="s")
    call = {"text": "once"}
    sink(RunStarted(seq=1, ts=1.0, run_id="r1", goal="g", settings=settings))
    assert _stored(store) == ["run_started"]

    sink(LlmCallStarted(seq=2, ts=1.0, step=1))
    answer = (ToolUseBlock(id="toolu_1", name="note", input=call),)
    sink(LlmResponse(seq=3, ts=1.0, content=answer, stop_reason="tool_use", cost=0.25))
    # The paid answer is stored, and charged, before anything else can happen: the next
    # call's budget check already sees it.
    assert _stored(store) == ["run_started", "llm_call_started", "llm_response"]
    assert store.budget("b") == (10.0, 0.25)

    sink(ToolCallStarted(seq=4, ts=1.0, id="toolu_1", name="note", input=call))
    sink.sync()  # the runner's call before a tool that is not read-only runs
    # Stored before the tool acts: a recovery answers it `interrupted`, never runs it again.
    assert _stored(store)[-1] == "tool_call_started"

    sink(ToolCallFinished(seq=5, ts=1.0, id="toolu_1", result=ToolResult.ok("noted")))
    # What a tool that changes things did is not left pending either.
    assert _stored(store)[-1] == "tool_call_finished"

    sink(LlmCallStarted(seq=6, ts=1.0, step=2))
    sink.close()
    log = tmp_path / "logs" / "r1" / "events.jsonl"
    assert "".join(line + "\n" for line in store.lines("r1")) == log.read_text()
    assert _stored(store)[-1] == "llm_call_started"


def test_on_sqlite_the_commits_that_must_survive_a_power_cut_are_synced(tmp_path: Path) -> None:
    """Which commits wait for the disk (synchronous=FULL: the WAL is fsynced, and so is every
    relaxed commit before it) and which do not (NORMAL): seen at each COMMIT that writes."""
    store = EventStore(f"sqlite:///{tmp_path / 'fleet.sqlite'}")
    modes: list[int] = []

    @sa.event.listens_for(store.engine, "commit")
    def seen(conn: sa.Connection) -> None:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        if raw.in_transaction:  # a commit that writes something
            modes.append(raw.execute("PRAGMA synchronous").fetchone()[0])

    FULL, NORMAL = 2, 1
    sink = DbRunStore(store, tmp_path / "logs").new_writer("r1")
    settings = RunSettings(model="test", max_steps=5, max_tokens=100, system="s")
    call = {"text": "once"}

    def commits(event: object) -> list[int]:
        modes.clear()
        sink(event)  # type: ignore[arg-type]
        return list(modes)

    assert FULL in commits(RunStarted(seq=1, ts=1.0, run_id="r1", goal="g", settings=settings))
    assert commits(LlmCallStarted(seq=2, ts=1.0, step=1)) == []  # pending
    answer = (ToolUseBlock(id="toolu_1", name="note", input=call),)
    grouped = commits(LlmResponse(seq=3, ts=1.0, content=answer, stop_reason="tool_use"))
    assert NORMAL in grouped
    assert FULL not in grouped
    sink(ToolCallStarted(seq=4, ts=1.0, id="toolu_1", name="note", input=call))
    modes.clear()
    sink.sync()  # before a tool that is not read-only runs: on disk
    assert FULL in modes
    done = commits(ToolCallFinished(seq=5, ts=1.0, id="toolu_1", result=ToolResult.ok("noted")))
    assert NORMAL in done
    assert FULL not in done
    # A write that is not an event's (a worker's heartbeat) is durable too.
    modes.clear()
    store.heartbeat("w1")
    assert FULL in modes
    sink.close()


def test_a_new_sink_for_a_run_with_stored_events_is_refused_at_its_first_write(
    tmp_path: Path,
) -> None:
    """A new run's log starts empty without reading the database: if the run had events
    after all, the first write is refused, and the file never starts behind the database."""
    store = EventStore(f"sqlite:///{tmp_path / 'fleet.sqlite'}")
    settings = RunSettings(model="test", max_steps=5, max_tokens=100, system="s")
    first = DbRunStore(store, tmp_path / "logs").new_writer("r1")
    first(RunStarted(seq=1, ts=1.0, run_id="r1", goal="g", settings=settings))
    first.close()
    again = DbRunStore(store, tmp_path / "logs").new_writer("r1")
    with pytest.raises(AppendConflict):
        again(RunStarted(seq=1, ts=2.0, run_id="r1", goal="another", settings=settings))
    assert _stored(store) == ["run_started"]
    # The folder says which database owns it (a local resume is refused, naming it).
    mark = (tmp_path / "logs" / "r1" / FLEET_MARK).read_text()
    assert mark == f"sqlite:///{tmp_path / 'fleet.sqlite'}\n"
