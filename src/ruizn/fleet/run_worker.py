"""`ruizn worker`, `ruizn submit`, and the reading commands against the fleet's database."""

from __future__ import annotations

import os
import signal
import socket
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from ruizn.fleet.errors import fail, need_fleet_extra
from ruizn.terminal import visible


def shown(text: str) -> str:
    """Text from the database, another worker or a plug-in, as one inert line: run ids,
    goals and worker names may hold anything a DBOS client or an older ruizn stored."""
    return visible(" ".join(text.split()))


def _store(db: str) -> Any:
    need_fleet_extra()
    from ruizn.fleet.store import EventStore, StoreUnreachable

    try:
        return EventStore(db)
    except StoreUnreachable as exc:
        fail(str(exc))


def work(
    db: str,
    *,
    worker_id: str | None,
    dead_after: float,
    concurrency: int,
    workspace: str,
    log_dir: str | None,
    tools_from: str | None,
) -> int:
    store = _store(db)
    from dbos import DBOS

    from ruizn.fleet.app import QUEUE, launch
    from ruizn.fleet.driver import ToolsFromError, load_tools_factory
    from ruizn.fleet.store import StoreUnreachable
    from ruizn.store import default_root

    try:
        tools = load_tools_factory(tools_from)
    except ToolsFromError as exc:
        fail(str(exc))
    name = worker_id or f"{socket.gethostname()}-{os.getpid()}"
    folder = Path(workspace).resolve()
    root = default_root(folder, log_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)

    def say(message: str) -> None:
        print(shown(f"[worker {name}] {message}"), flush=True)

    stop = threading.Event()
    launched = threading.Event()

    def take_over(dead: str) -> None:
        pending = DBOS.list_workflows(
            status="PENDING", executor_id=dead, load_input=False, load_output=False
        )
        for status in pending:
            # Back on the queue: the first live executor to dequeue it runs it; DBOS's
            # ENQUEUED -> PENDING dequeue admits exactly one.
            DBOS.resume_workflow(status.workflow_id, queue_name=QUEUE)
        store.forget_worker(dead)
        say(f"worker {dead} is silent for {dead_after:g}s: {len(pending)} runs back on the queue")

    def beat() -> None:
        interval = max(min(dead_after / 3, 5.0), 0.2)
        while not stop.wait(interval):
            try:
                store.heartbeat(name)
                if launched.is_set():
                    for dead in store.claim_dead(name, dead_after):
                        take_over(dead)
            except Exception as exc:  # the database may blink; the next beat tries again
                say(f"heartbeat failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")

    # Beating before DBOS starts taking work, and all through its start-up (seconds on a
    # busy machine): a worker that runs anything is never seen silent by the others.
    store.heartbeat(name)
    beater = threading.Thread(target=beat, name="ruizn-heartbeat", daemon=True)
    beater.start()
    try:
        launch(
            db,
            store=store,
            log_root=root,
            worker=name,
            concurrency=concurrency,
            tools=tools,
            workspace=str(folder),
            polling=0.2,
            announce=say,
        )
    except StoreUnreachable as exc:  # another process held the schema lock too long
        fail(str(exc))
    # Loaded now, not by the first run: a run taken over from a dead worker should not
    # wait a second more for the SDK's import.
    import ruizn.effects.anthropic_provider  # noqa: F401

    launched.set()
    say(f"ready · concurrency {concurrency} · logs {root}")
    signals = [signal.SIGINT, signal.SIGTERM]
    for sig in signals:
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    # Hand the runs in flight back at once: a heartbeat of 0 makes this worker dead for
    # every other one, whose next beat puts its runs back on the queue. The process ends
    # right after, so no run goes on here while another worker takes it.
    try:
        store.mark_dead(name)
    finally:
        say("stopped; runs in flight go to the other workers")
        sys.stdout.flush()
        os._exit(130)


def submit(
    db: str,
    goals: str | None,
    goal: str | None,
    *,
    workspace: str | None,
    model: str,
    max_steps: int,
    max_tokens: int,
    system: str,
    read_timeout: float,
    max_retries: int,
) -> int:
    if (goals is None) == (goal is None):
        fail("give GOALS.jsonl or --goal TEXT (one of them)")
    if goal is not None and not goal.strip():
        fail("--goal must not be empty")
    need_fleet_extra()
    from ruizn.fleet.driver import RunSpec
    from ruizn.fleet.goals import GoalsError, read_goals, spec_to_json
    from ruizn.store import new_run_id

    defaults = RunSpec(
        run_id="",
        goal=goal or "",
        model=model,
        max_steps=max_steps,
        max_tokens=max_tokens,
        system=system,
        workspace=workspace or "",
        read_timeout=read_timeout,
        max_retries=max_retries,
    )
    if goals is not None:
        try:
            # A file submitted twice is two batches: the ids carry the submission's time.
            specs = read_goals(Path(goals), defaults, id_prefix=new_run_id(), local=False)
        except GoalsError as exc:
            fail(str(exc))
    else:
        specs = [RunSpec(**{**spec_to_json(defaults), "run_id": new_run_id()})]
    store = _store(db)
    from dbos import WorkflowSerializationFormat

    from ruizn.fleet.app import APP_VERSION, QUEUE, WORKFLOW

    client = _client(db, store)
    try:
        for spec in specs:
            store.note_submitted(spec.run_id, goal=spec.goal)
            client.enqueue(
                {
                    "queue_name": QUEUE,
                    "workflow_name": WORKFLOW,
                    "workflow_id": spec.run_id,
                    "app_version": APP_VERSION,
                    "serialization_type": WorkflowSerializationFormat.PORTABLE,
                },
                spec_to_json(spec),
            )
            print(spec.run_id, flush=True)
    finally:
        client.destroy()
        store.close()
    return 0


def _client(db: str, store: Any) -> Any:
    from dbos import DBOSClient

    from ruizn.fleet.app import migrate, quiet_dbos

    quiet_dbos()
    try:
        migrate(db, store)  # the queue's tables, if no worker has started yet
        return DBOSClient(system_database_url=db)
    except Exception as exc:
        fail(f"cannot reach the database: {str(exc).splitlines()[0][:200]}")


def resume_db(
    db: str,
    run: str,
    *,
    max_steps: int | None,
    max_tokens: int | None,
    read_timeout: float | None,
) -> int:
    """`ruizn resume --db`: check the run can go on, then queue an order for the workers (see
    fleet/resume.py). Nothing is written or queued when it cannot."""
    store = _store(db)
    client = _client(db, store)
    try:
        plan = _queue_resume(
            store,
            client,
            run,
            max_steps=max_steps,
            max_tokens=max_tokens,
            read_timeout=read_timeout,
            where=_safe(db),
        )
    finally:
        client.destroy()
        store.close()
    limits = f"max_steps {plan.max_steps}"
    if plan.max_tokens is not None:
        limits += f", max_tokens {plan.max_tokens}"
    print(f"{run} queued to resume on the fleet ({limits})", flush=True)
    return 0


def _queue_resume(
    store: Any,
    client: Any,
    run: str,
    *,
    max_steps: int | None,
    max_tokens: int | None,
    read_timeout: float | None,
    where: str,
) -> Any:
    """The plan queued (a `decide.ResumePlan`); one line and exit 2 when nothing is."""
    from attrs import evolve
    from dbos import WorkflowSerializationFormat

    # Not exported by dbos (pinned to 3.4.x in pyproject): raised by the "reject" policy.
    from dbos._error import DBOSWorkflowIDInUseError

    from ruizn.fleet.app import APP_VERSION, QUEUE, FleetLogError, replay_lines
    from ruizn.fleet.resume import (
        RESUME_WORKFLOW,
        FleetResumeRefused,
        ResumeOrder,
        RunNotStored,
        Workflow,
        check_resume,
        next_resume_id,
        order_to_json,
        resume_prefix,
        spec_of_run,
    )
    from ruizn.reducers import InvalidTransition
    from ruizn.serde import DecodeError

    statuses = [
        *client.list_workflows(workflow_ids=[run], load_output=False),
        # A prefix is a LIKE pattern to the database: `_` in a run id matches any character.
        *(
            w
            for w in client.list_workflows(
                workflow_id_prefix=resume_prefix(run), load_input=False, load_output=False
            )
            if w.workflow_id.startswith(resume_prefix(run))
        ),
    ]
    workflows = [
        Workflow(workflow_id=w.workflow_id, status=w.status, executor=w.executor_id)
        for w in statuses
    ]
    try:
        state = replay_lines(store.lines(run))
    except (FleetLogError, DecodeError, InvalidTransition) as exc:
        fail(f"run {run}: its events in the database do not replay: {exc}")
    try:
        plan = check_resume(run, state, workflows, max_steps=max_steps, max_tokens=max_tokens)
    except RunNotStored:
        fail(f"no run {run!r} in the database {where}")
    except FleetResumeRefused as exc:
        fail(str(exc))
    assert state is not None  # check_resume refuses a run with no events
    submitted = next((_submitted_spec(w.input) for w in statuses if w.workflow_id == run), None)
    spec = spec_of_run(state, submitted)
    if read_timeout is not None:
        spec = evolve(spec, read_timeout=read_timeout)
    order = ResumeOrder(
        spec=spec, after_seq=state.last_seq, max_steps=plan.max_steps, max_tokens=plan.max_tokens
    )
    workflow_id = next_resume_id(run, (w.workflow_id for w in workflows))
    try:
        with store.queueing(run) as conn:
            client.enqueue_in_transaction(
                conn,
                {
                    "queue_name": QUEUE,
                    "workflow_name": RESUME_WORKFLOW,
                    "workflow_id": workflow_id,
                    "workflow_id_reuse_policy": "reject",
                    "app_version": APP_VERSION,
                    "serialization_type": WorkflowSerializationFormat.PORTABLE,
                },
                order_to_json(order),
            )
    except DBOSWorkflowIDInUseError:
        fail(f"run {run} was queued to resume by another command just now ({workflow_id})")
    return plan


def _submitted_spec(stored: Any) -> dict[str, Any] | None:
    """The spec a run's workflow was enqueued with (DBOS keeps `{"args": [spec], ...}`)."""
    args = stored.get("args") if isinstance(stored, dict) else None
    if args and isinstance(args[0], dict) and "goal" in args[0]:
        return dict(args[0])
    return None


def list_runs_db(db: str) -> int:
    store = _store(db)
    from ruizn.fleet.app import FleetLogError, replay_lines
    from ruizn.format import human_seconds, tokens
    from ruizn.reducers import InvalidTransition
    from ruizn.serde import DecodeError

    print(
        f"{'RUN':<30} {'STATUS':<11} {'WORKER':<14} {'STEPS':>5} {'TIME':>7} {'IN':>9}"
        f" {'OUT':>7}  GOAL"
    )
    for row in store.runs():
        status = row.status
        try:
            state = replay_lines(store.lines(row.run_id))
        except (FleetLogError, DecodeError, InvalidTransition):
            state, status = None, "unreadable"  # the others are still listed
        steps = str(state.step) if state else ""
        elapsed = human_seconds(state.elapsed) if state else ""
        used_in = tokens(state.usage.total_input_tokens) if state else ""
        used_out = tokens(state.usage.output_tokens) if state else ""
        print(
            f"{shown(row.run_id):<30} {shown(status):<11} {shown(row.worker or '-'):<14}"
            f" {steps:>5} {elapsed:>7} {used_in:>9} {used_out:>7}  {shown(row.goal)[:60]}"
        )
    store.close()
    return 0


def show_db(db: str, run: str, *, what: str, as_json: bool = False) -> int:
    """`show`/`replay` of a run held in the database: its log is rebuilt from the table,
    byte for byte, then read by the same code as a local log."""
    store = _store(db)
    if not store.has_run(run):
        fail(f"no run {run!r} in the database {_safe(db)}")
    from ruizn.shell.logs import replay_run, show_run

    with tempfile.TemporaryDirectory(prefix="ruizn-db-") as tmp:
        path = Path(tmp) / run / "events.jsonl"
        store.export(run, path)
        store.close()
        if what == "show":
            return show_run(str(path), path.parent.parent)
        return replay_run(str(path), root=path.parent.parent, as_json=as_json)


def export_db(db: str, run: str, out: str) -> int:
    store = _store(db)
    if not store.has_run(run):
        fail(f"no run {run!r} in the database {_safe(db)}")
    store.export(run, Path(out))
    return 0


def _safe(db: str) -> str:
    from ruizn.fleet.store import safe_url

    return safe_url(db)
