"""`ruizn batch GOALS.jsonl`: a fleet of one machine, on SQLite in the user's state directory.

A library: `run_batch` returns a `BatchReport` and tells a `BatchWatcher` as it goes; it
prints nothing and raises `FleetRefused` when it cannot start (cli/fleet_printer.py
draws it)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import evolve, frozen

from ruizn.defaults import TEST_MODEL
from ruizn.effects.runlog.folder import make_root
from ruizn.fleet.errors import BatchInterrupted, FleetRefused, need_fleet_extra
from ruizn.fleet.reports import BatchOptions, BatchProgress, BatchReport, BatchRun, BatchWatcher

if TYPE_CHECKING:  # the driver imports the database's modules: only when a batch runs
    from ruizn.fleet.driver import RunInput, ToolsFactory
    from ruizn.fleet.helpers import Helpers, HelperStart
    from ruizn.fleet.signing import FleetKey

__all__ = ["BATCH_WORKER", "budget_name", "database_of", "run_batch"]

# Batch runs belong to one fixed executor id: a batch started again recovers them.
BATCH_WORKER = "batch"


def run_batch(
    options: BatchOptions,
    watcher: BatchWatcher | None = None,
    *,
    tools: ToolsFactory | None = None,
    helper: HelperStart | None = None,
) -> BatchReport:
    """Run the goals of `options.goals`; return each run's end, in the file's order.

    A run that waits for approval (nobody is asked) ends `awaiting_approval`; `ruizn resume
    --db URL RUN --approve ...` (URL: the report's `database_url`) queues it with the
    decisions, and the next batch of the file runs what is queued and reports the run's
    last end. Started again with the same file, a batch resumes: finished runs are not run
    again.

    The batch's database lives in the user's state directory, keyed by the log root, never
    in the workspace (`database_of`); every run is signed with the user's fleet key, and
    only signed runs and proven results count (fleet/signing.py). Ctrl-C while it waits
    raises `BatchInterrupted` (the runs in flight stop where they are). `tools`: extra
    tools, in memory, for the runs this process takes (beside `options.tools_from`'s).
    `helper`: starts a helper process (fleet/helpers.py; the CLI's); without it every run
    is this process's."""
    watcher = watcher or BatchWatcher()
    need_fleet_extra()
    from ruizn.effects.runlog.store import default_root
    from ruizn.fleet.app import remember
    from ruizn.fleet.driver import RunInput, ToolsFromError, load_tools_factory
    from ruizn.fleet.goals import GoalsError, read_goals, unkept_budget
    from ruizn.fleet.signing import FleetKey, FleetKeyError

    folder = Path(options.workspace).resolve()
    settings = evolve(options.settings, workspace=str(folder))
    defaults = RunInput(run_id="", goal="", settings=settings)
    path = Path(options.goals)
    try:
        key = FleetKey.of_user(os.environ)
    except FleetKeyError as exc:
        raise FleetRefused(str(exc)) from None
    try:
        specs = read_goals(path, defaults, digest=key.digest)
        tools = _both(load_tools_factory(options.tools_from), tools)
    except (GoalsError, ToolsFromError) as exc:
        raise FleetRefused(str(exc)) from None
    unkept = unkept_budget(specs, options.batch_max_cost)
    if unkept is not None:
        raise FleetRefused(unkept)
    offline = all(s.settings.model == TEST_MODEL for s in specs)
    if not offline and not os.environ.get("ANTHROPIC_API_KEY"):
        raise FleetRefused(
            "ANTHROPIC_API_KEY is not set: set it, or give the runs model 'test' (offline)"
        )
    root = default_root(folder, options.log_dir).resolve()
    try:
        make_root(root)
    except OSError as exc:
        raise FleetRefused(f"cannot create the log dir {root}: {exc.strerror or exc}") from None
    url = options.database or _own_database(root, watcher)
    # Helper processes take part of the slots on the batch's own database (on one of the
    # user's choosing, its workers do). Forked now: after the imports, before the database
    # is opened (a SQLite connection must not cross a fork).
    remember(offline=offline)
    helpers, own = (
        _helpers(options, url=url, root=root, folder=folder, watcher=watcher, start=helper)
        if options.database is None and helper is not None
        else (None, options.concurrency)
    )
    plan = _Plan(
        specs=tuple(specs), key=key, offline=offline, folder=folder, root=root, url=url, tools=tools
    )
    try:
        return _batch(options, watcher, plan, helpers, own)
    finally:
        if helpers is not None:
            helpers.stop()


@frozen(kw_only=True)
class _Plan:
    """A batch checked and ready to start: its runs, the user's key, where it writes."""

    specs: tuple[RunInput, ...]
    key: FleetKey
    offline: bool
    folder: Path  # the workspace, resolved
    root: Path
    url: str
    tools: ToolsFactory | None


def _batch(
    options: BatchOptions,
    watcher: BatchWatcher,
    plan: _Plan,
    helpers: Helpers | None,
    own: int,
) -> BatchReport:
    from dbos import DBOS, SetWorkflowID

    from ruizn.fleet.app import (
        QUEUE,
        TERMINAL,
        launch,
        migrate,
        polling_for,
        queue_polling_for,
        run_workflow,
        shutdown,
    )
    from ruizn.fleet.database import EventStore, StoreUnreachable
    from ruizn.fleet.driver import input_to_json
    from ruizn.fleet.helpers import requeue_orphans

    specs, key, url, root, folder = plan.specs, plan.key, plan.url, plan.root, plan.folder
    try:
        store = EventStore(url)
    except StoreUnreachable as exc:
        raise FleetRefused(str(exc)) from None
    if options.batch_max_cost is not None:
        # The whole batch's budget (each run's own is its settings' max_cost): started
        # again with the same file, the batch goes on with what its runs have spent.
        store.open_budget(
            budget_name(Path(options.goals)),
            options.batch_max_cost,
            [spec.run_id for spec in specs],
        )
    if helpers is not None:
        migrate(url, store)  # the schema is whole before a helper opens the database
        helpers.go()
    launch(
        url,
        store=store,
        log_root=root,
        worker=options.worker or BATCH_WORKER,
        concurrency=own,
        tools=plan.tools,
        workspace=str(folder),
        polling=queue_polling_for(own),
        mcp_headers=options.mcp_headers,
        key=key,
        trust=options.trust,
        warn=watcher.warn,
        offline=plan.offline,
        children=any(spec.settings.subagents for spec in specs),
    )
    if options.database is None:  # helpers run on the batch's own database only
        requeue_orphans(helpers.workers if helpers is not None else ())
    if helpers is not None:
        helpers.launched()
        helpers.ready()
    try:
        signed = {spec.run_id: key.signed(input_to_json(spec)) for spec in specs}
        for spec in specs:
            if options.database is not None:
                store.note_submitted(spec.run_id, goal=spec.goal)  # as `submit` notes it
            with SetWorkflowID(spec.run_id):
                DBOS.enqueue_workflow(QUEUE, run_workflow, signed[spec.run_id])
        goals_by_id = {spec.run_id: spec.goal for spec in specs}
        # A workflow already under a run's id counts only if it is what this batch queues.
        strangers = _not_ours(DBOS, signed, key)
        latest = _latest(DBOS, [r for r in goals_by_id if r not in strangers], key)
        results = _wait(
            DBOS,
            goals_by_id,
            latest,
            TERMINAL,
            key,
            watcher=watcher,
            done=strangers,
            interval=polling_for(options.concurrency),
        )
    except KeyboardInterrupt:
        # Runs in flight stop where they are, as after kill -9: the next batch resumes them.
        raise BatchInterrupted(options.goals) from None
    shutdown()
    store.close()
    return BatchReport(
        results=tuple(BatchRun.of(r, goals_by_id[r], results[r]) for r in goals_by_id),
        database_url=url,
    )


def _own_database(root: Path, watcher: BatchWatcher) -> str:
    """The URL of the batch's own SQLite database, in the user's state directory."""
    planted = root / "fleet.sqlite"
    database = database_of(root, os.environ)
    if planted.exists():
        # Where batches kept it before: now it may only be a file that came with the
        # workspace, so it is data, never opened (a person may still name it: --db).
        watcher.warn(
            f"not opening {planted}: a database found in the workspace is not this user's;"
            f" the batch's database is {database}"
        )
    try:
        database.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise FleetRefused(
            f"cannot create the batch's database folder {database.parent}: {exc.strerror}"
        ) from None
    return f"sqlite:///{database}"


def _both(first: ToolsFactory | None, second: ToolsFactory | None) -> ToolsFactory | None:
    """One factory giving the tools of both."""
    if first is None or second is None:
        return first or second
    return lambda workspace: [*first(workspace), *second(workspace)]


def _helpers(
    options: BatchOptions,
    *,
    url: str,
    root: Path,
    folder: Path,
    watcher: BatchWatcher,
    start: HelperStart,
) -> tuple[Helpers | None, int]:
    """(the helper processes or None, the slots of the batch's own process). None also when
    the process already has other threads: a fork copies only the one that forks, with any
    lock another held (nothing of ruizn's starts one before; a library user's might)."""
    import threading

    from ruizn.fleet.app import queue_polling_for
    from ruizn.fleet.helpers import HelperConfig, Helpers, helper_count, split

    count = helper_count(options.concurrency)
    if count == 0 or threading.active_count() > 1:
        return None, options.concurrency
    own, each = split(options.concurrency, count)
    config = HelperConfig(
        url=url,
        log_root=str(root),
        workspace=str(folder),
        tools_from=options.tools_from,
        concurrency=each,
        polling=queue_polling_for(each),
        trust=options.trust,
        mcp_headers=options.mcp_headers,
    )
    return Helpers(count, config, watcher.warn, start), own


def database_of(root: Path, environ: Any) -> Path:
    """The batch database of a log root: in the user's state directory, outside every
    workspace, one per log root (so one per workspace by default)."""
    import hashlib

    from ruizn.effects.userconfig.dirs import state_dir

    digest = hashlib.sha256(str(root.resolve()).encode("utf-8", "surrogateescape")).hexdigest()
    return state_dir(environ) / "batch" / digest[:32] / "fleet.sqlite"


def _stored_input(status: Any) -> Any:
    stored = status.input
    args = stored.get("args") if isinstance(stored, dict) else None
    return args[0] if isinstance(args, list | tuple) and args else None


def _same(stored: Any, signed: dict[str, Any]) -> bool:
    """Whether a stored input is the signed one (as JSON: lists and tuples alike)."""
    from ruizn.fleet.signing import canonical

    try:
        return isinstance(stored, dict) and canonical(stored) == canonical(signed)
    except (TypeError, ValueError):
        return False


def _not_ours(dbos: Any, signed: dict[str, dict[str, Any]], key: Any) -> dict[str, dict[str, Any]]:
    """Runs whose id holds a workflow this batch did not queue: another key's (or none), or
    this user's for another goal. Their results, never waited on or believed. A run this
    user's key queued for the same goal is this batch's, with the settings it was queued
    with (a batch started again with other options goes on with each run's own)."""
    strangers: dict[str, dict[str, Any]] = {}
    ids = list(signed)
    for start in range(0, len(ids), _PREFIXES_PER_QUERY):
        chunk = ids[start : start + _PREFIXES_PER_QUERY]
        for status in dbos.list_workflows(workflow_ids=chunk, load_output=False):
            stored = _stored_input(status)
            mine = signed[status.workflow_id]
            if _same(stored, mine):
                continue
            if (
                isinstance(stored, dict)
                and key.verify(stored)
                and stored.get("run_id") == mine["run_id"]
                and stored.get("goal") == mine["goal"]
            ):
                continue
            why = "the batch's database holds another run under this id: not run"
            strangers[status.workflow_id] = {"status": "error", "error": why}
    return strangers


def budget_name(goals: Path) -> str:
    """The batch budget's id: the goals file's name and a digest of its whole path."""
    import hashlib

    digest = hashlib.sha256(str(goals.resolve()).encode()).hexdigest()[:8]
    return f"{goals.name[:120]}#{digest}"


# Run ids per query when looking for resumes: a LIKE each, so a long file asks in slices.
_PREFIXES_PER_QUERY = 200


def _latest(dbos: Any, run_ids: list[str], key: Any) -> dict[str, str]:
    """Run id -> the workflow whose end is the run's end: its last resume (`RUN/resume-K`,
    queued by `ruizn resume --db`), else its own. A resume is queued only once the run's
    earlier workflows have ended, so the last one is the only one to wait for. Only
    resumes signed with the user's key, for that very run, count."""
    from ruizn.fleet.resume import latest_resume, resume_prefix

    def ours(status: Any, run_ids: list[str]) -> bool:
        order = _stored_input(status)
        if not (isinstance(order, dict) and key.verify(order)):
            return False
        run = order.get("run")
        return isinstance(run, dict) and status.workflow_id.startswith(
            resume_prefix(str(run.get("run_id")))
        )

    latest = dict(zip(run_ids, run_ids, strict=True))
    for start in range(0, len(run_ids), _PREFIXES_PER_QUERY):
        chunk = run_ids[start : start + _PREFIXES_PER_QUERY]
        found = [
            w.workflow_id
            for w in dbos.list_workflows(
                workflow_id_prefix=[resume_prefix(run_id) for run_id in chunk],
                load_output=False,
            )
            if ours(w, chunk)
        ]
        for run_id in chunk:
            latest[run_id] = latest_resume(run_id, found) or run_id
    return latest


def _wait(
    dbos: Any,
    goals: dict[str, str],
    latest: dict[str, str],
    terminal: frozenset[str],
    key: Any,
    *,
    watcher: BatchWatcher,
    done: dict[str, dict[str, Any]],
    interval: float = 0.1,
) -> dict[str, dict[str, Any]]:
    """Each run's result, the watcher told of each as it ends and of the batch after each
    poll. A result counts only with the proof of the user's key for the input it ran
    (`done`: the runs already settled). Every `interval` seconds it reads the statuses
    alone (`statuses_of`), and the inputs and outputs only of the runs that ended since."""
    from ruizn.fleet.app import statuses_of

    run_of = {workflow_id: run_id for run_id, workflow_id in latest.items()}
    ids = list(run_of)
    done = dict(done)
    total = len(ids) + len(done)
    for count, (run_id, result) in enumerate(done.items(), start=1):
        watcher.finished(BatchRun.of(run_id, goals[run_id], result), count, total)
    while len(done) < total:
        statuses = statuses_of([w for w in ids if run_of[w] not in done])
        running = sum(status == "PENDING" for status in statuses.values())
        ended = [w for w, status in statuses.items() if status in terminal]
        for status in dbos.list_workflows(workflow_ids=ended) if ended else ():
            run_id = run_of[status.workflow_id]
            if status.status not in terminal:  # an end is for good: not seen, not counted
                continue
            done[run_id] = _result(status, key)
            watcher.finished(BatchRun.of(run_id, goals[run_id], done[run_id]), len(done), total)
        watcher.progress(
            BatchProgress(
                done=len(done),
                total=total,
                failed=sum(r.get("status") != "success" for r in done.values()),
                running=running,
                input_tokens=sum(int(r.get("input_tokens") or 0) for r in done.values()),
                output_tokens=sum(int(r.get("output_tokens") or 0) for r in done.values()),
            )
        )
        if len(done) < total:
            time.sleep(interval)
    return done


def _result(status: Any, key: Any) -> dict[str, Any]:
    """A terminal workflow's result, believed only with the key's proof for its input."""
    signature = _stored_input(status)
    signature = signature.get("signature") if isinstance(signature, dict) else None
    if status.status == "SUCCESS" and isinstance(status.output, dict):
        result = dict(status.output)
        if not (isinstance(signature, str) and key.proven(signature, result)):
            result = {"status": "error", "error": "a result not proven by this key"}
        result.pop("proof", None)
        return result
    return {"status": "error", "error": f"{status.status}: {status.error}"}
