"""A fleet run's input, and how a worker drives one: through `ruizn.Agent`, like every run.

The fleet knows nothing of how a run is built: it gives the Agent the run's settings, the
worker's extra tools and a store on its database, and the Agent does the rest.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
from attrs import evolve, frozen

from ruizn.effects.runlog.store import RunStore
from ruizn.effects.tools.base import BaseTool
from ruizn.effects.tools.loader import describe_error
from ruizn.events import Parent
from ruizn.fleet.database import EventStore
from ruizn.serde import converter
from ruizn.settings import RunSettings
from ruizn.shell.agent import Agent
from ruizn.shell.children import ChildLauncher, NamedHooks
from ruizn.shell.outcome import Resume
from ruizn.state import ExecutionContext

ToolsFactory = Callable[[Path], Sequence[BaseTool]]


class BatchBudget:
    """A budget a fleet run shares with other runs, as the database holds it
    (`EventStore.open_budget`, `open_tree`): its batch's, or its subagent tree's; asked by
    the runner before each model call."""

    def __init__(self, events: EventStore, budget_id: str, name: str | None = None) -> None:
        self._events = events
        self.budget_id = budget_id
        self._name = name or f"the budget of batch {budget_id}"

    def spent(self) -> tuple[str, float, float] | None:
        found = self._events.budget(self.budget_id)
        if found is None or found[1] < found[0]:
            return None
        return (self._name, found[0], found[1])


class Budgets:
    """Several shared budgets: spent when one is."""

    def __init__(self, *budgets: BatchBudget) -> None:
        self._budgets = budgets

    def spent(self) -> tuple[str, float, float] | None:
        return next((s for s in (b.spent() for b in self._budgets) if s is not None), None)


def batch_budget_of(store: RunStore, run_id: str) -> Budgets | None:
    """The budgets in the database a run draws on (its batch's, its tree's), or None."""
    events = getattr(store, "events", None)
    if not isinstance(events, EventStore):
        return None
    found: list[BatchBudget] = []
    budget_id = events.budget_of(run_id)
    if budget_id is not None:
        found.append(BatchBudget(events, budget_id))
    tree = events.tree_of(run_id)
    if tree is not None:
        top = tree.removeprefix("tree-")
        found.append(BatchBudget(events, tree, f"the max_cost of run {top} and its subagents"))
    return Budgets(*found) if found else None


@frozen(kw_only=True)
class RunInput:
    """A fleet run's input (its workflow's argument): the goal and the run's settings, whole.

    A relative `settings.workspace` is relative to the workspace of the worker that takes
    the run (`ruizn worker --workspace`); `.` is that folder itself. `parent`: a subagent's
    run, queued by its parent's `agent` call (fleet/children.py): the run it is a child of
    and the agent it runs as, signed with the rest, so only what the operator's key queued
    runs as a child."""

    run_id: str
    goal: str
    settings: RunSettings
    parent: Parent | None = None


def input_to_json(run: RunInput) -> dict[str, Any]:
    data = {"run_id": run.run_id, "goal": run.goal, "settings": converter.unstructure(run.settings)}
    if run.parent is not None:  # (only then: every other input signs as it always has)
        data["parent"] = converter.unstructure(run.parent)
    return data


def input_from_json(data: dict[str, Any]) -> RunInput:
    parent = data.get("parent")
    return RunInput(
        run_id=data["run_id"],
        goal=data["goal"],
        settings=converter.structure(data["settings"], RunSettings),
        parent=None if parent is None else converter.structure(parent, Parent),
    )


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
    except (Exception, SystemExit) as exc:  # a broken module: one inert line, no traceback
        raise ToolsFromError(
            f"--tools-from {spec!r}: cannot import {module_name}: {describe_error(exc)}"
        ) from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ToolsFromError(f"--tools-from {spec!r}: {module_name} has no function {attr}")
    return factory  # type: ignore[no-any-return]


def placed(run: RunInput, worker_workspace: str) -> RunInput:
    """The input with its workspace made absolute against the worker's own."""
    workspace = Path(worker_workspace) / run.settings.workspace
    return evolve(run, settings=evolve(run.settings, workspace=str(workspace.resolve())))


def _agent(
    run: RunInput,
    store: RunStore,
    extra: ToolsFactory | None,
    mcp_headers: Sequence[str],
    launcher: ChildLauncher | None,
    *,
    budget: Budgets | None,
) -> Agent:
    tools = extra(Path(run.settings.workspace)) if extra is not None else ()
    # The header values of this run's servers only (a goals line may name other servers
    # than the command line); any other header's value comes from the environment.
    servers = {str(record.get("name")) for record in run.settings.mcp_servers}
    headers = [spec for spec in mcp_headers if spec.partition(":")[0] in servers]
    # No printer: many runs share a worker's terminal; the log is the transcript. No
    # approver: nobody is there to ask, so a call that needs a person stops the run
    # awaiting_approval, for `ruizn resume --db RUN --approve/--deny`.
    return Agent(
        settings=run.settings,
        tools=tools,
        store=store,
        mcp_headers=headers,
        budget=budget,
        hook_runner=_child_hooks(run),
        child_launcher=launcher,
    )


def _child_hooks(run: RunInput) -> Any:
    """A child's hooks are told which agent calls (`agent_id`, `agent_type`), as they are
    when its parent runs it in-process; None: the Agent's own."""
    parent = run.parent
    if parent is None or parent.kind != "agent" or not run.settings.hooks:
        return None
    from ruizn.effects.hooks.command import CommandHooks

    hooks = CommandHooks(Path(run.settings.workspace), os.environ)
    return NamedHooks(hooks, run.run_id, parent.agent or "agent")


def start_run(
    run: RunInput,
    store: RunStore,
    extra: ToolsFactory | None,
    *,
    mcp_headers: Sequence[str] = (),
    launcher: ChildLauncher | None = None,
    budget: Budgets | None = None,
) -> ExecutionContext:
    """A new run from its first event to its last, in this thread (its own event loop).
    `launcher`: who runs its children (the fleet's queue); `budget`: the shared budgets it
    draws on (`batch_budget_of`, which the caller has just looked up)."""
    agent = _agent(run, store, extra, mcp_headers, launcher, budget=budget)

    async def go() -> ExecutionContext:
        async with agent.start(run.goal, run_id=run.run_id, parent=run.parent) as session:
            return (await session.drive()).state

    return anyio.run(go)


def resume_run(
    run: RunInput,
    store: RunStore,
    extra: ToolsFactory | None,
    request: Resume,
    *,
    mcp_headers: Sequence[str] = (),
    launcher: ChildLauncher | None = None,
) -> ExecutionContext:
    """A stored run goes on as `ruizn resume` would (a tool call in flight that is not
    read-only is answered `interrupted`, never run again), as `request` says: the limits
    and the decisions for the calls it waits on. Raises `decide.ResumeRefused`."""
    # The fleet's database is where its operator pointed the worker: its runs are the
    # fleet's own, not a folder that arrived from elsewhere.
    vouched = evolve(request, vouched=True)
    budget = batch_budget_of(store, run.run_id)
    agent = _agent(run, store, extra, mcp_headers, launcher, budget=budget)

    async def go() -> ExecutionContext:
        async with agent.start_resume(run.run_id, vouched) as session:
            return (await session.drive()).state

    return anyio.run(go)
