"""`ruizn compact RUN`: a stopped run's history compacted by hand (see ruizn.compaction).

The runner makes the compaction call as it would mid-run (trigger `manual`), in the stopped
run's log; a failed attempt is retried as the core's retry policy says. The run keeps its
status: `resume` or `continue` then goes on from the summary. A call cut by Ctrl-C is
logged as an attempt that failed and is not retried, so the run is not left inside it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import anyio

from ruizn.compaction import blocked, instructions_of
from ruizn.effects.runlog.reader import iter_events
from ruizn.effects.runlog.sink import EventSink
from ruizn.effects.runlog.store import RunStore
from ruizn.effects.runlog.trust import TrustStore
from ruizn.events import RunStarted
from ruizn.grant import grant_of
from ruizn.resuming import ResumeRefused, UntrustedRun
from ruizn.settings import RunSettings
from ruizn.shell.outcome import RunResult, Session
from ruizn.shell.runner import AgentRunner
from ruizn.state import ExecutionContext, Phase

# Wiring.open: the runner (and the settings) for a run, held open around its use.
OpenRunner = Callable[
    [RunSettings, Path, str, EventSink, ExecutionContext],
    contextlib.AbstractAsyncContextManager[tuple[AgentRunner, RunSettings]],
]
# The error type a compaction call cut by Ctrl-C is logged with.
_CANCELLED = "cancelled"


class CompactionFailed(RuntimeError):
    """The compaction call gave up (its last error); the run's log says so and is whole."""


def compact_refusal(state: ExecutionContext) -> str | None:
    """Why a run cannot be compacted by hand now, or None."""
    if state.phase is not Phase.FINISHED:
        return (
            f"run {state.run_id} has not stopped cleanly (it was cut off in {state.phase.value}):"
            " resume it first"
        )
    if state.turn_open:
        return (
            f"run {state.run_id} waits on tool calls of its last turn: resume it (and decide"
            " them) first"
        )
    if len(state.messages) < 2:
        return f"run {state.run_id} has nothing to compact yet"
    return None


async def compact_run(
    store: RunStore,
    trust_store: TrustStore,
    opening: OpenRunner,
    run: str | Path,
    *,
    instructions: str | None,
    trust: bool,
) -> RunResult:
    """`Agent.compact_async`: the run found and locked, checked (`compact_refusal`, trust),
    then compacted in its own log by a runner `opening` gives."""
    ref = store.find(str(run))
    writer = store.append_writer(ref)
    try:
        state = store.load(ref).state
        first = next(iter_events(ref.path))
        assert isinstance(first, RunStarted)
        refused = compact_refusal(state)
        if refused is not None:
            raise ResumeRefused(refused)
        problem = trust_store.problem(first, ref.path)
        if problem is not None and not trust:
            raise UntrustedRun(
                state.run_id, problem, grant_of(state.settings, state), verb="compact"
            )
        root = ref.path.parent.parent
        try:
            async with opening(state.settings, root, ref.run_id, writer, state) as (runner, _):
                state = await compact_stopped(runner, instructions)
        finally:
            # What it wrote (a compaction, hooks, a failure) is this user's: a resume goes on
            # without asking.
            trust_store.closed(first, ref.path)
        return Session.of(state, ref.run_id, ref.path)
    finally:
        writer.close()


async def compact_stopped(runner: AgentRunner, instructions: str | None) -> ExecutionContext:
    """Its PreCompact hooks (matcher "manual"; one may block it: CompactionFailed), the
    compaction call until it is done or gives up (CompactionFailed), then its PostCompact
    hooks."""
    told = instructions_of(runner.state, (instructions,) if instructions else ()) or ""
    await runner.compact_hooks("PreCompact", "manual", custom_instructions=told)
    why = blocked(runner.state)
    if why is not None:
        raise CompactionFailed(f"the compaction was blocked by a PreCompact hook: {why}")
    try:
        await _compacted(runner, instructions)
    except (anyio.get_cancelled_exc_class(), KeyboardInterrupt):
        # Ctrl-C cut the call: logged as a failed attempt that is not retried, as a call
        # that gave up is, so the run stands as it stood before (a resume or a message
        # goes on from the history, not from inside the call).
        runner._failed(_CANCELLED, "cancelled by the person (Ctrl-C)", retryable=False)
        raise
    await runner.compact_hooks("PostCompact", "manual")
    return runner.state


async def _compacted(runner: AgentRunner, instructions: str | None) -> None:
    attempt, delay = 1, 0.0
    while True:
        await runner.compact(attempt=attempt, delay=delay, manual=True, instructions=instructions)
        state = runner.state
        if state.compacting is None:
            return
        failure = state.failure
        assert failure is not None  # the call failed: the reducer keeps why
        if not failure.will_retry:
            raise CompactionFailed(f"the compaction failed: {failure.message}")
        attempt, delay = state.attempt + 1, failure.retry_in
