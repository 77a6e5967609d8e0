"""A queue row ruizn did not write is never decoded (fleet/queueguard.py).

Anyone who can write to a fleet's database can forge a queued `ruizn.run` workflow whose
inputs are a Python pickle: DBOS would unpickle it, running its code, before ruizn checks
the input's signature. Here a run is submitted as a person would, then its row is forged
(a pickle that creates a marker file when unpickled), before a worker starts (SQLite) and
while one runs (Postgres). Nothing runs, and the worker says so in one line naming the
row. Real CLI, real DBOS, `--model test`."""

from __future__ import annotations

import base64
import os
import pickle
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from tests.fleet.conftest import env, ruizn, start_worker, stop_workers, wait_for

pytestmark = pytest.mark.slow


class Payload:
    """What the attacker queues: unpickling it creates `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


FORGED = "zz-forged-row"


def forge(url: str, template: str, marker: Path, *, as_id: str = FORGED) -> None:
    """A queued row like `template`'s (a run a person submitted), under the id `as_id` (the
    template's own row replaced when it is the same), its inputs a pickle as DBOS writes
    one."""
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    schema = "dbos" if engine.dialect.name == "postgresql" else None
    table = sa.Table("workflow_status", sa.MetaData(), autoload_with=engine, schema=schema)
    # DBOS keeps a workflow's inputs in a table of their own too, read first.
    kept = sa.Table("workflow_input", sa.MetaData(), autoload_with=engine, schema=schema)
    inputs = base64.b64encode(pickle.dumps({"args": (Payload(marker),), "kwargs": {}})).decode()
    with engine.begin() as conn:
        row = conn.execute(sa.select(table).where(table.c.workflow_uuid == template)).one()
        values = {
            **row._asdict(),
            "workflow_uuid": as_id,
            "inputs": inputs,
            "serialization": "py_pickle",
            "status": "ENQUEUED",
        }
        conn.execute(sa.delete(table).where(table.c.workflow_uuid == as_id))
        conn.execute(sa.insert(table).values(**values))
        conn.execute(sa.delete(kept).where(kept.c.workflow_uuid == as_id))
        conn.execute(sa.insert(kept).values(workflow_uuid=as_id, inputs=inputs))
    engine.dispose()


def submitted(url: str, folder: Path, environ: dict[str, str]) -> str:
    done = ruizn(["submit", "--db", url, "--model", "test", "--goal", "hi"], folder, environ)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class Output:
    """A worker's output lines, read as they come."""

    def __init__(self, worker: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(pipe,), daemon=True)
            for pipe in (worker.stdout, worker.stderr)
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, pipe: Any) -> None:
        for line in pipe:
            self.lines.append(line.rstrip("\n"))

    def has(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def done(self) -> list[str]:
        for reader in self._readers:
            reader.join(10)
        return self.lines


def refused_once(worker: subprocess.Popen[str], output: Output, marker: Path) -> None:
    """Stop the worker; nothing ran, and exactly one line names the refused row."""
    stop_workers([worker])
    lines = output.done()
    assert not marker.exists(), "the forged pickle was decoded"
    assert not any("Traceback" in line for line in lines), lines
    named = [line for line in lines if FORGED in line]
    assert len(named) == 1, lines
    assert "refused queued workflow" in named[0]
    assert "'py_pickle', not ruizn's JSON; not decoded" in named[0]


def test_a_pickle_row_planted_before_a_worker_starts_runs_nothing(
    tmp_path: Path, workspace: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    environ = env(None, url)
    marker = tmp_path / "PWNED"
    mine = submitted(url, workspace, environ)
    forge(url, mine, marker)
    worker = start_worker("w1", workspace, environ)
    output = Output(worker)
    try:
        wait_for(lambda: output.has(FORGED), 60, "the refusal to be said")
        assert _status(url, FORGED) == "ERROR"
    finally:
        refused_once(worker, output, marker)


def test_a_pickle_row_planted_while_a_worker_runs_runs_nothing(
    fresh_db: str, tmp_path: Path, workspace: Path
) -> None:
    environ = env(None, fresh_db)
    marker = tmp_path / "PWNED"
    worker = start_worker("w1", workspace, environ)
    output = Output(worker)
    try:
        wait_for(lambda: output.has("ready"), 60, "the worker to be ready")
        # Forged while the worker polls: its queue may take the row before a sweep does.
        mine = submitted(fresh_db, workspace, environ)
        forge(fresh_db, mine, marker)
        wait_for(lambda: output.has(f"{mine} success"), 60, "the person's run to end")
        wait_for(lambda: _status(fresh_db, FORGED) == "ERROR", 30, "the row to be refused")
        wait_for(lambda: output.has(FORGED), 10, "the refusal to be said")
    finally:
        refused_once(worker, output, marker)


def test_a_person_resuming_a_forged_row_decodes_nothing(tmp_path: Path, workspace: Path) -> None:
    """`resume --db` reads the run's queued input (no worker, no sweep): never unpickled."""
    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    environ = env(None, url)
    marker = tmp_path / "PWNED"
    mine = submitted(url, workspace, environ)
    forge(url, mine, marker, as_id=mine)
    done = ruizn(["resume", "--db", url, mine], workspace, environ)
    assert not marker.exists(), "the forged pickle was decoded"
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode != 0


def _status(url: str, run_id: str) -> str | None:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    schema = "dbos." if engine.dialect.name == "postgresql" else ""
    with engine.connect() as conn:
        found = conn.execute(
            sa.text(f"SELECT status FROM {schema}workflow_status WHERE workflow_uuid = :id"),
            {"id": run_id},
        ).scalar()
    engine.dispose()
    return None if found is None else str(found)


def test_a_refused_row_is_marked_once_whoever_sweeps(tmp_path: Path) -> None:
    """Two workers sweeping the same database: one marks and reports the row, the other
    finds nothing left to refuse; the row can no longer be decoded by DBOS's codecs."""
    from dbos import DBOS

    from ruizn.fleet.queueguard import REFUSED, sweep

    url = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    DBOS.migrate(url)
    engine = sa.create_engine(url)
    table = sa.Table("workflow_status", sa.MetaData(), autoload_with=engine)
    with engine.begin() as conn:
        conn.execute(
            sa.insert(table).values(
                workflow_uuid=FORGED,
                status="ENQUEUED",
                name="ruizn.run",
                queue_name="ruizn",
                inputs="gAR9lC4=",
                serialization="py_pickle",
                created_at=0,
                updated_at=0,
                priority=0,
            )
        )
    first, second = sweep(engine), sweep(engine)
    with engine.connect() as conn:
        row = conn.execute(sa.select(table).where(table.c.workflow_uuid == FORGED)).one()
    engine.dispose()
    assert [(r.workflow_id, r.serialization, r.status) for r in first] == [
        (FORGED, "py_pickle", "ENQUEUED")
    ]
    assert second == []
    assert (row.status, row.serialization) == ("ERROR", REFUSED)
