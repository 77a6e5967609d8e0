"""The fleet's event sink: each event to the run's events.jsonl and to the events table.

It is an `EventWriter` (today's runner takes one, subscribed first on its bus). Token lines
go to the file at once and to the database in batches (at most `TOKEN_BATCH` of them, or
with the next other event); every other event is committed to the database, then written
to the file, before the runner goes on. So `tool_call_started` is in the
database before the tool runs, which is what lets a recovery answer it `interrupted`
instead of running a non-read-only tool twice.
"""

from __future__ import annotations

from pathlib import Path

from ruizn.effects.runlog.writer import EventWriter
from ruizn.events import Event, LlmResponse, LlmToken
from ruizn.fleet.database import EventStore
from ruizn.serde import encode

TOKEN_BATCH = 64


class FleetSink(EventWriter):
    def __init__(self, path: Path, *, store: EventStore, run_id: str) -> None:
        # The file is the database's export (store.export writes it, empty for a new run):
        # append to it, under the run's lock like any writer.
        super().__init__(path)
        self._store = store
        self._run_id = run_id
        self._pending: list[tuple[int, str]] = []

    def __call__(self, event: Event) -> None:
        self._pending.append((event.seq, encode(event)))
        if type(event) is LlmToken:
            super().__call__(event)
            if len(self._pending) >= TOKEN_BATCH:
                self.flush()
            return
        # The database first: if it refuses the line (another executor owns the run), the
        # file does not get it either, and the run stops here. A priced call is charged to
        # the run's budget (if it has one) with its line.
        charge = event.cost if type(event) is LlmResponse and event.cost else 0.0
        self.flush(charge=charge)
        super().__call__(event)

    def flush(self, *, charge: float = 0.0) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            self._store.append(self._run_id, pending, charge=charge)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            super().close()
