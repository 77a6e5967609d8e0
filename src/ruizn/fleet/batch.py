"""`ruizn batch GOALS.jsonl`: a fleet of one machine, on SQLite under the log dir."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from attrs import evolve

from ruizn.fleet.errors import fail, need_fleet_extra
from ruizn.fleet.worker import shown
from ruizn.format import counted, human_seconds, tokens, usd
from ruizn.settings import RunSettings

# Batch runs belong to one fixed executor id: a batch started again recovers them.
BATCH_WORKER = "batch"


def batch(
    goals: str,
    *,
    concurrency: int,
    workspace: str,
    log_dir: str | None,
    tools_from: str | None,
    settings: RunSettings,
    mcp_headers: tuple[str, ...] = (),
    trust: bool = False,
) -> tuple[str, ...]:
    """Run the goals; return each run's status (the CLI turns them into the exit code).

    `mcp_headers` (`NAME:KEY=VALUE`) are the header values given on the command line: the
    runs get them in memory, never through the database (the settings record the names). A
    run that waits for approval (nobody is asked) ends `awaiting_approval`; `ruizn resume
    --db URL RUN --approve ...` (the batch prints URL) queues it with the decisions, and the
    next `ruizn batch` of the file runs what is queued and reports the run's last end.

    The batch's database lives in the user's state directory, keyed by the log root, never
    in the workspace (`database_of`); every run is signed with the user's fleet key, and
    only signed runs and proven results count (fleet/signing.py). `trust`: queued runs the
    key did not sign are run too, after their grant is shown."""
    need_fleet_extra()
    from dbos import DBOS, SetWorkflowID

    from ruizn.effects.runlog.store import default_root
    from ruizn.fleet.app import QUEUE, TERMINAL, launch, run_workflow, shutdown
    from ruizn.fleet.database import EventStore, StoreUnreachable
    from ruizn.fleet.driver import RunInput, ToolsFromError, input_to_json, load_tools_factory
    from ruizn.fleet.goals import GoalsError, read_goals
    from ruizn.fleet.signing import FleetKey, FleetKeyError

    folder = Path(workspace).resolve()
    defaults = RunInput(run_id="", goal="", settings=evolve(settings, workspace=str(folder)))
    path = Path(goals)
    try:
        key = FleetKey.of_user(os.environ)
    except FleetKeyError as exc:
        fail(str(exc))
    try:
        specs = read_goals(path, defaults, digest=key.digest)
        tools = load_tools_factory(tools_from)
    except (GoalsError, ToolsFromError) as exc:
        fail(str(exc))
    if any(s.settings.model != "test" for s in specs) and not os.environ.get("ANTHROPIC_API_KEY"):
        fail("ANTHROPIC_API_KEY is not set: set it, or give the runs model 'test' (offline)")
    root = default_root(folder, log_dir).resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"cannot create the log dir {root}: {exc.strerror or exc}")
    planted = root / "fleet.sqlite"
    database = database_of(root, os.environ)
    if planted.exists():
        # Where batches kept it before: now it may only be a file that came with the
        # workspace, so it is data, never opened (a person may still name it: --db).
        _warn(
            f"not opening {planted}: a database found in the workspace is not this user's;"
            f" the batch's database is {database}"
        )
    try:
        database.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        fail(f"cannot create the batch's database folder {database.parent}: {exc.strerror}")
    url = f"sqlite:///{database}"
    try:
        store = EventStore(url)
    except StoreUnreachable as exc:
        fail(str(exc))
    if settings.max_cost is not None:
        # --max-cost is each run's budget and, here, the whole batch's: started again with
        # the same file, the batch goes on with what its runs have spent.
        store.open_budget(budget_name(path), settings.max_cost, [spec.run_id for spec in specs])
    launch(
        url,
        store=store,
        log_root=root,
        worker=BATCH_WORKER,
        concurrency=concurrency,
        tools=tools,
        workspace=str(folder),
        polling=0.02,  # a slot that frees up waits 10 ms for its next run, on average
        mcp_headers=mcp_headers,
        key=key,
        trust=trust,
        warn=_warn,
    )
    try:
        signed = {spec.run_id: key.signed(input_to_json(spec)) for spec in specs}
        for spec in specs:
            with SetWorkflowID(spec.run_id):
                DBOS.enqueue_workflow(QUEUE, run_workflow, signed[spec.run_id])
        goals_by_id = {spec.run_id: spec.goal for spec in specs}
        # A workflow already under a run's id counts only if it is what this batch queues.
        strangers = _not_ours(DBOS, signed, key)
        latest = _latest(DBOS, [r for r in goals_by_id if r not in strangers], key)
        results = _wait(DBOS, goals_by_id, latest, TERMINAL, key, done=strangers)
    except KeyboardInterrupt:
        print(
            f"ruizn: batch interrupted; run `ruizn batch {goals}` again to resume",
            file=sys.stderr,
            flush=True,
        )
        # Runs in flight stop where they are, as after kill -9: the next batch resumes them.
        os._exit(130)
    _summary(results, goals_by_id)
    if any(r.get("status") == "awaiting_approval" for r in results.values()):
        print(f"decide with: ruizn resume --db {url} RUN --approve ID|all (or --deny)")
    shutdown()
    store.close()
    return tuple(str(r.get("status")) for r in results.values())


def database_of(root: Path, environ: Any) -> Path:
    """The batch database of a log root: in the user's state directory, outside every
    workspace, one per log root (so one per workspace by default)."""
    import hashlib

    from ruizn.effects.userconfig.dirs import state_dir

    digest = hashlib.sha256(str(root.resolve()).encode("utf-8", "surrogateescape")).hexdigest()
    return state_dir(environ) / "batch" / digest[:32] / "fleet.sqlite"


def _warn(line: str) -> None:
    print(f"ruizn: {shown(line)}", file=sys.stderr, flush=True)


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


def _cost(result: dict[str, Any]) -> float | None:
    cost = result.get("cost")
    return float(cost) if isinstance(cost, int | float) else None


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
    done: dict[str, dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """One line per finished run; on a terminal, also a bar that is redrawn in place. A
    result counts only with the proof of the user's key for the input it ran (`done`: the
    runs already settled)."""
    run_of = {workflow_id: run_id for run_id, workflow_id in latest.items()}
    ids = list(run_of)
    done = dict(done)
    total = len(ids) + len(done)
    width = len(str(total))
    for count, (run_id, result) in enumerate(done.items(), start=1):
        print(f"[{count:>{width}}/{total}] {_row(run_id, result)}", flush=True)
    bar = sys.stdout.isatty()
    while len(done) < total:
        running = 0
        for status in dbos.list_workflows(workflow_ids=ids):
            run_id = run_of[status.workflow_id]
            if status.status == "PENDING":
                running += 1
            if run_id in done or status.status not in terminal:
                continue
            signature = _stored_input(status)
            signature = signature.get("signature") if isinstance(signature, dict) else None
            if status.status == "SUCCESS" and isinstance(status.output, dict):
                result = dict(status.output)
                if not (isinstance(signature, str) and key.proven(signature, result)):
                    result = {"status": "error", "error": "a result not proven by this key"}
                result.pop("proof", None)
            else:
                result = {"status": "error", "error": f"{status.status}: {status.error}"}
            done[run_id] = result
            line = f"[{len(done):>{width}}/{total}] {_row(run_id, result)}"
            if bar:  # a line longer than the terminal would wrap, and the bar with it
                from ruizn.shell.table import clip, terminal_width

                line = "\r\x1b[K" + clip(line, terminal_width() or len(line))
            print(line, flush=True)
        if bar:
            failed = sum(r.get("status") != "success" for r in done.values())
            used_in = sum(int(r.get("input_tokens") or 0) for r in done.values())
            used_out = sum(int(r.get("output_tokens") or 0) for r in done.values())
            from ruizn.shell.table import clip, terminal_width

            progress = (
                f"{len(done)}/{total} done · {failed} failed · {running} running"
                f" · in {tokens(used_in)} out {tokens(used_out)} tok"
            )
            sys.stdout.write("\r\x1b[K" + clip(progress, (terminal_width() or 999) - 1))
            sys.stdout.flush()
        if len(done) < total:
            time.sleep(0.1)
    if bar:
        sys.stdout.write("\r\x1b[K")
    return done


def _row(run_id: str, result: dict[str, Any]) -> str:
    parts = [run_id, str(result.get("status"))]
    if "steps" in result:
        parts.append(counted(int(result["steps"]), "step"))
        parts.append(human_seconds(float(result.get("elapsed") or 0.0)))
        parts.append(
            f"in {tokens(int(result.get('input_tokens') or 0))}"
            f" out {tokens(int(result.get('output_tokens') or 0))}"
        )
        parts.append(usd(_cost(result)))
    if result.get("error"):
        parts.append(" ".join(str(result["error"]).split())[:120])
    return shown(" · ".join(parts))


def _summary(results: dict[str, dict[str, Any]], goals: dict[str, str]) -> None:
    counts: dict[str, int] = {}
    for result in results.values():
        counts[str(result.get("status"))] = counts.get(str(result.get("status")), 0) + 1
    print()
    # The same table as `ruizn runs`: it fits the terminal, and piped every row is whole.
    from ruizn.shell.table import Column, render, terminal_width

    columns = (
        Column(title="RUN", width=28),
        Column(title="STATUS", width=10),
        Column(title="STEPS", right=True, width=5, drop=1),
        Column(title="TIME", right=True, width=7, drop=3),
        Column(title="IN", right=True, width=8, drop=5),
        Column(title="OUT", right=True, width=7, drop=4),
        Column(title="COST", right=True, width=12, drop=2),
    )
    rows = []
    for run_id in goals:
        r = results[run_id]
        rows.append(
            [
                shown(run_id),
                shown(str(r.get("status"))),
                str(r.get("steps", "")),
                human_seconds(float(r.get("elapsed") or 0.0)),
                tokens(int(r.get("input_tokens") or 0)),
                tokens(int(r.get("output_tokens") or 0)),
                usd(_cost(r)) if "steps" in r else "",
            ]
        )
    lasts = [" ".join(shown(goal).split()) for goal in goals.values()]
    for line in render(columns, rows, last="GOAL", lasts=lasts, width=terminal_width()):
        print(line)
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    print(f"\nbatch: {counted(len(results), 'run')}: {summary}", flush=True)
