"""The one adapter between the fleet and today's runner.

Everything the fleet knows about `ruizn.shell.runner.AgentRunner` and
`ruizn.shell.session` lives here, so the runner can be rewritten and this module alone
re-pointed. The rest of `ruizn.fleet` speaks `RunSpec`, events, `serde` and `reducers`.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
from attrs import frozen

from ruizn.effects.provider import RetryNotice
from ruizn.effects.tools import BaseTool, ToolRegistry
from ruizn.effects.writer import EventWriter
from ruizn.shell.runner import AgentRunner
from ruizn.shell.session import make_provider, make_registry, retry_base_delay
from ruizn.state import ExecutionContext

ToolsFactory = Callable[[Path], Sequence[BaseTool]]


@frozen(kw_only=True)
class RunSpec:
    """What a fleet run needs to start: the goal and the run options of `ruizn run`."""

    run_id: str
    goal: str
    model: str
    max_steps: int
    max_tokens: int
    system: str
    workspace: str
    read_timeout: float = 60.0
    max_retries: int = 4


class ToolsFromError(ValueError):
    """--tools-from does not name a function that gives tools."""


def load_tools_factory(spec: str | None) -> ToolsFactory | None:
    """`MODULE:FUNCTION`, a function of the workspace returning extra tools for every run."""
    if spec is None:
        return None
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ToolsFromError(f"--tools-from {spec!r}: expected MODULE:FUNCTION")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolsFromError(f"--tools-from {spec!r}: cannot import {module_name}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ToolsFromError(f"--tools-from {spec!r}: {module_name} has no function {attr}")
    return factory  # type: ignore[no-any-return]


def _registry(workspace: Path, extra: ToolsFactory | None) -> ToolRegistry:
    tools = list(make_registry(workspace))
    if extra is not None:
        tools.extend(extra(workspace))
    return ToolRegistry(tools)


def _runner(
    spec: RunSpec,
    writer: EventWriter,
    extra: ToolsFactory | None,
    state: ExecutionContext | None = None,
) -> AgentRunner:
    runner: AgentRunner | None = None

    def on_retry(notice: RetryNotice) -> None:
        if runner is not None:
            runner.notify_retry(notice)

    workspace = Path(spec.workspace)
    runner = AgentRunner(
        provider=make_provider(
            spec.model, workspace, spec.read_timeout, spec.max_retries, on_retry
        ),
        registry=_registry(workspace, extra),
        writer=writer,
        # No printer: many runs share a worker's terminal; the log is the transcript.
        subscribers=(),
        clock=time.time,
        timer=time.monotonic,
        max_attempts=spec.max_retries + 1,
        retry_base_delay=retry_base_delay(),
        state=state,
    )
    return runner


def start_run(spec: RunSpec, writer: EventWriter, extra: ToolsFactory | None) -> ExecutionContext:
    """A new run from its first event to its last, in this thread (its own event loop)."""
    runner = _runner(spec, writer, extra)
    runner.begin(
        run_id=spec.run_id,
        goal=spec.goal,
        model=spec.model,
        max_steps=spec.max_steps,
        max_tokens=spec.max_tokens,
        system=spec.system,
        workspace=spec.workspace,
    )
    return anyio.run(runner.drive)


def continue_run(
    spec: RunSpec, state: ExecutionContext, writer: EventWriter, extra: ToolsFactory | None
) -> ExecutionContext:
    """An interrupted run, rebuilt from its events, goes on as `ruizn resume` would: a tool
    call in flight that is not read-only is answered `interrupted`, never run again."""
    runner = _runner(spec, writer, extra, state)
    runner.resume(max_steps=state.max_steps)
    return anyio.run(runner.drive)
