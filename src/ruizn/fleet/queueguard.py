"""The fleet's queue decodes nothing ruizn did not write: portable JSON, never pickle.

DBOS decodes a workflow's inputs, output and error by the row's own `serialization` column,
and it unpickles a row labelled `py_pickle` whatever the application configured. Anyone who
can write to a fleet's database could so queue a pickle that runs code in a worker before
ruizn's signature check (fleet/signing.py) ever sees the input. Two guards, in every
process that opens a fleet's queue (`worker`, `batch`, `submit`, `resume --db`):

- `refuse_pickle`: DBOS's pickle codec refuses, in this process, to decode or encode
  anything, and DBOS is configured with its portable JSON for rows with no label
  (`serializer`). No row is unpickled, however it reaches DBOS (its queue, a recovery, a
  listing). DBOS's layout is checked first: a DBOS without the codec where it is expected
  is refused (`QueueGuardError`), never trusted blindly.
- `sweep`: rows in any serialization but portable JSON are marked ERROR and relabelled
  `ruizn_refused` (a codec DBOS does not have, so nothing decodes them later) before DBOS's
  queue starts, and again at every beat of a worker or batch; each by one conditional
  update, so exactly one process reports each row, in one line naming it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from attrs import frozen

from ruizn.fleet.errors import FleetRefused

__all__ = [
    "ACCEPTED",
    "REFUSED",
    "PickleRefused",
    "QueueGuardError",
    "Refused",
    "refuse_pickle",
    "refused_line",
    "serializer",
    "sweep",
]

# The one serialization a ruizn fleet writes (DBOS's portable JSON), and the label a
# refused row is given.
ACCEPTED = "portable_json"
REFUSED = "ruizn_refused"


class QueueGuardError(FleetRefused):
    """The installed DBOS cannot be made to refuse pickle; the message says why (one line,
    as every FleetRefused: nothing is queued or started)."""


class PickleRefused(ValueError):
    """Raised in place of unpickling (or pickling) a value of the fleet's database."""


@frozen(kw_only=True)
class Refused:
    workflow_id: str
    name: str | None
    serialization: str | None
    status: str | None


def _refuse(_self: object, _data: Any) -> Any:
    raise PickleRefused("ruizn never decodes or writes pickle in a fleet's database")


def refuse_pickle() -> None:
    """Make DBOS's pickle codec refuse in this process (every instance: DBOS keeps several).
    Idempotent."""
    from dbos import _serialization

    codec = getattr(_serialization, "DefaultSerializer", None)
    if not (
        isinstance(codec, type)
        and issubclass(codec, _serialization.Serializer)
        and codec().name() == "py_pickle"
        and _serialization.DBOSPortableJSON.name() == ACCEPTED
    ):
        raise QueueGuardError(
            "this DBOS keeps its pickle codec elsewhere: ruizn cannot make it refuse pickle"
            " (install the dbos version pyproject.toml names)"
        )
    codec.deserialize = _refuse  # type: ignore[method-assign,assignment]
    codec.serialize = _refuse  # type: ignore[method-assign,assignment]


def serializer() -> Any:
    """The serializer DBOS and its client are configured with: portable JSON, for the
    values DBOS writes with no workflow's own format and the rows with no label."""
    from dbos import DBOSPortableJSONSerializer

    return DBOSPortableJSONSerializer()


def _status_table(engine: sa.Engine) -> sa.Table:
    # Only the columns read or written here; DBOS's schema is "dbos" on Postgres (the
    # default ruizn keeps) and none on SQLite.
    schema = "dbos" if engine.dialect.name == "postgresql" else None
    return sa.Table(
        "workflow_status",
        sa.MetaData(),
        sa.Column("workflow_uuid", sa.Text, primary_key=True),
        sa.Column("status", sa.Text),
        sa.Column("name", sa.Text),
        sa.Column("serialization", sa.Text),
        sa.Column("updated_at", sa.BigInteger),
        schema=schema,
    )


def sweep(engine: sa.Engine) -> list[Refused]:
    """Mark every workflow row in another serialization than portable JSON: ERROR, labelled
    `ruizn_refused`. Returns the rows this call marked (another process marks the others)."""
    table = _status_table(engine)
    foreign = sa.or_(
        table.c.serialization.is_(None), table.c.serialization.not_in((ACCEPTED, REFUSED))
    )
    with engine.connect() as conn:
        found = conn.execute(
            sa.select(table.c.workflow_uuid, table.c.name, table.c.serialization, table.c.status)
            .where(foreign)
            .limit(1000)
        ).all()
    refused: list[Refused] = []
    for workflow_id, name, serialization, status in found:
        with engine.begin() as conn:
            won = conn.execute(
                sa.update(table)
                .where(table.c.workflow_uuid == workflow_id, foreign)
                .values(status="ERROR", serialization=REFUSED, updated_at=int(time.time() * 1000))
            ).rowcount
        if won:
            refused.append(
                Refused(
                    workflow_id=workflow_id,
                    name=name,
                    serialization=serialization,
                    status=status,
                )
            )
    return refused


def refused_line(row: Refused, shown: Callable[[str], str]) -> str:
    """The one line said of a refused row (`shown` makes the database's text inert)."""
    label = "no serialization" if row.serialization is None else repr(shown(row.serialization))
    return (
        f"refused queued workflow {shown(row.workflow_id)!r} ({shown(row.name or '?')}):"
        f" its data is in {label}, not ruizn's JSON; not decoded, marked ERROR"
    )
