"""The event writer: one JSON line per event, written and flushed at once.

The file is opened unbuffered in append mode, so each event is one write(2) of a whole line:
a reader never sees half of a line unless the process died inside that write. Lines that end
a step are also fsynced, so a power cut loses at most the tokens of the step in flight.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

from ruizn.events import DURABLE_EVENTS, Event
from ruizn.serde import encode


class EventWriter:
    def __init__(self, path: Path, *, fsync: bool = True) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fsync = fsync
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def __call__(self, event: Event) -> None:
        if self._fd is None:
            raise ValueError(f"event log {self.path} is closed")
        data = (encode(event) + "\n").encode()
        written = os.write(self._fd, data)
        while written < len(data):  # short writes are rare (full disk, signals) but legal
            written += os.write(self._fd, data[written:])
        if self._fsync and isinstance(event, DURABLE_EVENTS):
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
