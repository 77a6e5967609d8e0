"""The events table: an idempotent append, and an export equal to the live log."""

from __future__ import annotations

from pathlib import Path

import pytest

from ruizn.fleet.database import AppendConflict, EventStore, StoreUnreachable


@pytest.fixture
def store(tmp_path: Path) -> EventStore:
    return EventStore(f"sqlite:///{tmp_path / 'fleet.sqlite'}")


LINES = [(1, '{"seq":1}'), (2, '{"seq":2}'), (3, '{"seq":3,"text":"é"}')]


def test_append_then_export_gives_the_lines_back_byte_for_byte(
    store: EventStore, tmp_path: Path
) -> None:
    store.append("r1", LINES)
    out = tmp_path / "r1" / "events.jsonl"
    assert store.export("r1", out) == 3
    assert out.read_bytes() == "".join(line + "\n" for _, line in LINES).encode()


def test_a_line_already_stored_with_the_same_bytes_is_skipped(store: EventStore) -> None:
    store.append("r1", LINES[:2])
    assert store.append("r1", LINES) == 1
    assert list(store.lines("r1")) == [line for _, line in LINES]


def test_a_different_line_at_a_stored_seq_is_refused(store: EventStore) -> None:
    store.append("r1", LINES)
    with pytest.raises(AppendConflict, match="seq 2 is stored with a different line"):
        store.append("r1", [(2, '{"seq":2,"other":true}')])


def test_a_gap_is_refused_and_nothing_of_the_batch_is_stored(store: EventStore) -> None:
    store.append("r1", LINES[:1])
    with pytest.raises(AppendConflict, match="gap"):
        store.append("r1", [(2, '{"seq":2}'), (4, '{"seq":4}')])
    assert list(store.lines("r1")) == [LINES[0][1]]


def test_runs_are_kept_apart(store: EventStore) -> None:
    store.append("r1", LINES)
    store.append("r2", LINES[:1])
    assert len(list(store.lines("r2"))) == 1


def test_a_second_writer_on_the_run_is_still_fenced_off(tmp_path: Path) -> None:
    # Each process remembers the last seq it committed for a run: a line another process
    # stored meanwhile is still seen, and a different one refused.
    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    first, second = EventStore(url), EventStore(url)
    first.append("r1", LINES[:1])
    second.append("r1", LINES[1:2])
    with pytest.raises(AppendConflict, match="seq 2 is stored with a different line"):
        first.append("r1", [(2, '{"seq":2,"other":true}')])
    assert first.append("r1", LINES) == 1
    assert list(second.lines("r1")) == [line for _, line in LINES]


def test_a_run_note_without_a_worker_keeps_the_one_noted(store: EventStore) -> None:
    store.note_run("r1", goal="g", status="running", worker="w1")
    store.note_run("r1", goal="g", status="success", worker=None)
    [row] = store.runs()
    assert (row.run_id, row.goal, row.worker, row.status) == ("r1", "g", "w1", "success")


def test_a_dead_worker_is_claimed_by_one_live_worker_only(store: EventStore) -> None:
    store.heartbeat("dead")
    store.mark_dead("dead")
    store.heartbeat("a")
    assert store.claim_dead("a", 1.0) == ["dead"]
    assert store.claim_dead("b", 1.0) == []


def test_an_unreachable_database_is_one_clear_error() -> None:
    with pytest.raises(StoreUnreachable, match="cannot reach the database"):
        EventStore("postgresql://nobody:secret@127.0.0.1:1/none")
