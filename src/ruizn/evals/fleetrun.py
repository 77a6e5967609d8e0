"""An eval's runs on the fleet: each epoch of each case is one run of a fleet batch (`run_batch`,
fleet/batch.py), queued on DBOS, signed with the user's fleet key, stored as a normal run
folder; the eval's `--max-cost` is the batch's budget. Each run's end is read back from the
database's log of it (the truth, whichever worker ran it), for the eval to score.

The batch's goals file is written in the eval's folder (one line a trial, its id, goal,
workspace and settings): the record of what was queued."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
from attrs import frozen

from ruizn.evals.dataset import Case
from ruizn.settings import ConfigError, settings_from
from ruizn.shell.outcome import RunResult, Session
from ruizn.state import Status

__all__ = ["FleetEnd", "FleetJob", "in_background", "run_on_fleet"]

T = TypeVar("T")


@frozen(kw_only=True)
class FleetJob:
    """One trial to queue: its run's id, goal (the case's), workspace and settings."""

    case: Case
    epoch: int
    run_id: str
    workspace: Path
    settings: Mapping[str, Any]


@frozen(kw_only=True)
class FleetEnd:
    """How a queued trial ended: its run's result, or why there is none (`not_run`: the
    eval's budget was spent before it started)."""

    job: FleetJob
    result: RunResult | None = None
    not_run: bool = False
    reason: str | None = None


def run_on_fleet(
    jobs: Sequence[FleetJob],
    *,
    folder: Path,
    runs: Path,
    concurrency: int,
    max_cost: float | None,
    database: str | None,
    tools: Sequence[Any],
    warn: Callable[[str], None],
) -> tuple[list[FleetEnd], float]:
    """Run `jobs` as one fleet batch (on `database` when given, where `ruizn worker --db`
    processes run them; else in this process, on the user's own batch database) and return
    each one's end,
    in order, and what their runs cost. Blocks until every run has ended. Raises ConfigError
    when the batch cannot start (the fleet's one line)."""
    from ruizn.fleet.batch import run_batch
    from ruizn.fleet.errors import FleetRefused
    from ruizn.fleet.reports import BatchOptions, BatchWatcher

    class Watcher(BatchWatcher):
        def warn(self, line: str) -> None:
            warn(line)

    goals = folder / "goals.jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    goals.write_text("".join(_line(job) + "\n" for job in jobs), encoding="utf-8")
    options = BatchOptions(
        goals=str(goals),
        settings=settings_from(),
        # On a fleet's database its workers run them all, at the workers' --concurrency.
        concurrency=0 if database is not None else concurrency,
        workspace=str(folder),
        log_dir=str(runs),
        batch_max_cost=max_cost,
        database=database,
        # Its own executor id: no later batch or eval recovers this eval's runs.
        worker=f"eval-{folder.name}",
    )
    given = tuple(tools)
    if database is not None:
        from ruizn.fleet.database import safe_url

        warn(
            f"{len(jobs)} runs queued on {safe_url(database)}: the fleet's workers"
            " (`ruizn worker --db URL`) run them"
        )
    try:
        report = run_batch(options, Watcher(), tools=(lambda _w: given) if given else None)
    except FleetRefused as exc:
        raise ConfigError(str(exc)) from None
    ends = _gathered(jobs, report.database_url, runs, [r.error for r in report.results])
    return ends, sum(r.cost or 0.0 for r in report.results)


def _line(job: FleetJob) -> str:
    body = {**job.settings, "id": job.run_id, "goal": job.case.goal}
    body["workspace"] = str(job.workspace)
    try:
        return json.dumps(body)
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"case {job.case.name!r}: its run settings cannot be queued as JSON ({exc})"
        ) from None


def _gathered(
    jobs: Sequence[FleetJob], url: str, runs: Path, errors: Sequence[str | None]
) -> list[FleetEnd]:
    """Each job's end, from the database: its log exported to the eval's runs folder (the
    worker that ran it may have kept its own copy elsewhere) and replayed."""
    from ruizn.effects.runlog.reader import LogError
    from ruizn.effects.runlog.store import RunRef
    from ruizn.fleet.database import EventStore
    from ruizn.fleet.dbstore import DbRunStore

    events = EventStore(url)
    store = DbRunStore(events, runs)
    ends: list[FleetEnd] = []
    try:
        for job, error in zip(jobs, errors, strict=True):
            if not events.has_run(job.run_id):
                not_run = bool(error and error.startswith("not started:"))
                ends.append(FleetEnd(job=job, not_run=not_run, reason=error or "not run"))
                continue
            path = store.export(job.run_id)
            try:
                state = store.load(RunRef(run_id=job.run_id, path=path)).state
            except LogError as exc:
                ends.append(FleetEnd(job=job, reason=str(exc)))
                continue
            if state.status is Status.RUNNING:  # its workflow ended without its run
                ends.append(FleetEnd(job=job, reason=error or "the run did not finish"))
                continue
            ends.append(FleetEnd(job=job, result=Session.of(state, job.run_id, path)))
    finally:
        events.close()
    return ends


async def in_background(work: Callable[[], T]) -> T:
    """`work()` in a daemon thread, awaited. Cancelled (Ctrl-C), the eval ends at once: the
    runs in flight stop where they are, as a batch's do, and nobody recovers them (the
    eval's executor id is its own); a worker thread of anyio's would hold the process until
    every run had ended."""
    box: dict[str, Any] = {}
    done = anyio.Event()
    token = anyio.lowlevel.current_token()

    def target() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the awaiting task, raised there
            box["error"] = exc
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
                anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(target=target, name="ruizn-eval-fleet", daemon=True).start()
    await done.wait()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value
