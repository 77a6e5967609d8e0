"""Group commit: the writes of many runs share a transaction, and each still gets its own
result, its own refusal, and returns only once its write is committed."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ruizn.fleet.database import AppendConflict, EventStore
from ruizn.fleet.groupcommit import GroupCommit


class Book:
    """A transaction that keeps its writes only if it ends without an error."""

    def __init__(self) -> None:
        self.committed: list[str] = []
        self.tries: list[tuple[bool, list[str]]] = []  # (durable, its writes), in order

    @contextlib.contextmanager
    def transaction(self, durable: bool) -> Iterator[list[str]]:
        writes: list[str] = []
        self.tries.append((durable, writes))
        yield writes
        self.committed.extend(writes)


def write(name: str, *, fail: bool = False) -> Any:
    def work(writes: list[str]) -> str:
        writes.append(name)
        if fail:
            raise ValueError(f"{name} refused")
        return f"{name} ok"

    return work


def test_writes_handed_in_together_commit_in_one_transaction_each_with_its_result() -> None:
    book, lock = Book(), threading.Lock()
    group = GroupCommit(book.transaction, lock)
    results: dict[str, object] = {}

    def caller(name: str, durable: bool, fail: bool = False) -> None:
        try:
            results[name] = group.run(write(name, fail=fail), durable=durable)
        except ValueError as exc:
            results[name] = exc

    with lock:  # a commit in progress: the callers queue up meanwhile
        threads = [
            threading.Thread(target=caller, args=("a", False)),
            threading.Thread(target=caller, args=("b", True)),
            threading.Thread(target=caller, args=("c", False, True)),
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 5
        while len(group._pending) < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert not results  # nobody returns before their write is committed
    for t in threads:
        t.join(5)
    assert results["a"] == "a ok"
    assert results["b"] == "b ok"
    assert isinstance(results["c"], ValueError)  # the refused write fails its caller only
    assert sorted(book.committed) == ["a", "b"]
    # Tried together first (durable, as b asked), then each alone once that failed.
    durable, together = book.tries[0]
    assert durable
    assert sorted(together) == ["a", "b", "c"]
    assert sorted((d, tuple(ws)) for d, ws in book.tries[1:]) == [
        (False, ("a",)),
        (False, ("c",)),
        (True, ("b",)),
    ]


def test_concurrent_appends_of_many_runs_are_all_stored_and_a_conflict_fails_alone(
    tmp_path: Path,
) -> None:
    store = EventStore(f"sqlite:///{tmp_path / 'fleet.sqlite'}")
    store.append("bad", [(1, '{"seq":1,"other":true}')])
    got: dict[str, object] = {}

    def run(run_id: str) -> None:
        try:
            for seq in range(1, 6):
                got[run_id] = store.append(run_id, [(seq, f'{{"seq":{seq}}}')], durable=seq == 5)
        except AppendConflict as exc:
            got[run_id] = exc

    threads = [threading.Thread(target=run, args=(f"r{i}",)) for i in range(16)]
    threads.append(threading.Thread(target=run, args=("bad",)))  # its seq 1 differs
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for i in range(16):
        assert got[f"r{i}"] == 1
        assert list(store.lines(f"r{i}")) == [f'{{"seq":{s}}}' for s in range(1, 6)]
    assert isinstance(got["bad"], AppendConflict)
    assert list(store.lines("bad")) == ['{"seq":1,"other":true}']
    store.close()
