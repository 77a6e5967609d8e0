"""Processes that start at once on a fresh Postgres all get the fleet's schema, none fails.

Before the schema lock, two workers started together raced on creating the tables: in 2 of
5 tries one exited with "cannot reach the database: duplicate key ...
pg_type_typname_nsp_index". Each try here has a database of its own, fresh.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from ruizn.fleet.database import EventStore
from tests.fleet.conftest import SUBPROCESS_PATH, env, start_worker, stop_workers, wait_for

TRIES = 10
# Whole workers cost four times as much a try; the schema step they race on is tried TRIES
# times above, so the workers' start around it is tried a third as often.
WORKER_TRIES = 3

pytestmark = pytest.mark.slow

# What `ruizn worker` and `ruizn submit` do to the database before anything else: the
# fleet's tables, then DBOS's. Each process imports once and says it is ready, then reads
# one fresh database a line: both get each line at the same moment and race on its schema.
# (Paying the imports once, not once a try, keeps the ten races cheap.)
INITIALISE = """
import sys
from ruizn.fleet.app import migrate
from ruizn.fleet.database import EventStore
print("ready", flush=True)
for line in sys.stdin:
    db = line.strip()
    try:
        store = EventStore(db)
        migrate(db, store)
        store.close()
    except Exception as exc:
        print(f"failed: {type(exc).__name__}: {exc}", flush=True)
    else:
        print("ok", flush=True)
"""


@pytest.fixture
def new_database(postgres_url: str) -> Iterator[Callable[[], str]]:
    admin = sa.create_engine(
        postgres_url.replace("postgresql://", "postgresql+psycopg://"),
        isolation_level="AUTOCOMMIT",
    )
    count = 0

    def make() -> str:
        nonlocal count
        count += 1
        name = f"race{os.getpid()}_{count}_{os.urandom(3).hex()}"
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        return postgres_url.rsplit("/", 1)[0] + "/" + name

    yield make
    admin.dispose()


def _tables(db: str) -> set[str]:
    store = EventStore(db)
    try:
        return set(sa.inspect(store.engine).get_table_names())
    finally:
        store.close()


def test_two_processes_creating_the_schema_at_once_both_succeed(
    new_database: Callable[[], str],
) -> None:
    environ = {**os.environ, "PYTHONPATH": SUBPROCESS_PATH, "DBOS__DISABLE_TELEMETRY": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", INITIALISE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )
        for _ in range(2)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        for attempt in range(TRIES):
            db = new_database()
            for proc in procs:  # go, both at once
                assert proc.stdin is not None
                proc.stdin.write(db + "\n")
                proc.stdin.flush()
            for proc in procs:
                assert proc.stdout is not None
                said = proc.stdout.readline().strip()
                assert said == "ok", (attempt, said)
            assert {"ruizn_events", "ruizn_runs", "ruizn_workers"} <= _tables(db)
    finally:
        outcomes = []
        for proc in procs:
            assert proc.stdin is not None
            assert proc.stdout is not None
            assert proc.stderr is not None
            proc.stdin.close()  # end of input: the process exits
            outcomes.append((proc.stdout.read(), proc.stderr.read()))
            proc.wait(60)
    for out, err in outcomes:
        assert "failed" not in out, out
        assert "Traceback" not in err, err


def _lines(proc: subprocess.Popen[str], into: list[str]) -> threading.Thread:
    def read() -> None:
        assert proc.stdout is not None
        into.extend(iter(proc.stdout.readline, ""))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


def test_two_workers_started_at_once_on_a_fresh_database_both_start(
    new_database: Callable[[], str], tmp_path: Path
) -> None:
    for attempt in range(WORKER_TRIES):
        db = new_database()
        folder = tmp_path / f"try{attempt}"
        folder.mkdir()
        environ = env(None, db)
        workers = {name: start_worker(name, folder, environ) for name in ("a", "b")}
        out: dict[str, list[str]] = {name: [] for name in workers}
        readers = [_lines(proc, out[name]) for name, proc in workers.items()]
        try:
            wait_for(
                lambda workers=workers, out=out: all(
                    any("ready" in line for line in out[name]) or proc.poll() is not None
                    for name, proc in workers.items()
                ),
                120,
                "both workers to be ready or to exit",
            )
        finally:
            stop_workers(workers.values(), 30)
            for reader in readers:
                reader.join(5)
        for name, proc in workers.items():
            assert proc.stderr is not None
            err = proc.stderr.read()
            assert any(f"[worker {name}] ready" in line for line in out[name]), (attempt, err)
            assert err == "", (attempt, err)
            assert proc.returncode == 130, (attempt, err)
