"""What the runner's parts (tool calls, hooks, tool changes, approvals) need of the run they
serve: its state now, and a way to record one event. The runner is the one `Recorder` of a
run; each part is given it through its constructor and keeps no copy of the state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from ruizn.events import Event
from ruizn.state import ExecutionContext

E = TypeVar("E", bound=Event)


class Recorder(Protocol):
    """A run's state, and the one way it changes (`AgentRunner.emit`)."""

    @property
    def state(self) -> ExecutionContext: ...

    def emit(self, cls: type[E], /, **fields: Any) -> Event:
        """Record one event: stamped, checked by the reducer, written, shown; returned as
        written (its secrets redacted)."""
        ...


__all__: Sequence[str] = ("Recorder",)
