"""The fleet's truth: every event of every run, as ruizn log lines, in the system database.

One row per event: (run_id, seq, line), `line` being exactly the JSON line the run's
events.jsonl holds (ruizn's codec, `ruizn.serde.encode`; never pickle). Events, not states:
a long history is stored once, whatever the number of steps.

The append is idempotent so that a recovered workflow can write again what it wrote before
the crash: a seq already stored with the same bytes is skipped; a different line at a stored
seq, or a seq past the next one, is refused with `AppendConflict`. The refusal also fences a
second executor that wrongly runs the same run: its first diverging line is refused.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import sqlalchemy as sa
from attrs import frozen
from sqlalchemy.dialects import postgresql as postgresql_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.schema import CreateTable

from ruizn.effects.runlog.folder import RunFolder
from ruizn.fleet.groupcommit import GroupCommit
from ruizn.fleet.writerlock import OneWriter

_META = sa.MetaData()

EVENTS = sa.Table(
    "ruizn_events",
    _META,
    sa.Column("run_id", sa.String(200), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("line", sa.Text, nullable=False),
)

# One row per run the fleet knows: who ran it last and how it ended (the events say the rest).
RUNS = sa.Table(
    "ruizn_runs",
    _META,
    sa.Column("run_id", sa.String(200), primary_key=True),
    sa.Column("goal", sa.Text, nullable=False),
    sa.Column("worker", sa.String(200), nullable=True),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("submitted", sa.Float, nullable=False),
    sa.Column("updated", sa.Float, nullable=False),
)

# A budget the runs of a batch (`ruizn batch/submit --max-cost`) share: every worker adds its
# runs' costs to `spent` in the transaction that stores the priced llm_response, and reads it
# before each model call and before starting a run.
BUDGETS = sa.Table(
    "ruizn_budgets",
    _META,
    sa.Column("budget_id", sa.String(200), primary_key=True),
    sa.Column("max_cost", sa.Float, nullable=False),
    sa.Column("spent", sa.Float, nullable=False),
)

# Which budget a run draws on (at most one).
BUDGET_RUNS = sa.Table(
    "ruizn_budget_runs",
    _META,
    sa.Column("run_id", sa.String(200), primary_key=True),
    sa.Column("budget_id", sa.String(200), nullable=False),
)

# The runs of a subagent tree on the fleet (fleet/children.py) and the budget they share,
# `tree-ROOT` in BUDGETS: charged with each run's answers as a batch's budget is, besides it.
TREE_RUNS = sa.Table(
    "ruizn_tree_runs",
    _META,
    sa.Column("run_id", sa.String(200), primary_key=True),
    sa.Column("tree_id", sa.String(200), nullable=False),
)

WORKERS = sa.Table(
    "ruizn_workers",
    _META,
    sa.Column("worker_id", sa.String(200), primary_key=True),
    sa.Column("heartbeat", sa.Float, nullable=False),
    sa.Column("started", sa.Float, nullable=False),
)


# The statements every step of every run executes, built once: building one per call and
# computing its cache key (SQLAlchemy walks the whole statement for it) cost a fleet
# process more CPU than the database's own work. Values are bound parameters.
_TOP_SEQ = sa.select(sa.func.max(EVENTS.c.seq)).where(EVENTS.c.run_id == sa.bindparam("run"))
_STORED_LINES = sa.select(EVENTS.c.seq, EVENTS.c.line).where(
    EVENTS.c.run_id == sa.bindparam("run"),
    EVENTS.c.seq.between(sa.bindparam("first"), sa.bindparam("last")),
)
# RETURNING: SQLAlchemy then sends many rows as one multi-row INSERT ("insertmanyvalues"),
# where an executemany steps the database once per row.
_INSERT_EVENTS = sa.insert(EVENTS).returning(EVENTS.c.seq)
_BUDGETS_OF = sa.union_all(
    sa.select(BUDGET_RUNS.c.run_id, BUDGET_RUNS.c.budget_id).where(
        BUDGET_RUNS.c.run_id.in_(sa.bindparam("runs", expanding=True))
    ),
    sa.select(TREE_RUNS.c.run_id, TREE_RUNS.c.tree_id).where(
        TREE_RUNS.c.run_id.in_(sa.bindparam("runs", expanding=True))
    ),
)
_CHARGE = (
    sa.update(BUDGETS)
    .where(BUDGETS.c.budget_id == sa.bindparam("budget"))
    .values(spent=BUDGETS.c.spent + sa.bindparam("charge", type_=sa.Float))
)
_RUN_LINES = (
    sa.select(EVENTS.c.line).where(EVENTS.c.run_id == sa.bindparam("run")).order_by(EVENTS.c.seq)
)
_HAS_RUN = sa.select(EVENTS.c.seq).where(EVENTS.c.run_id == sa.bindparam("run")).limit(1)
_NOTE_RUNS = {
    # One statement for all the run notes of a transaction: a new row, or the status and
    # time of the run's row, and its worker when the note names one.
    name: dialect.insert(RUNS)
    .on_conflict_do_update(
        index_elements=[RUNS.c.run_id],
        set_={
            "status": dialect.insert(RUNS).excluded.status,
            "updated": dialect.insert(RUNS).excluded.updated,
            "worker": sa.func.coalesce(dialect.insert(RUNS).excluded.worker, RUNS.c.worker),
        },
    )
    .returning(RUNS.c.run_id)
    for name, dialect in (("sqlite", sqlite_dialect), ("postgresql", postgresql_dialect))
}
# The events, charges and run notes of a transaction, written at its end in one statement
# each: the store's calls release the GIL, and under a busy process each call waited a GIL
# switch (milliseconds) to go on, while every run of the process waited for the commit.
_DEFERRED = "ruizn_deferred"


def _write_deferred(conn: sa.Connection) -> None:
    deferred = conn.info.pop(_DEFERRED, None)
    if deferred is None:
        return
    rows, charges, notes = deferred
    if notes:
        conn.execute(_NOTE_RUNS[conn.dialect.name], list(notes.values())).all()
    if rows:
        conn.execute(_INSERT_EVENTS, rows).all()
    if charges:
        # Each priced answer is added to its run's budget, if the run has one (most have
        # none: one query says which do).
        runs = sorted({run_id for run_id, _ in charges})
        budgets_of: dict[str, list[str]] = {}
        for run_id, budget_id in conn.execute(_BUDGETS_OF, {"runs": runs}).all():
            budgets_of.setdefault(run_id, []).append(budget_id)
        spent: dict[str, float] = {}
        for run_id, charge in charges:
            for budget_id in budgets_of.get(run_id, ()):
                spent[budget_id] = spent.get(budget_id, 0.0) + charge
        for budget, charge in sorted(spent.items()):
            conn.execute(_CHARGE, {"budget": budget, "charge": charge})


# Held while the fleet's schema is created or migrated (these tables here, DBOS's in
# app.migrate): any fixed 64-bit number, the same in every ruizn ("ruiznsch" in ASCII).
SCHEMA_LOCK = int.from_bytes(b"ruiznsch", "big")
# How long a process waits for another to finish creating or migrating the schema.
SCHEMA_LOCK_WAIT = 300.0


class AppendConflict(RuntimeError):
    """The line does not extend the run stored in the database."""


class StoreUnreachable(RuntimeError):
    """The database could not be opened or reached; the message says which and why."""


@frozen(kw_only=True)
class RunRow:
    run_id: str
    goal: str
    worker: str | None
    status: str
    submitted: float
    updated: float


def safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "<unparsable database URL>"


class EventStore:
    def __init__(self, url: str) -> None:
        self.url = url
        try:
            parsed = sa.make_url(url)
        except sa.exc.ArgumentError:
            raise StoreUnreachable(f"not a database URL: {url!r}") from None
        if parsed.drivername == "postgresql":
            # DBOS speaks psycopg 3; so do we, whatever driver SQLAlchemy would default to.
            parsed = parsed.set(drivername="postgresql+psycopg")
        # SQLite: the writers of this process, and of every process on the file, take turns
        # on locks of ours before SQLite's own (fleet/writerlock.py).
        self._one_writer: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
        # The group's turn (fleet/groupcommit.py): on SQLite the one writer's own.
        group_lock: contextlib.AbstractContextManager[object] = threading.Lock()
        if parsed.get_backend_name() == "sqlite":
            self._one_writer = group_lock = OneWriter(parsed.database)
            # Several worker threads write at once: wait for the lock instead of failing.
            self.engine = sa.create_engine(
                parsed, connect_args={"timeout": 30, "check_same_thread": False}
            )
            sa.event.listen(self.engine, "connect", _sqlite_pragmas)
        else:
            self.engine = sa.create_engine(
                parsed, pool_pre_ping=True, pool_size=8, connect_args={"connect_timeout": 5}
            )
        # Appends and run notes of this process's runs, many in one transaction.
        self._tops: dict[str, int] = {}  # run id -> its last seq this process committed
        self._group = GroupCommit(lambda durable: self._transaction(durable=durable), group_lock)
        try:
            self._create_tables()
        except StoreUnreachable:
            self.engine.dispose()
            raise
        except sa.exc.SQLAlchemyError as exc:
            self.engine.dispose()
            raise StoreUnreachable(
                f"cannot reach the database {safe_url(url)}: {_first_line(exc)}"
            ) from None

    def close(self) -> None:
        self.engine.dispose()
        if isinstance(self._one_writer, OneWriter):
            self._one_writer.close()

    @contextlib.contextmanager
    def schema_lock(self) -> Iterator[None]:
        """Held by one process at a time while it creates or migrates the fleet's schema.

        On Postgres, two workers started at once on a fresh database both found a table
        missing and both created it; the loser failed on pg_type's unique index (even
        `CREATE TABLE IF NOT EXISTS` races that way). A session advisory lock makes the
        others wait, then find the tables made. A waiter polls with `pg_try_advisory_lock`
        in autocommit, as DBOS does for its own lock: a statement blocked on the lock would
        hold a snapshot, and DBOS's `CREATE INDEX CONCURRENTLY`, run by the holder, waits
        for every older snapshot in the database: each would wait for the other for ever.
        SQLite needs no lock: its write lock already serialises DDL.
        """
        if self.engine.dialect.name != "postgresql":
            yield
            return
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            deadline = time.monotonic() + SCHEMA_LOCK_WAIT
            while not conn.execute(sa.select(sa.func.pg_try_advisory_lock(SCHEMA_LOCK))).scalar():
                if time.monotonic() > deadline:
                    raise StoreUnreachable(
                        f"the database {safe_url(self.url)} is being set up by another process"
                        f" for over {SCHEMA_LOCK_WAIT:g}s; try again once it is done"
                    )
                time.sleep(0.1)
            try:
                yield
            finally:
                conn.execute(sa.select(sa.func.pg_advisory_unlock(SCHEMA_LOCK)))

    def _create_tables(self) -> None:
        # Checked first, so that a role without CREATE can use tables made by another;
        # IF NOT EXISTS for SQLite, whose check and create are not under one lock.
        with self.schema_lock(), self.engine.begin() as conn:
            inspector = sa.inspect(conn)
            for table in _META.sorted_tables:
                if not inspector.has_table(table.name):
                    conn.execute(CreateTable(table, if_not_exists=True))

    # -- events ----------------------------------------------------------------------------

    def append(
        self,
        run_id: str,
        lines: Sequence[tuple[int, str]],
        *,
        charge: float = 0.0,
        durable: bool = True,
    ) -> int:
        """Store (seq, line) pairs in one transaction; return how many were new. `charge`
        (USD, the cost of the last line's model call) is added to the run's budget in the
        same transaction, if that line is new: a recovered run that writes it again is not
        charged twice.

        `durable=False` (SQLite): the commit survives the process dying but not a power cut
        until a later durable commit (synchronous=NORMAL in WAL mode: no fsync of its own).
        The fleet's sink groups a step's events so; see fleet/sink.py."""
        if not lines:
            return 0
        # The run's last seq as this process committed it: its next lines follow it, and
        # asking the table again in every write of a group made the group's transaction,
        # which every run of the process waits for, twice as long. Should the table hold
        # more (a second executor wrongly on the run), the insert breaks the primary key:
        # the run's cached seq is dropped and the write checked against the table.
        known = self._tops.get(run_id)
        try:
            count = self._group.run(
                lambda conn: self._append(conn, run_id, lines, charge, known), durable=durable
            )
        except sa.exc.IntegrityError:
            if known is None:
                raise
            self._tops.pop(run_id, None)
            count = self._group.run(
                lambda conn: self._append(conn, run_id, lines, charge, None), durable=durable
            )
        self._tops[run_id] = max(self._tops.get(run_id) or 0, lines[-1][0])
        return count

    def _append(
        self,
        conn: sa.Connection,
        run_id: str,
        lines: Sequence[tuple[int, str]],
        charge: float,
        known: int | None,
    ) -> int:
        first, last = lines[0][0], lines[-1][0]
        top = known if known is not None else conn.execute(_TOP_SEQ, {"run": run_id}).scalar()
        expected = (top or 0) + 1
        stored: dict[int, str] = {}
        if first < expected:  # some are stored already (a recovery writes them again)
            rows = conn.execute(_STORED_LINES, {"run": run_id, "first": first, "last": last})
            stored = {seq: line for seq, line in rows}
        new: list[dict[str, object]] = []
        for seq, line in lines:
            if seq in stored:
                if stored[seq] != line:
                    raise AppendConflict(f"run {run_id}: seq {seq} is stored with a different line")
                continue
            if seq != expected:
                raise AppendConflict(
                    f"run {run_id}: seq {seq} would leave a gap after {expected - 1}"
                )
            new.append({"run_id": run_id, "seq": seq, "line": line})
            expected += 1
        if new:
            # Executed with the rest of the transaction's writes, at its end (`_transaction`).
            rows, charges, _ = conn.info.setdefault(_DEFERRED, ([], [], {}))
            rows.extend(new)
            if charge and new[-1]["seq"] == last:
                charges.append((run_id, charge))
        return len(new)

    @contextlib.contextmanager
    def _transaction(self, *, durable: bool) -> Iterator[sa.Connection]:
        # SQLite connections commit relaxed (synchronous=NORMAL, set on connect): most
        # commits are a step's grouped events. A durable one switches to FULL around itself;
        # in WAL mode its fsync makes every commit before it durable too.
        with self._one_writer, self.engine.connect() as conn:
            strict = durable and conn.dialect.name == "sqlite"
            if strict:  # before the transaction begins: SQLite refuses it inside one
                conn.exec_driver_sql("PRAGMA synchronous=FULL")
                conn.commit()
            conn.info.pop(_DEFERRED, None)  # what a failed transaction left
            try:
                with conn.begin():
                    yield conn
                    _write_deferred(conn)
            finally:
                if strict:
                    conn.exec_driver_sql("PRAGMA synchronous=NORMAL")
                    conn.commit()

    def lines(self, run_id: str) -> Iterator[str]:
        with self.engine.connect() as conn:
            result = conn.execution_options(yield_per=2000).execute(_RUN_LINES, {"run": run_id})
            for (line,) in result:
                yield line

    def has_run(self, run_id: str) -> bool:
        with self.engine.connect() as conn:
            found = conn.execute(_HAS_RUN, {"run": run_id}).first()
        return found is not None

    def export(self, run_id: str, path: Path) -> int:
        """Write the run's events.jsonl from the table, byte for byte; atomically replaces
        `path`. Returns the number of lines. The run folder is opened like any other
        (effects/runlog/folder.py): the file is new, under a random name, and renamed over
        `path`, so nothing planted in the folder is written through."""
        path.parent.mkdir(parents=True, exist_ok=True)
        count = 0

        def lines() -> Iterator[bytes]:
            nonlocal count
            for line in self.lines(run_id):
                count += 1
                yield line.encode() + b"\n"

        with RunFolder.open(path.parent) as folder:
            folder.replace_file(path.name, lines())
        return count

    # -- runs ------------------------------------------------------------------------------

    def note_run(self, run_id: str, *, goal: str, status: str, worker: str | None) -> None:
        now = time.time()

        # Not durable on SQLite (see `append`): the row only says who ran the run last and
        # how it ended; the events say what happened, and a run is never decided by it.
        def note(conn: sa.Connection) -> None:
            notes = conn.info.setdefault(_DEFERRED, ([], [], {}))[2]
            earlier = notes.get(run_id)
            notes[run_id] = {
                "run_id": run_id,
                "goal": goal,
                "worker": worker or (earlier["worker"] if earlier else None),
                "status": status,
                "submitted": earlier["submitted"] if earlier else now,
                "updated": now,
            }

        self._group.run(note, durable=False)

    def note_submitted(self, run_id: str, *, goal: str) -> None:
        """A row for a run just submitted, unless the fleet knows it already."""
        now = time.time()
        with self._transaction(durable=True) as conn:
            known = conn.execute(sa.select(RUNS.c.run_id).where(RUNS.c.run_id == run_id)).first()
            if known is None:
                conn.execute(
                    sa.insert(RUNS).values(
                        run_id=run_id,
                        goal=goal,
                        worker=None,
                        status="queued",
                        submitted=now,
                        updated=now,
                    )
                )

    @contextlib.contextmanager
    def queueing(self, run_id: str) -> Iterator[sa.Connection]:
        """A transaction that marks a known run queued again. The caller enqueues the run's
        workflow in it (the queue lives in the same database), so the mark and the queue
        entry commit together or not at all, and no worker can take the run in between."""
        with self._transaction(durable=True) as conn:
            conn.execute(
                sa.update(RUNS)
                .where(RUNS.c.run_id == run_id)
                .values(status="queued", updated=time.time())
            )
            yield conn

    def runs(self) -> list[RunRow]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(RUNS).order_by(RUNS.c.submitted, RUNS.c.run_id))
            return [RunRow(**row._asdict()) for row in rows]

    # -- budgets ---------------------------------------------------------------------------

    def open_budget(self, budget_id: str, max_cost: float, run_ids: Sequence[str]) -> None:
        """The budget `budget_id` of `max_cost` USD (a new limit for one that exists: a batch
        started again with another --max-cost), and its runs."""
        with self._transaction(durable=True) as conn:
            changed = conn.execute(
                sa.update(BUDGETS).where(BUDGETS.c.budget_id == budget_id).values(max_cost=max_cost)
            ).rowcount
            if not changed:
                conn.execute(
                    sa.insert(BUDGETS).values(budget_id=budget_id, max_cost=max_cost, spent=0.0)
                )
            known = set(
                conn.execute(
                    sa.select(BUDGET_RUNS.c.run_id).where(BUDGET_RUNS.c.run_id.in_(run_ids))
                ).scalars()
            )
            fresh = [{"run_id": r, "budget_id": budget_id} for r in run_ids if r not in known]
            if fresh:
                conn.execute(sa.insert(BUDGET_RUNS), fresh)

    def join_budget(self, budget_id: str, run_id: str) -> None:
        """`run_id` draws on `budget_id` too (a subagent on its parent's batch budget),
        unless it draws on a budget already."""
        self._join(BUDGET_RUNS, run_id, budget_id=budget_id)

    def open_tree(self, tree_id: str, max_cost: float, spent: float, top: str) -> None:
        """The budget of a subagent tree, opened (if it is not) at what its top run `top`
        has spent, and the top run in it; its limit is the top run's `max_cost` now."""
        with self._transaction(durable=True) as conn:
            changed = conn.execute(
                sa.update(BUDGETS).where(BUDGETS.c.budget_id == tree_id).values(max_cost=max_cost)
            ).rowcount
            if not changed:
                conn.execute(
                    sa.insert(BUDGETS).values(budget_id=tree_id, max_cost=max_cost, spent=spent)
                )
        self.join_tree(tree_id, top)

    def join_tree(self, tree_id: str, run_id: str) -> None:
        self._join(TREE_RUNS, run_id, tree_id=tree_id)

    def _join(self, table: sa.Table, run_id: str, **values: str) -> None:
        """A row of `table` for `run_id`, unless it has one (a run joins once)."""
        with self._transaction(durable=True) as conn:
            found = conn.execute(sa.select(table.c.run_id).where(table.c.run_id == run_id))
            if found.first() is None:
                conn.execute(sa.insert(table).values(run_id=run_id, **values))

    def tree_of(self, run_id: str) -> str | None:
        with self.engine.connect() as conn:
            found = conn.execute(
                sa.select(TREE_RUNS.c.tree_id).where(TREE_RUNS.c.run_id == run_id)
            ).scalar()
        return None if found is None else str(found)

    def budget_of(self, run_id: str) -> str | None:
        with self.engine.connect() as conn:
            found = conn.execute(
                sa.select(BUDGET_RUNS.c.budget_id).where(BUDGET_RUNS.c.run_id == run_id)
            ).scalar()
        return None if found is None else str(found)

    def budget(self, budget_id: str) -> tuple[float, float] | None:
        """(max_cost, spent) of the budget, in USD."""
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(BUDGETS.c.max_cost, BUDGETS.c.spent).where(
                    BUDGETS.c.budget_id == budget_id
                )
            ).first()
        return None if row is None else (float(row[0]), float(row[1]))

    # -- workers ---------------------------------------------------------------------------

    def heartbeat(self, worker_id: str) -> None:
        now = time.time()
        with self._transaction(durable=True) as conn:
            changed = conn.execute(
                sa.update(WORKERS).where(WORKERS.c.worker_id == worker_id).values(heartbeat=now)
            ).rowcount
            if not changed:
                conn.execute(
                    sa.insert(WORKERS).values(worker_id=worker_id, heartbeat=now, started=now)
                )

    def mark_dead(self, worker_id: str) -> None:
        with self._transaction(durable=True) as conn:
            conn.execute(
                sa.update(WORKERS).where(WORKERS.c.worker_id == worker_id).values(heartbeat=0.0)
            )

    def forget_worker(self, worker_id: str) -> None:
        with self._transaction(durable=True) as conn:
            conn.execute(sa.delete(WORKERS).where(WORKERS.c.worker_id == worker_id))

    def claim_dead(self, alive: str, dead_after: float) -> list[str]:
        """Workers silent for `dead_after` seconds, each claimed by exactly one live worker.

        The claim is a conditional update that refreshes the dead worker's heartbeat: every
        other live worker then sees it alive and leaves it. The claimant forgets the worker
        once its runs are back on the queue; if the claimant dies first, the heartbeat goes
        stale again and another live worker claims it and finishes the job.
        """
        now = time.time()
        cutoff = now - dead_after
        claimed: list[str] = []
        with self.engine.connect() as conn:
            stale = (
                conn.execute(
                    sa.select(WORKERS.c.worker_id).where(
                        WORKERS.c.heartbeat < cutoff, WORKERS.c.worker_id != alive
                    )
                )
                .scalars()
                .all()
            )
        for worker_id in stale:
            with self._transaction(durable=True) as conn:
                won = conn.execute(
                    sa.update(WORKERS)
                    .where(WORKERS.c.worker_id == worker_id, WORKERS.c.heartbeat < cutoff)
                    .values(heartbeat=now)
                ).rowcount
            if won:
                claimed.append(worker_id)
        return claimed


def _sqlite_pragmas(dbapi_connection: object, _record: object) -> None:
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    # WAL lets the batch's readers (progress) and writers (runs) work at once.
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    # Relaxed unless a write asks to be durable (EventStore._transaction): the commit
    # survives the process dying, and the next durable commit's fsync takes it to disk.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _first_line(exc: BaseException) -> str:
    inner = getattr(exc, "orig", None) or exc
    text = str(inner).strip().splitlines()
    return text[0] if text else type(inner).__name__
