"""Where a run's events go: the sink Protocol, its errors, and the in-memory sink for tests.

The runner hands every event to exactly one sink before anyone else sees it (see
`ruizn.shell.runner`). `EventWriter` (effects/runlog/writer.py) is the file sink;
`MemorySink` keeps the events in a list, for in-process tests and library users who want no files.
"""

from __future__ import annotations

from typing import Protocol

from ruizn.events import Event


class EventSink(Protocol):
    def __call__(self, event: Event) -> None:
        """Keep `event` before returning: written, and for a file sink flushed to the OS
        (which lines are also fsynced, and when, is the sink's policy)."""
        ...

    def sync(self) -> None:
        """Return once every event kept so far would survive a power cut."""
        ...

    def close(self) -> None: ...


class SinkError(Exception):
    """The sink could not keep the run's events. `written`: the event was kept anyway."""

    written: bool = False


class LogWriteError(SinkError):
    """A write to the log failed (disk full, I/O error); the message names path and errno."""


class LogLost(SinkError):
    """The log file was deleted or replaced while the run wrote it.

    The event was written to the file the run holds open; everything is saved to
    `recovery` when the sink closes.
    """

    written = True

    def __init__(self, message: str, *, recovery: str) -> None:
        super().__init__(message)
        self.recovery = recovery


class MemorySink:
    """Events kept in a list, in order. `fail_at` makes the n-th call and every later one
    raise, as a process that died there would write nothing more (crash tests)."""

    def __init__(self, *, fail_at: int | None = None) -> None:
        self.events: list[Event] = []
        self.closed = False
        self._fail_at = fail_at

    def __call__(self, event: Event) -> None:
        if self.closed:
            raise LogWriteError("the memory sink is closed")
        if self._fail_at is not None and len(self.events) + 1 >= self._fail_at:
            raise LogWriteError(f"injected failure at event {self._fail_at}")
        self.events.append(event)

    def sync(self) -> None:
        """Nothing to do: memory is as durable as this sink gets."""

    def close(self) -> None:
        self.closed = True
