"""Group commit: the writes of many runs of one process, in one transaction.

A fleet process runs dozens of runs at once, each committing a step's events as it ends,
and the store takes one transaction at a time (SQLite has one writer; Postgres is asked in
turn so the round trips stay few). One transaction per write made every run wait in line
for the others' commits, and for their fsyncs: at 64 runs at once the line was most of a
step. Here a write is handed in with its work; whichever thread takes the lock next runs
every write handed in meanwhile in one transaction (durable if any of them asks), and each
caller returns once the transaction holding its write has committed. So each write is
still committed before its caller goes on, and with exactly the statements it had alone.

If the shared transaction fails, each of its writes is tried again alone, so a write that
is refused (`AppendConflict`, say) fails only its own caller.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["GroupCommit"]

T = TypeVar("T")
Transaction = Callable[[bool], contextlib.AbstractContextManager[Any]]


class _Write(Generic[T]):
    def __init__(self, work: Callable[[Any], T], durable: bool) -> None:
        self.work = work
        self.durable = durable
        self.done = False
        self.value: T | None = None
        self.error: BaseException | None = None

    def result(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


class GroupCommit:
    def __init__(self, transaction: Transaction, lock: contextlib.AbstractContextManager[Any]):
        """`transaction(durable)`: a context manager giving a connection in a transaction
        that commits when it exits. `lock`: held around each transaction (the store's one
        writer)."""
        self._transaction = transaction
        self._lock = lock
        self._pending: list[_Write[Any]] = []
        self._pending_lock = threading.Lock()

    def run(self, work: Callable[[Any], T], *, durable: bool) -> T:
        """`work(connection)`'s result, once the transaction it ran in has committed."""
        write = _Write(work, durable)
        with self._pending_lock:
            self._pending.append(write)
        with self._lock:
            if not write.done:  # else a thread before us committed it with its own
                with self._pending_lock:
                    group, self._pending = self._pending, []
                try:
                    self._commit(group)
                except BaseException:
                    # Interrupted (KeyboardInterrupt, say): this thread's write is not
                    # committed, as if it had stopped before; the others wait for the next.
                    with self._pending_lock:
                        self._pending[:0] = [w for w in group if w is not write]
                    raise
        return write.result()

    def _commit(self, group: list[_Write[Any]]) -> None:
        try:
            with self._transaction(any(w.durable for w in group)) as conn:
                values = [w.work(conn) for w in group]
        except Exception as exc:
            if len(group) == 1:
                write = group[0]
                write.error, write.done = exc, True
                return
            for write in group:  # alone, each gets its own result or error
                self._commit([write])
            return
        for write, value in zip(group, values, strict=True):
            write.value, write.done = value, True
