"""The fleet on DBOS: a run is a workflow whose id is the run_id, on one durable queue.

How a run maps onto DBOS (see also store.py). The workflow has no DBOS steps: its
checkpoints are ruizn's own events, committed to the events table as they happen. When DBOS
recovers the workflow (the same executor back, or a live worker taking a dead one's runs),
the function starts again from the top, rebuilds the state from the table and continues as
`ruizn resume` does. So only the step in flight is redone: a model call in flight is asked
again (its tokens so far stay in the log before `run_resumed`), and a tool call in flight
that is not read-only is answered `interrupted`, because its `tool_call_started` was
committed before it ran. DBOS keeps the queue, the concurrency limits, who runs what, and
the exactly-once outcome; the log stays the one truth of the run, stored once (events,
never states, never pickle: inputs and outputs are DBOS's portable JSON).

`ruizn resume --db` queues a second kind of workflow, `RUN/resume-K`, whose input is a
`resume.ResumeOrder`: the same function with the order's new limits (see resume.py).

A run's subagents are runs of their own on a second queue, `children.CHILD_QUEUE`, with
the same workflows (see children.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attrs import frozen
from dbos import DBOS, DBOSConfig, WorkflowSerializationFormat

from ruizn.fleet.children import CHILD_QUEUE, FleetChildren
from ruizn.fleet.database import EventStore
from ruizn.fleet.dbstore import DbRunStore
from ruizn.fleet.driver import (
    RunInput,
    ToolsFactory,
    batch_budget_of,
    input_from_json,
    placed,
    resume_run,
    start_run,
)
from ruizn.fleet.goals import RUN_ID
from ruizn.fleet.queueguard import refuse_pickle, refused_line, serializer, sweep
from ruizn.fleet.resume import RESUME_WORKFLOW, ResumeOrder, order_from_json, resume_prefix
from ruizn.fleet.signing import SIGNATURE, FleetKey
from ruizn.format import counted
from ruizn.grant import grant_of
from ruizn.limits import Limits
from ruizn.shell.outcome import Resume
from ruizn.state import Status
from ruizn.terminal import revealed_line, visible

QUEUE = "ruizn"
WORKFLOW = "ruizn.run"
# The same on every machine, whatever the code's hash: an executor only dequeues and
# recovers workflows of its own application version.
APP_VERSION = "ruizn-fleet-1"
TERMINAL = frozenset({"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"})
# The cyclic collector's thresholds in a fleet process: dozens of runs at once allocate
# hundreds of thousands of short-lived objects a second, and at Python's (700, 10, 10) the
# collector ran so often, each time walking the live runs' states, that it was a tenth of
# a batch's CPU (docs/benchmark.md). Still collected, every 100,000 allocations.
GC_THRESHOLDS = (100_000, 50, 100)


@frozen(kw_only=True)
class FleetContext:
    store: EventStore
    log_root: Path
    worker: str
    tools: ToolsFactory | None
    workspace: str  # for runs submitted without one
    announce: Callable[[str], None] | None = None
    # MCP header values this process was given (`NAME:KEY=VALUE`, `ruizn batch
    # --mcp-header`); a worker's come from its environment. Never stored.
    mcp_headers: tuple[str, ...] = ()
    # The operator's key (fleet/signing.py): only runs it signed are run, unless `trust`
    # (`--trust`), and then after their grant is shown.
    key: FleetKey | None = None
    trust: bool = False
    # Where a refusal or an accepted grant is said when there is no `announce` (a batch).
    warn: Callable[[str], None] | None = None


class _Launched:
    """The context of the fleet launched in this process (DBOS workflows are module-level
    functions, so they find it here)."""

    context: FleetContext | None = None


class FleetLogError(RuntimeError):
    """The events stored for a run do not replay."""


@DBOS.workflow(name=WORKFLOW, serialization_type=WorkflowSerializationFormat.PORTABLE)
def run_workflow(data: dict[str, Any]) -> dict[str, Any]:
    context = _Launched.context
    assert context is not None, "the fleet was not launched in this process"
    refused = _unsigned(context, data, lambda: input_from_json(data))
    if refused is not None:
        return refused
    return _proven(context, data, execute(context, input_from_json(data)))


@DBOS.workflow(name=RESUME_WORKFLOW, serialization_type=WorkflowSerializationFormat.PORTABLE)
def resume_workflow(data: dict[str, Any]) -> dict[str, Any]:
    context = _Launched.context
    assert context is not None, "the fleet was not launched in this process"
    refused = _unsigned(context, data, lambda: order_from_json(data).run)
    if refused is not None:
        return refused
    order = order_from_json(data)
    return _proven(context, data, execute(context, order.run, order=order))


def _unsigned(
    ctx: FleetContext, data: dict[str, Any], run_of: Callable[[], RunInput]
) -> dict[str, Any] | None:
    """None when the input may run: its operator's key signed it, or the operator said
    `--trust` (its grant is shown first). Else the refusal, as the workflow's result: nothing
    of the input is imported, started or written."""
    if ctx.key is not None and ctx.key.verify(data):
        return None
    say = ctx.announce or ctx.warn or (lambda _line: None)
    try:
        run = run_of()
    except Exception as exc:  # not even a run: nothing to trust
        say(f"a queued workflow is not a ruizn run ({type(exc).__name__}): not run")
        return {"status": "error", "error": "the queued input is not a ruizn run"}
    if RUN_ID.fullmatch(str(run.run_id)) is None:
        say("a queued run has no valid run id: not run")
        return {"status": "error", "error": "the queued run id is not a run id"}
    if not ctx.trust:
        say(
            f"{run.run_id} was not queued with this operator's fleet key: not run"
            " (start with --trust to run it after its grant is shown)"
        )
        return {
            "status": "error",
            "error": "not queued with this operator's fleet key: not run",
        }
    grant = grant_of(placed(run, ctx.workspace).settings)
    say(f"{run.run_id} was not queued with this operator's fleet key; --trust: it runs with")
    for line in grant.lines():
        say(f"  {revealed_line(line)}")
    return None


def _proven(ctx: FleetContext, data: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """The result with its proof (fleet/signing.py): a batch believes only results of what it
    queued."""
    if ctx.key is None:
        return result
    return ctx.key.prove(str(data.get(SIGNATURE) or ""), result)


def execute(
    ctx: FleetContext, run: RunInput, *, order: ResumeOrder | None = None
) -> dict[str, Any]:
    """Run, recover or resume one run. Safe to call again for the same run at any point (a
    DBOS recovery does): what the stored events already hold is never done twice."""
    if RUN_ID.fullmatch(run.run_id) is None:
        # Anyone who can write to the database can queue a workflow: its id names a folder
        # under the worker's log root, so it must be a run id and nothing else.
        raise FleetLogError(f"the queued run id {run.run_id!r} is not a run id")
    options: Any = {"mcp_headers": ctx.mcp_headers, "launcher": _children(ctx, run)}
    run = placed(run, ctx.workspace)
    store = DbRunStore(ctx.store, ctx.log_root)
    ctx.store.note_run(run.run_id, goal=run.goal, status="running", worker=ctx.worker)
    # has_run first: find() of an id with no events reads every run's row for one whose id
    # begins so, and a batch starts hundreds of new runs.
    state = None
    if ctx.store.has_run(run.run_id):
        state = store.load(store.find(run.run_id)).state
    if order is not None and state is None:
        raise FleetLogError(f"run {run.run_id} has no stored events to resume from")
    if order is not None and state is not None and state.last_seq == order.after_seq:
        # The order is not applied yet: the run still ends where it ended when it was given.
        state = resume_run(run, store, ctx.tools, order.request(), **options)
    elif state is None:
        budgets = batch_budget_of(store, run.run_id)
        # (a subagent starts all the same, and stops at its first call with max_cost: its
        # parent's log records its end like any child's)
        over = budgets.spent() if budgets is not None and run.parent is None else None
        if over is not None:
            # Not started: nothing was spent on it, and nothing will be.
            name, limit, total = over
            ctx.store.note_run(run.run_id, goal=run.goal, status="max_cost", worker=None)
            if ctx.announce is not None:
                ctx.announce(f"{run.run_id} not started: {name} is spent")
            return {
                "status": Status.MAX_COST.value,
                "steps": 0,
                "elapsed": 0.0,
                "input_tokens": 0,
                "output_tokens": 0,
                "cost": 0.0,
                "error": f"not started: {name} is spent (${total:.2f} of ${limit:.2f})",
            }
        state = start_run(run, store, ctx.tools, budget=budgets, **options)
    elif state.status is Status.RUNNING:
        # One a crash interrupted (a resume order's included, once its run_resumed is
        # stored): it goes on within the limits it has. An order's decisions that the crash
        # kept from the log are given again; a call already decided no longer waits, so
        # none is decided twice.
        given = order.still_waiting(state) if order is not None else None
        request = Resume(
            limits=Limits(max_steps=state.settings.max_steps),
            approve=given.approve if given is not None else (),
            deny=given.deny if given is not None else (),
            reason=given.reason if given is not None else None,
        )
        state = resume_run(run, store, ctx.tools, request, **options)
    ctx.store.note_run(run.run_id, goal=run.goal, status=state.status.value, worker=None)
    if ctx.announce is not None:
        ctx.announce(f"{run.run_id} {state.status.value} · {counted(state.step, 'step')}")
    return {
        "status": state.status.value,
        "steps": state.step,
        "elapsed": state.elapsed,
        "input_tokens": state.usage.total_input_tokens,
        "output_tokens": state.usage.output_tokens,
        "cost": state.total_cost,
        "error": state.error,
    }


def _children(ctx: FleetContext, run: RunInput) -> FleetChildren:
    """Who runs the run's subagents: the fleet, each a queued run of its own."""
    return FleetChildren(
        queue=DbosChildQueue(),
        events=ctx.store,
        store=DbRunStore(ctx.store, ctx.log_root),
        key=ctx.key,
        workspace=run.settings.workspace,  # as queued: the child's taker places it
    )


def launch(
    url: str,
    *,
    store: EventStore,
    log_root: Path,
    worker: str,
    concurrency: int,
    tools: ToolsFactory | None,
    workspace: str,
    polling: float,
    announce: Callable[[str], None] | None = None,
    mcp_headers: tuple[str, ...] = (),
    key: FleetKey | None = None,
    trust: bool = False,
    warn: Callable[[str], None] | None = None,
    offline: bool = False,
    children: bool = True,
) -> None:
    """Start DBOS in this process: it recovers this executor's own pending workflows and
    takes work from the queue, at most `concurrency` runs at once (0: none, the process
    only queues and waits, and leaves the queue's settings to the workers'). `offline`:
    every run it will take uses the offline model (a batch knows; a worker does not).
    `children`: it also takes subagents' runs from the children's queue (a batch whose
    runs have no subagents does not poll a queue that stays empty: a look at a queue is a
    transaction, ten a second at 64 runs at once)."""
    _Launched.context = FleetContext(
        store=store,
        log_root=log_root,
        worker=worker,
        tools=tools,
        workspace=workspace,
        announce=announce,
        mcp_headers=mcp_headers,
        key=key,
        trust=trust,
        warn=warn,
    )
    quiet_dbos()
    remember(offline=offline)
    # The modules loaded now live as long as the process: frozen, the collector no longer
    # walks their hundreds of thousands of objects each time it looks at the oldest ones.
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    migrate(url, store)
    config: DBOSConfig = {
        "name": "ruizn",
        "system_database_url": url,
        "application_version": APP_VERSION,
        "executor_id": worker,
        "log_level": "CRITICAL",
        "run_migrations": False,  # done just above, under the fleet's lock: launch verifies
        "serializer": serializer(),
    }
    # Rows in another serialization than ruizn's JSON are refused before DBOS's queue can
    # take one, then at every sweep (fleet/queueguard.py).
    say = announce or warn or (lambda _line: None)
    _Sweeper.start(store, say)
    if concurrency == 0:
        DBOS(config=config)
        DBOS.listen_queues([])
        DBOS.launch()
        return
    queues = (QUEUE, CHILD_QUEUE) if children else (QUEUE,)
    _register_queue(url, concurrency, polling, queues)
    DBOS(config=config)
    if not children:
        DBOS.listen_queues(queues)
    DBOS.launch()
    for queue in queues:
        DBOS.register_queue(queue, worker_concurrency=concurrency, polling_interval_sec=polling)


def _register_queue(url: str, concurrency: int, polling: float, queues: tuple[str, ...]) -> None:
    """The queue's row, written before DBOS starts: DBOS starts a worker thread for each
    queue its database holds at launch, and looks for new ones only once a second, so a
    queue first registered after launch (a fresh database) would take no run for up to a
    second. `launch` registers it again once DBOS is up, as before."""
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=url, serializer=serializer(), application_name="ruizn")
    try:
        # The children's queue has as many slots a worker as the runs' (a parent waits on
        # its children in a slot of its own queue, never in one of theirs).
        for queue in queues:
            client.register_queue(
                queue, worker_concurrency=concurrency, polling_interval_sec=polling
            )
    finally:
        client.destroy()


class DbosChildQueue:
    """The children's queue on DBOS, used from inside a parent's workflow but outside its
    DBOS context (an empty one): a child is a workflow of its own, never a DBOS child step
    of its parent's, whose recovery would replay enqueues by their position."""

    def enqueue(self, workflow_id: str, payload: dict[str, Any], *, resume: bool) -> None:
        options: Any = {
            "queue_name": CHILD_QUEUE,
            "workflow_name": RESUME_WORKFLOW if resume else WORKFLOW,
            "workflow_id": workflow_id,
            "app_version": APP_VERSION,
            "serialization_type": WorkflowSerializationFormat.PORTABLE,
        }
        contextvars.Context().run(DBOS.enqueue_workflow_with_options, options, payload)

    def workflows(self, run_id: str) -> dict[str, tuple[str, Any]]:
        prefix = resume_prefix(run_id)

        def listed() -> dict[str, tuple[str, Any]]:
            found = [
                *DBOS.list_workflows(workflow_ids=[run_id], load_input=False),
                *DBOS.list_workflows(workflow_id_prefix=prefix, load_input=False),
            ]
            return {
                w.workflow_id: (w.status, w.output if w.error is None else str(w.error)[:500])
                for w in found
                if w.workflow_id == run_id or w.workflow_id.startswith(prefix)
            }

        return contextvars.Context().run(listed)


# Seconds between two sweeps for rows ruizn did not write (fleet/queueguard.py).
SWEEP_SECONDS = 1.0


class _Sweeper:
    """The thread that refuses rows in a foreign serialization while the fleet runs here."""

    stop: threading.Event | None = None

    @classmethod
    def start(cls, store: EventStore, say: Callable[[str], None]) -> None:
        cls.halt()
        _sweep_once(store, say)  # before DBOS's queue can take a row
        stop = cls.stop = threading.Event()

        def loop() -> None:
            while not stop.wait(SWEEP_SECONDS):
                with contextlib.suppress(Exception):  # the database may blink: next time
                    _sweep_once(store, say)

        threading.Thread(target=loop, name="ruizn-queue-sweep", daemon=True).start()

    @classmethod
    def halt(cls) -> None:
        if cls.stop is not None:
            cls.stop.set()
            cls.stop = None


def _sweep_once(store: EventStore, say: Callable[[str], None]) -> None:
    for row in sweep(store.engine):
        say(refused_line(row, lambda text: visible(" ".join(text.split()))))


# How long a fleet process reuses what it looked up for a run (the plug-ins installed, the
# Models API's answer about a model) for the runs after it.
REMEMBER_SECONDS = 300.0


def remember(*, offline: bool = False) -> None:
    """Also loads now what every run of the process needs, not in its first runs (which
    all wait for it): the price list and, unless every run is offline, the SDK's modules
    (importing them costs a CPU-second and more; an offline batch never uses them) and the
    TLS context every run's client shares."""
    from ruizn.defaults import DEFAULT_MODEL
    from ruizn.effects.models.pricing import default_pricer
    from ruizn.effects.tools.loader import remember_plugins

    remember_plugins(REMEMBER_SECONDS)
    if not offline:
        from ruizn.effects.models.anthropic import tls_context
        from ruizn.effects.models.catalog import remember_facts

        remember_facts(REMEMBER_SECONDS)
        tls_context()  # 10-50 ms of CPU each, which the first runs would otherwise race for
    default_pricer().context_window(DEFAULT_MODEL)  # loads the whole price list


def statuses_of(workflow_ids: list[str]) -> dict[str, str]:
    """Workflow id -> its DBOS status, for the ids that have a workflow: one query of the
    status rows alone, neither inputs nor outputs read (a batch asks this every tick)."""
    return {
        status.workflow_id: status.status
        for status in DBOS.list_workflows(
            workflow_ids=workflow_ids, load_input=False, load_output=False
        )
    }


def polling_for(concurrency: int) -> float:
    """Seconds between a batch's looks at its runs' statuses: a run ends every few tenths
    of a second at most, and each look costs the runs CPU; more runs at once, fewer looks
    (0.1 s alone, 0.5 s at 16 and more)."""
    return min(0.5, max(0.1, concurrency / 32))


def queue_polling_for(concurrency: int) -> float:
    """Seconds between a batch's looks at its queue for a run to start in a free slot. Each
    look is a transaction, and a slot waits half of it on average; with many slots the
    others keep the CPU busy meanwhile (0.02 s up to 4 runs at once, 0.08 s at 16)."""
    return 0.02 if concurrency <= 4 else min(0.1, concurrency / 200)


def migrate(url: str, store: EventStore) -> None:
    """Create or bring up to date DBOS's tables (the queue, the workflows), under the fleet's
    schema lock. DBOS serialises its own migrations with an advisory lock too, but gives up
    waiting after 30 seconds and migrates anyway; under ours, a second ruizn process waits
    as long as the first takes, then finds the schema current and changes nothing."""
    with store.schema_lock():
        DBOS.migrate(url)


def shutdown() -> None:
    _Sweeper.halt()
    with contextlib.suppress(Exception):
        DBOS.destroy(workflow_completion_timeout_sec=0)


def quiet_dbos() -> None:
    # Before any row is read: DBOS's pickle codec refuses in this process from now on.
    refuse_pickle()
    # DBOS logs to the console, tracebacks too; a run's errors reach the user as ruizn's
    # own one-line results instead.
    logging.getLogger("dbos").setLevel(logging.CRITICAL)
    os.environ.setdefault("DBOS__DISABLE_TELEMETRY", "1")
