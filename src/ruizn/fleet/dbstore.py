"""The fleet's database as a `RunStore`: its runs listed, replayed and written like files.

Each run's events are rows of the events table (see store.py); a worker also keeps the run's
events.jsonl under its log root, the database's export, appended in step (`FleetSink`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from ruizn.effects.runlog.folder import RunFolder
from ruizn.effects.runlog.reader import LOG_NAME, LogError, Replayed, TornTail
from ruizn.effects.runlog.sink import EventSink
from ruizn.effects.runlog.store import (
    FLEET_MARK,
    LAST,
    RunInfo,
    RunNotFound,
    RunRef,
    ambiguous,
)
from ruizn.events import Event
from ruizn.fleet.database import EventStore, safe_url
from ruizn.fleet.sink import FleetSink
from ruizn.reducers import InvalidTransition, rebuild
from ruizn.serde import DecodeError, decode


class DbRunStore:
    def __init__(self, events: EventStore, root: Path) -> None:
        self.events = events
        self.root = root

    def describe(self) -> str:
        return safe_url(self.events.url)

    def find(self, run: str) -> RunRef:
        if run == LAST:
            rows = sorted(self.events.runs(), key=lambda r: (r.submitted, r.run_id))
            started = [r for r in rows if self.events.has_run(r.run_id)]
            if not started:
                raise RunNotFound(f"no runs in the database {self.describe()}")
            run = started[-1].run_id
        if not self.events.has_run(run):
            # A run id typed in part: the one run whose id begins so.
            found = sorted(
                row.run_id
                for row in self.events.runs()
                if run and row.run_id.startswith(run) and self.events.has_run(row.run_id)
            )
            if len(found) > 1:
                raise ambiguous(run, found)
            if not found:
                raise RunNotFound(f"no run {run!r} in the database {self.describe()}")
            run = found[0]
        return RunRef(run_id=run, path=self.root / run / LOG_NAME)

    def location(self, ref: RunRef) -> str:
        return f"{self.describe()} (run {ref.run_id})"

    def runs(self) -> Iterator[RunInfo]:
        rows = sorted(self.events.runs(), key=lambda r: (r.submitted, r.run_id), reverse=True)
        for row in rows:
            ref = RunRef(run_id=row.run_id, path=self.root / row.run_id / LOG_NAME)
            yield self._info(ref, row.status, row.worker, goal=row.goal)

    def info(self, ref: RunRef, on_event: Callable[[Event], None] | None = None) -> RunInfo:
        row = next((r for r in self.events.runs() if r.run_id == ref.run_id), None)
        return self._info(ref, row.status if row else None, row.worker if row else None, on_event)

    def _info(
        self,
        ref: RunRef,
        stored: str | None,
        worker: str | None,
        on_event: Callable[[Event], None] | None = None,
        *,
        goal: str | None = None,
    ) -> RunInfo:
        replayed: Replayed | None = None
        error = None
        if self.events.has_run(ref.run_id):
            try:
                replayed = self.load(ref, on_event=on_event)
            except LogError as exc:
                error = str(exc)
        return RunInfo(
            run_id=ref.run_id,
            path=ref.path,
            replayed=replayed,
            error=error,
            live=stored == "running",
            pid=None,
            worker=worker,
            stored=stored,
            goal=goal,
        )

    def load(
        self,
        ref: RunRef,
        *,
        on_event: Callable[[Event], None] | None = None,
        torn: Callable[[TornTail], None] | None = None,
    ) -> Replayed:
        count = 0

        def events() -> Iterator[Event]:
            nonlocal count
            for line in self.events.lines(ref.run_id):
                count += 1
                event = decode(line)
                yield event
                if on_event is not None:
                    on_event(event)

        try:
            state = rebuild(events())
        except (DecodeError, InvalidTransition) as exc:
            raise LogError(f"run {ref.run_id} in the database, event {count}: {exc}") from None
        return Replayed(state=state, events=count, torn=None, size=0)

    def resume_target(self, run_id: str) -> str:
        """What `ruizn resume` is given to continue the run: the fleet's own command."""
        return f"--db {self.describe()} {run_id}"

    def new_writer(self, run_id: str) -> EventSink:
        """A new run's sink: its folder, marked, with an empty log the sink appends to. The
        database is not read: a run that has events already refuses the sink's first write
        (`AppendConflict`), so the file never starts behind the database."""
        path = self.root / run_id / LOG_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        with RunFolder.open(path.parent) as folder:
            folder.replace_file(LOG_NAME, ())
            folder.replace_file(FLEET_MARK, [self._mark_line()])
        return FleetSink(path, store=self.events, run_id=run_id)

    def append_writer(self, ref: RunRef) -> EventSink:
        # The file follows the database: lines it got that the database never committed
        # (tokens of a call in flight when a process died) are dropped.
        self.events.export(ref.run_id, ref.path)
        self._mark(ref.path)
        return FleetSink(ref.path, store=self.events, run_id=ref.run_id)

    def export(self, run_id: str) -> Path:
        """The run's events.jsonl under this store's root, written from the database (the
        worker that ran it may be on another machine), marked as the database's."""
        path = self.root / run_id / LOG_NAME
        self.events.export(run_id, path)
        self._mark(path)
        return path

    def _mark(self, log: Path) -> None:
        """The run's folder says which database owns it: a local `ruizn resume` of this
        copy is refused, naming the fleet's command (agent.fleet_owner)."""
        with RunFolder.open(log.parent) as folder:
            folder.replace_file(FLEET_MARK, [self._mark_line()])

    def _mark_line(self) -> bytes:
        return self.describe().encode("utf-8") + b"\n"

    def cut(self, ref: RunRef, offset: int) -> None:
        """Nothing to cut: the database holds whole lines only."""
