"""The one adapter between the fleet and today's runner.

Everything the fleet knows about `ruizn.runner.AgentRunner` and `ruizn.shell.session`
lives here, so the runner can be rewritten and this module alone
re-pointed. The rest of `ruizn.fleet` speaks `RunSpec`, events, `serde` and `reducers`.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
from attrs import frozen

from ruizn.config import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRY_BASE_DELAY,
    RunConfig,
)
from ruizn.decide import ResumePlan, plan_resume
from ruizn.effects.sandbox import workspace_sandbox
from ruizn.effects.sink import EventSink
from ruizn.effects.tool_loader import collect_tools
from ruizn.effects.tools import BaseTool, ToolRegistry
from ruizn.runner import AgentRunner
from ruizn.shell.session import make_provider, redactor
from ruizn.state import ExecutionContext
from ruizn.store import default_root

ToolsFactory = Callable[[Path], Sequence[BaseTool]]


@frozen(kw_only=True)
class RunSpec:
    """What a fleet run needs to start: the goal and the run options of `ruizn run`.

    The defaults are RunConfig's (config.py is their one home)."""

    run_id: str
    goal: str
    model: str
    max_steps: int
    max_tokens: int
    system: str
    workspace: str
    read_timeout: float = DEFAULT_READ_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES


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


def _config(spec: RunSpec) -> RunConfig:
    delay = os.environ.get("RUIZN_RETRY_BASE_DELAY")
    return RunConfig(
        model=spec.model,
        max_steps=spec.max_steps,
        max_tokens=spec.max_tokens,
        system=spec.system,
        workspace=spec.workspace,
        read_timeout=spec.read_timeout,
        max_retries=spec.max_retries,
        retry_base_delay=float(delay) if delay else DEFAULT_RETRY_BASE_DELAY,
        plugins=False,
    )


def _registry(config: RunConfig, extra: ToolsFactory | None) -> ToolRegistry:
    workspace = Path(config.workspace)
    sandbox = workspace_sandbox(
        workspace, default_root(workspace), allow_secret_files=config.allow_secret_files
    )
    tools = [loaded.tool for loaded in collect_tools(sandbox, plugins=False).tools]
    if extra is not None:
        tools.extend(extra(workspace))
    return ToolRegistry(tools)


def _runner(
    config: RunConfig,
    sink: EventSink,
    extra: ToolsFactory | None,
    state: ExecutionContext | None = None,
) -> AgentRunner:
    return AgentRunner(
        provider=make_provider(config, Path(config.workspace)),
        registry=_registry(config, extra),
        sink=sink,
        # No printer: many runs share a worker's terminal; the log is the transcript.
        subscribers=(),
        clock=time.time,
        timer=time.monotonic,
        state=state,
        tool_concurrency=config.tool_concurrency,
        redact=redactor(),
    )


def start_run(spec: RunSpec, writer: EventSink, extra: ToolsFactory | None) -> ExecutionContext:
    """A new run from its first event to its last, in this thread (its own event loop)."""
    config = _config(spec)
    runner = _runner(config, writer, extra)
    runner.begin(run_id=spec.run_id, goal=spec.goal, config=config, workspace=spec.workspace)
    return anyio.run(runner.drive)


def continue_run(
    spec: RunSpec, state: ExecutionContext, writer: EventSink, extra: ToolsFactory | None
) -> ExecutionContext:
    """An interrupted run, rebuilt from its events, goes on as `ruizn resume` would: a tool
    call in flight that is not read-only is answered `interrupted`, never run again."""
    plan = plan_resume(state, max_steps=state.max_steps, max_tokens=None)
    if plan is None:
        return state
    return _resumed(spec, state, plan, writer, extra)


def resume_stopped_run(
    spec: RunSpec,
    state: ExecutionContext,
    writer: EventSink,
    extra: ToolsFactory | None,
    *,
    max_steps: int | None,
    max_tokens: int | None,
) -> ExecutionContext:
    """A stopped run (max_steps, error, cut at max_tokens) goes on with the limits a person
    gave, as `ruizn resume --max-steps/--max-tokens` would. Raises `decide.ResumeRefused`."""
    plan = plan_resume(state, max_steps=max_steps, max_tokens=max_tokens)
    if plan is None:
        return state
    return _resumed(spec, state, plan, writer, extra)


def _resumed(
    spec: RunSpec,
    state: ExecutionContext,
    plan: ResumePlan,
    writer: EventSink,
    extra: ToolsFactory | None,
) -> ExecutionContext:
    runner = _runner(_config(spec), writer, extra, state)
    runner.resume(plan)
    return anyio.run(runner.drive)
