"""`ruizn worker`, `ruizn submit`, `ruizn resume --db`, and the store that the reading
commands open on the fleet's database. A library: each returns a report (fleet/reports.py)
or raises `FleetRefused`; the CLI prints them."""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import evolve

from ruizn.effects.runlog.folder import make_root
from ruizn.fleet.errors import FleetRefused, need_fleet_extra
from ruizn.fleet.reports import NothingQueued, Queued, Submitted, WorkerStopped
from ruizn.format import counted
from ruizn.settings import RunSettings
from ruizn.terminal import visible

if TYPE_CHECKING:  # `runs --db` and `show --db` import this module, not the builder
    from ruizn.shell.outcome import Resume

__all__ = ["open_store", "resume_db", "shown", "submit", "work"]


def _quiet(_line: str) -> None:
    pass


def shown(text: str) -> str:
    """Text from the database, another worker or a plug-in, as one inert line: run ids,
    goals and worker names may hold anything a DBOS client or an older ruizn stored."""
    return visible(" ".join(text.split()))


def open_store(db: str) -> Any:
    need_fleet_extra()
    from ruizn.fleet.database import EventStore, StoreUnreachable

    try:
        return EventStore(db)
    except StoreUnreachable as exc:
        raise FleetRefused(str(exc)) from None


def work(
    db: str,
    *,
    worker_id: str | None,
    dead_after: float,
    concurrency: int,
    workspace: str,
    log_dir: str | None,
    tools_from: str | None,
    trust: bool = False,
    announce: Callable[[str], None] = _quiet,
    stop: threading.Event | None = None,
) -> WorkerStopped:
    """Take runs from the fleet's database until `stop` is set (by default: SIGINT or
    SIGTERM, whose handlers this installs). `announce` is told what the worker does, a line
    at a time (ready, a dead worker's runs taken back, a run's end). On return the worker
    has marked itself dead: its runs in flight go to the other workers, and the caller
    should end the process at once (os._exit), so that none goes on here meanwhile."""
    key = _key()
    store = open_store(db)
    from dbos import DBOS

    from ruizn.effects.runlog.store import default_root
    from ruizn.fleet.app import QUEUE, launch
    from ruizn.fleet.database import StoreUnreachable
    from ruizn.fleet.driver import ToolsFromError, load_tools_factory

    try:
        tools = load_tools_factory(tools_from)
    except ToolsFromError as exc:
        raise FleetRefused(str(exc)) from None
    name = worker_id or f"{socket.gethostname()}-{os.getpid()}"
    folder = Path(workspace).resolve()
    root = default_root(folder, log_dir).resolve()
    try:
        make_root(root)
    except OSError as exc:
        raise FleetRefused(f"cannot create the log dir {root}: {exc.strerror or exc}") from None

    def say(message: str) -> None:
        announce(f"[worker {name}] {message}")

    own_signals = stop is None
    halt = threading.Event() if stop is None else stop
    launched = threading.Event()

    def take_over(dead: str) -> None:
        pending = DBOS.list_workflows(
            status="PENDING", executor_id=dead, load_input=False, load_output=False
        )
        for status in pending:
            # Back on the queue: the first live executor to dequeue it runs it; DBOS's
            # ENQUEUED -> PENDING dequeue admits exactly one.
            # (a subagent's on the children's queue it came from)
            DBOS.resume_workflow(status.workflow_id, queue_name=status.queue_name or QUEUE)
        store.forget_worker(dead)
        say(
            f"worker {dead} is silent for {dead_after:g}s:"
            f" {counted(len(pending), 'run')} back on the queue"
        )

    def beat() -> None:
        interval = max(min(dead_after / 3, 5.0), 0.2)
        while not halt.wait(interval):
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
            key=key,
            trust=trust,
        )
    except StoreUnreachable as exc:  # another process held the schema lock too long
        raise FleetRefused(str(exc)) from None
    # Loaded now, not by the first run: a run taken over from a dead worker should not
    # wait a second more for the SDK's import.
    import ruizn.effects.models.anthropic  # noqa: F401

    launched.set()
    say(f"ready · concurrency {concurrency} · logs {root}")
    if own_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: halt.set())
    while not halt.wait(0.5):
        pass
    # Hand the runs in flight back at once: a heartbeat of 0 makes this worker dead for
    # every other one, whose next beat puts its runs back on the queue.
    try:
        store.mark_dead(name)
    except Exception as exc:  # stopping anyway: the heartbeat ages, and they take over
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        return WorkerStopped(name=name, log_root=root, error=error)
    return WorkerStopped(name=name, log_root=root)


def _key() -> Any:
    """The user's fleet key (fleet/signing.py), or FleetRefused."""
    need_fleet_extra()
    from ruizn.fleet.signing import FleetKey, FleetKeyError

    try:
        return FleetKey.of_user(os.environ)
    except FleetKeyError as exc:
        raise FleetRefused(str(exc)) from None


def submit(
    db: str,
    goals: str | None,
    goal: str | None,
    *,
    settings: RunSettings,
    batch_max_cost: float | None = None,
    queued: Callable[[str], None] = _quiet,
) -> Submitted:
    """Queue GOALS.jsonl's runs (or the one `goal`) on the fleet, signed with the user's
    key; `queued` is told each run id as it is queued. `settings.max_cost` is each run's
    budget; `batch_max_cost` the whole submission's, held in the database for every
    worker."""
    if (goals is None) == (goal is None):
        raise FleetRefused("give GOALS.jsonl or --goal TEXT (one of them)")
    if goal is not None and not goal.strip():
        raise FleetRefused("--goal must not be empty")
    need_fleet_extra()
    from ruizn.effects.runlog.store import new_run_id
    from ruizn.fleet.driver import RunInput, input_to_json
    from ruizn.fleet.goals import GoalsError, read_goals, unkept_budget

    key = _key()
    defaults = RunInput(run_id="", goal=goal or "", settings=settings)
    submission = new_run_id()
    if goals is not None:
        try:
            # A file submitted twice is two batches: the ids carry the submission's time.
            specs = read_goals(Path(goals), defaults, id_prefix=submission, local=False)
        except GoalsError as exc:
            raise FleetRefused(str(exc)) from None
    else:
        specs = [evolve(defaults, run_id=new_run_id())]
    unkept = unkept_budget(specs, batch_max_cost)
    if unkept is not None:
        raise FleetRefused(unkept)
    store = open_store(db)
    from dbos import WorkflowSerializationFormat

    from ruizn.fleet.app import APP_VERSION, QUEUE, WORKFLOW

    client = _client(db, store)
    if batch_max_cost is not None:
        # The whole submission's budget, before the runs are queued, so none starts
        # without it.
        store.open_budget(f"submit-{submission}", batch_max_cost, [s.run_id for s in specs])
    done: list[str] = []
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
                key.signed(input_to_json(spec)),
            )
            done.append(spec.run_id)
            queued(spec.run_id)
    finally:
        client.destroy()
        store.close()
    return Submitted(run_ids=tuple(done))


def _client(db: str, store: Any) -> Any:
    from dbos import DBOSClient

    from ruizn.fleet.app import migrate, quiet_dbos
    from ruizn.fleet.queueguard import serializer

    quiet_dbos()
    try:
        migrate(db, store)  # the queue's tables, if no worker has started yet
        return DBOSClient(system_database_url=db, serializer=serializer())
    except Exception as exc:
        raise FleetRefused(f"cannot reach the database: {str(exc).splitlines()[0][:200]}") from None


def resume_db(db: str, run: str, request: Resume) -> Queued | NothingQueued:
    """`ruizn resume --db`: check the run can go on (and the decisions given, against the
    calls its stored events show waiting), then queue an order for the workers (see
    fleet/resume.py). Nothing is written or queued when it cannot (FleetRefused). Of the
    request, the limits, the read timeout and the decisions apply: a worker has its own
    workspace, MCP header values and trust."""
    from ruizn.fleet.resume import NothingToQueue

    key = _key()
    store = open_store(db)
    # `last`, or a run id typed in part (no run, not even a queued one, has it whole).
    if run == "last" or run not in {row.run_id for row in store.runs()}:
        from ruizn.effects.runlog.store import RunNotFound
        from ruizn.fleet.dbstore import DbRunStore

        try:
            run = DbRunStore(store, Path(".")).find(run).run_id
        except RunNotFound as exc:
            store.close()
            raise FleetRefused(str(exc)) from None
    client = _client(db, store)
    try:
        checked, workflow_id = _queue_resume(store, client, run, request, where=_safe(db), key=key)
    except NothingToQueue as done:  # as a local resume: said, not an error
        return NothingQueued(run_id=run, message=str(done))
    finally:
        client.destroy()
        store.close()
    plan = checked.plan
    return Queued(
        run_id=run,
        workflow_id=workflow_id,
        limits=plan.limits,
        approve=tuple(checked.approve),
        deny=tuple(checked.deny),
    )


def _queue_resume(
    store: Any, client: Any, run: str, request: Resume, *, where: str, key: Any
) -> tuple[Any, str]:
    """What was queued (a `resume.Checked`) and its workflow id; FleetRefused when nothing
    is. The order
    is signed with the user's key; a run the key did not queue is refused (its grant said)
    unless `request.trust`."""
    from dbos import WorkflowSerializationFormat

    # Not exported by dbos (pinned to 3.4.x in pyproject): raised by the "reject" policy.
    from dbos._error import DBOSWorkflowIDInUseError

    from ruizn.effects.runlog.reader import LogError
    from ruizn.fleet.app import APP_VERSION, QUEUE
    from ruizn.fleet.dbstore import DbRunStore
    from ruizn.fleet.resume import (
        RESUME_WORKFLOW,
        FleetResumeRefused,
        NothingToQueue,
        RunNotStored,
        Workflow,
        check_resume,
        input_of_run,
        next_resume_id,
        order_to_json,
        resume_prefix,
    )

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
        runs = DbRunStore(store, Path("."))
        state = runs.load(runs.find(run)).state if store.has_run(run) else None
    except LogError as exc:
        raise FleetRefused(f"run {run}: its events in the database do not replay: {exc}") from None
    try:
        checked = check_resume(
            run,
            state,
            workflows,
            limits=request.limits,
            approve=request.approve,
            deny=request.deny,
            reason=request.reason,
        )
    except RunNotStored:
        raise FleetRefused(f"no run {run!r} in the database {where}") from None
    except NothingToQueue:
        raise
    except FleetResumeRefused as exc:
        raise FleetRefused(str(exc)) from None
    assert state is not None  # check_resume refuses a run with no events
    submitted = next((_submitted_input(w.input) for w in statuses if w.workflow_id == run), None)
    run_input = input_of_run(state, submitted)
    if not (submitted is not None and key.verify(submitted)) and not request.trust:
        from ruizn.grant import grant_of

        grant = grant_of(run_input.settings).summary()
        raise FleetRefused(
            shown(
                f"run {run} in {where} was not queued with your fleet key; resuming it would"
                f" grant: {grant}; give --trust to resume it so"
            )
        )
    if request.read_timeout is not None:
        run_input = evolve(
            run_input, settings=evolve(run_input.settings, read_timeout=request.read_timeout)
        )
    order = checked.order(run_input, after_seq=state.last_seq)
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
                key.signed(order_to_json(order)),
            )
    except DBOSWorkflowIDInUseError:
        raise FleetRefused(
            f"run {run} was queued to resume by another command just now ({workflow_id})"
        ) from None
    return checked, workflow_id


def _submitted_input(stored: Any) -> dict[str, Any] | None:
    """The input a run's workflow was enqueued with (DBOS keeps `{"args": [input], ...}`)."""
    args = stored.get("args") if isinstance(stored, dict) else None
    if args and isinstance(args[0], dict) and "settings" in args[0]:
        return dict(args[0])
    return None


def _safe(db: str) -> str:
    from ruizn.fleet.database import safe_url

    return safe_url(db)
