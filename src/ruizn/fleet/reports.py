"""What the fleet's calls return and tell as they go: frozen records, never printed here.

`run_batch` returns a `BatchReport` and tells a `BatchWatcher` each run's end and, while it
waits, the batch's progress; `work` returns `WorkerStopped`; `submit` returns `Submitted`;
`resume_db` returns `Queued` or `NothingQueued`. The CLI draws them
(cli/fleet_printer.py); a program may read them instead."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import frozen

from ruizn.limits import Limits
from ruizn.settings import RunSettings

__all__ = [
    "BatchOptions",
    "BatchProgress",
    "BatchReport",
    "BatchRun",
    "BatchWatcher",
    "NothingQueued",
    "Queued",
    "Submitted",
    "WorkerStopped",
]


@frozen(kw_only=True)
class BatchOptions:
    """A batch: the goals file and how to run it. `settings` are every run's defaults (a
    line's options on top); `settings.max_cost` is each run's own budget, `batch_max_cost`
    the whole batch's (held in the batch's database: a batch started again goes on with
    what its runs have spent). `mcp_headers` (`NAME:KEY=VALUE`) reach the runs in memory,
    never the database. `trust`: queued runs the user's key did not sign run too, after
    their grant is shown. `database`: a URL whose queue the runs go on instead of the
    batch's own SQLite (workers started with `--db` there take runs too); `worker`: this
    process's executor id (default `batch`: a batch started again recovers its runs)."""

    goals: str
    settings: RunSettings
    concurrency: int = 4
    workspace: str = "."
    log_dir: str | None = None
    tools_from: str | None = None
    mcp_headers: tuple[str, ...] = ()
    trust: bool = False
    batch_max_cost: float | None = None
    database: str | None = None
    worker: str | None = None


@frozen(kw_only=True)
class BatchRun:
    """One run's end as the batch saw it. `steps` is None when the run never ran (refused,
    not proven, another run under its id): then only `error` says why."""

    run_id: str
    goal: str
    status: str
    steps: int | None = None
    elapsed: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    error: str | None = None

    @classmethod
    def of(cls, run_id: str, goal: str, result: Mapping[str, Any]) -> BatchRun:
        """From a workflow's result (a dict of JSON values, as the fleet stores it)."""
        cost = result.get("cost")
        error = result.get("error")
        return cls(
            run_id=run_id,
            goal=goal,
            status=str(result.get("status")),
            steps=int(result["steps"]) if "steps" in result else None,
            elapsed=float(result.get("elapsed") or 0.0),
            input_tokens=int(result.get("input_tokens") or 0),
            output_tokens=int(result.get("output_tokens") or 0),
            cost=float(cost) if isinstance(cost, int | float) else None,
            error=str(error) if error else None,
        )


@frozen(kw_only=True)
class BatchProgress:
    """Where a batch is while it waits (told after every poll)."""

    done: int
    total: int
    failed: int
    running: int
    input_tokens: int
    output_tokens: int


@frozen(kw_only=True)
class BatchReport:
    """A finished batch: every run's end, in the goals file's order."""

    results: tuple[BatchRun, ...]
    database_url: str

    @property
    def statuses(self) -> tuple[str, ...]:
        return tuple(r.status for r in self.results)

    @property
    def awaiting_approval(self) -> bool:
        return any(r.status == "awaiting_approval" for r in self.results)


class BatchWatcher:
    """Told what a batch does as it goes; every method does nothing here (subclass it)."""

    def warn(self, line: str) -> None:
        """Something the user should know that does not stop the batch (a database found
        in the workspace and not opened, a run refused or run on trust)."""

    def finished(self, result: BatchRun, count: int, total: int) -> None:
        """A run ended: the `count`th of `total`."""

    def progress(self, progress: BatchProgress) -> None:
        """The batch after one more poll of its runs."""


@frozen(kw_only=True)
class WorkerStopped:
    """A worker stopped (SIGINT/SIGTERM or its `stop` event): it has marked itself dead, so
    the other workers take its runs in flight; the process should end right away, so no run
    goes on here while another worker takes it. `error`: why the worker could not mark
    itself dead (the database was unreachable): the others take its runs once its
    heartbeat is `dead_after` old."""

    name: str
    log_root: Path
    error: str | None = None


@frozen(kw_only=True)
class Submitted:
    """The runs a submit queued, in the order they were queued."""

    run_ids: tuple[str, ...]


@frozen(kw_only=True)
class Queued:
    """A fleet run queued to resume (`ruizn resume --db`), with the limits it goes on with
    and the decisions it carries."""

    run_id: str
    workflow_id: str
    limits: Limits
    approve: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


@frozen(kw_only=True)
class NothingQueued:
    """A resume with nothing to do (the run has ended with success, say): said, not an
    error, as a local resume of it."""

    run_id: str
    message: str
