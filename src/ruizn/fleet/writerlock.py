"""The one writer of a SQLite fleet database: this process's writers take turns on a lock,
and the processes on the same file (a batch and its helpers, workers) take turns on a file
lock beside it (`DATABASE-writer.lock`, `flock`), before SQLite's own lock.

Waiting in SQLite's busy handler sleeps 1, 2, 5, 10... ms between tries, however soon the
lock frees: sixteen runs writing at once spent most of a batch asleep, and two processes
each committing dozens of runs' steps a second wait so on each other. A writer waiting on
these locks is woken as soon as the last one is done. Where the file lock cannot be taken
(a read-only folder), SQLite's busy handler still keeps the writes one at a time.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from pathlib import Path
from types import TracebackType

__all__ = ["OneWriter"]


class OneWriter:
    """Re-entrant within a thread (a group commit's transaction runs inside its turn)."""

    def __init__(self, database: str | None) -> None:
        """`database`: the SQLite file's path (None, "" or ":memory:": no file lock)."""
        self._turn = threading.RLock()
        self._depth = 0
        self._path = (
            Path(f"{database}-writer.lock") if database and database != ":memory:" else None
        )
        self._fd: int | None = None
        self._locked = False

    def __enter__(self) -> None:
        self._turn.acquire()
        if self._depth == 0 and self._path is not None:
            with contextlib.suppress(OSError):
                if self._fd is None:
                    self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                fcntl.flock(self._fd, fcntl.LOCK_EX)
                self._locked = True
        self._depth += 1

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._depth -= 1
        if self._depth == 0 and self._locked:
            self._locked = False
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._turn.release()

    def close(self) -> None:
        with self._turn:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
