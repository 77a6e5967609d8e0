"""The fleet's event sink: each event to the run's events.jsonl and to the events table.

It is an `EventWriter` (today's runner takes one, subscribed first on its bus). Every line
goes to the file at once (a live viewer follows it); the database, the run's truth, gets
them in one transaction a step, not one per event. The rule is the log's (README,
*Durability*): an event is in the database before the effect it enables.

- Committed at once, with everything pending before it: `llm_response` (a paid answer, and
  its cost is charged to the batch's budget in the same transaction, before the next
  call's budget check), a person's decision and its request, `run_started`,
  `run_resumed`, `budget_spent` and `run_finished`. In the bench's tool loop that is one
  commit a step.
- Committed durably (on disk, not only in the database's log in memory) when the runner
  calls `sync()`, which it does before any tool that is not read-only runs: that call's
  `tool_call_started` survives a power cut, so a recovery answers it `interrupted` instead
  of running it twice. Its `tool_call_finished` is committed at once too.
- Pending until the next of those: `llm_call_started`, tokens (at most `TOKEN_BATCH`),
  a failed call, `tool_call_started` of a read-only tool, its `tool_call_finished`, a
  cleared context, a change of tools. A process killed before they commit loses only what
  resume redoes anyway: the model is asked again, a read-only tool runs again.

On SQLite the grouped commits are `synchronous=NORMAL` (in WAL mode they survive the
process dying; a power cut can drop the last of them, never a durable one or anything
before it), the durable ones `FULL`. The file holds lines the database may not have yet;
whoever goes on with the run exports the database over it first (`DbRunStore`).
"""

from __future__ import annotations

from pathlib import Path

from ruizn.effects.runlog.writer import EventWriter
from ruizn.events import (
    BudgetSpent,
    Event,
    LlmResponse,
    LlmToken,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallFinished,
    ToolCallStarted,
)
from ruizn.fleet.database import EventStore
from ruizn.serde import encode

TOKEN_BATCH = 64
# Events whose transaction commits as soon as they arrive (see the module's docstring).
_COMMIT_NOW: frozenset[type[Event]] = frozenset(
    {
        LlmResponse,
        RunStarted,
        RunResumed,
        BudgetSpent,
        RunFinished,
        ToolApprovalRequested,
        ToolApprovalDecided,
    }
)
# Of those, the ones that must also survive a power cut before the run goes on.
_DURABLE_NOW: frozenset[type[Event]] = frozenset(
    {RunStarted, RunFinished, ToolApprovalRequested, ToolApprovalDecided}
)


class FleetSink(EventWriter):
    def __init__(self, path: Path, *, store: EventStore, run_id: str) -> None:
        # The file is the database's export (store.export writes it, empty for a new run):
        # append to it, under the run's lock like any writer. No fsync: the database is the
        # run's truth, and the file is exported again from it before the run goes on.
        super().__init__(path, fsync=False)
        self._store = store
        self._run_id = run_id
        self._pending: list[tuple[int, str]] = []
        self._tokens = 0
        self._started: str | None = None  # the id of the last tool_call_started
        # Calls of tools that are not read-only, started and not yet finished: their
        # results commit at once.
        self._acting: set[str] = set()

    def __call__(self, event: Event) -> None:
        line = encode(event)
        self._pending.append((event.seq, line))
        self._write(event, (line + "\n").encode())
        kind = type(event)
        if kind in _COMMIT_NOW:
            # A priced call is charged to the run's budget (if it has one) with its line.
            charge = event.cost if isinstance(event, LlmResponse) and event.cost else 0.0
            self.flush(charge=charge, durable=kind in _DURABLE_NOW)
        elif isinstance(event, ToolCallStarted):
            self._started = event.id
        elif isinstance(event, ToolCallFinished):
            if event.id in self._acting:
                self._acting.discard(event.id)
                self.flush()
        elif kind is LlmToken:
            self._tokens += 1
            if self._tokens >= TOKEN_BATCH:
                self.flush()

    def sync(self) -> None:
        """Everything so far committed, and on disk: a tool that is not read-only runs next
        (the runner calls this right after its tool_call_started)."""
        self.flush(durable=True)
        if self._started is not None:
            self._acting.add(self._started)

    def flush(self, *, charge: float = 0.0, durable: bool = False) -> None:
        if self._pending:
            pending, self._pending = self._pending, []
            self._tokens = 0
            self._store.append(self._run_id, pending, charge=charge, durable=durable)

    def close(self) -> None:
        try:
            self.flush(durable=True)
        finally:
            super().close()
