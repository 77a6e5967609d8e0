"""A fleet run's subagents: each child a queued run of its own, which any worker may take.

When a fleet run's model calls `agent`, the parent's worker does not build the child: it
queues it, as a run whose workflow id is the child's run id, on the children's queue
(`CHILD_QUEUE`, apart from the runs': parents waiting on their children could otherwise
fill every slot of one queue and wait for ever). The input is signed with the operator's
key like every queued run and carries the child's parent (`RunInput.parent`): the worker
that takes it starts it as that agent's child (its run_started names the parent; its hooks
are told the agent), with the settings the parent gave it (`subagents.child_settings`).

The parent's `agent` call waits until no workflow of the child is queued or running, then
reads the child's state from the events table, as it reads a child that ended before a
crash. Nothing here is a DBOS step of the parent's workflow: a parent recovered after its
worker died (or resumed) queues the same id again, which DBOS keeps as the one workflow it
has, so a child is never started twice; a child whose worker died is recovered or taken
over like any run, and goes on in its own log.

One budget for the tree, held in the database: the first child of a run with `max_cost`
opens the tree's budget (`tree-ROOT`, at what the parent has spent so far) and every run
of the tree is charged to it as its answers are stored; each asks it before each model
call, so a child on another worker sees what its parent and siblings spent. A child in a
batch with a budget draws on the batch's too.

A child that stops for a decision stops its parent too; `ruizn resume --db PARENT
--approve ID` hands the decision on (the parent's worker queues the child's resume order,
fleet/resume.py) and the tree goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import anyio
from attrs import evolve

from ruizn.effects.runlog.store import RunStore
from ruizn.fleet.database import EventStore
from ruizn.fleet.driver import RunInput, input_to_json
from ruizn.fleet.resume import (
    ACTIVE,
    FleetResumeRefused,
    check_resume,
    next_resume_id,
    order_to_json,
)
from ruizn.fleet.signing import FleetKey
from ruizn.limits import Limits
from ruizn.shell.children import ChildFailed, ChildLaunch, TreeBudget
from ruizn.shell.outcome import RunResult, Session
from ruizn.state import ExecutionContext, Status

__all__ = ["CHILD_QUEUE", "ChildQueue", "FleetChildren", "tree_id"]

CHILD_QUEUE = "ruizn.children"
# Seconds between two looks at a child's workflows while its parent waits: from the first
# to the last, half as many again each time (a short child is seen at once, a long one
# costs the database a query a second).
POLL_FIRST, POLL_LAST = 0.05, 1.0


class ChildQueue(Protocol):
    """The fleet's queue, as a parent's worker uses it for its children (fleet/app.py)."""

    def enqueue(self, workflow_id: str, payload: dict[str, Any], *, resume: bool) -> None:
        """Queue a run (or, `resume`, a resume order) on the children's queue; an id that
        has a workflow already is left as it is."""
        ...

    def workflows(self, run_id: str) -> dict[str, tuple[str, Any]]:
        """The run's workflows (its own and its resume orders): id -> (status, output, or
        for one that raised, its error's text)."""
        ...


def tree_id(launch: ChildLaunch) -> str:
    """The id of the budget of the tree `launch` is in: its top run's."""
    return f"tree-{launch.parent.root or launch.parent.run_id}"


class FleetChildren:
    """The children's launcher of one fleet run (`ChildRuns`' launcher): each child queued,
    waited for, and read back from the events table."""

    def __init__(
        self,
        *,
        queue: ChildQueue,
        events: EventStore,
        store: RunStore,
        key: FleetKey | None,
        workspace: str,
    ) -> None:
        """`workspace`: the parent's as it was queued (relative to the taking worker's)."""
        self._queue = queue
        self._events = events
        self._store = store
        self._key = key
        self._workspace = workspace

    async def __call__(self, launch: ChildLaunch, tree: TreeBudget) -> RunResult:
        run = RunInput(
            run_id=launch.run_id,
            goal=launch.prompt,
            settings=evolve(launch.settings, workspace=self._workspace),
            parent=launch.parent,
        )
        await anyio.to_thread.run_sync(self._budgets, launch)
        decided = launch.decided if launch.resume else {}
        if decided.get("approve") or decided.get("deny"):
            await self._idle(run.run_id)  # a recovered parent: its order may be on the way
            await anyio.to_thread.run_sync(self._order, run, decided)
        else:
            payload = self._signed(input_to_json(run))
            await anyio.to_thread.run_sync(
                lambda: self._queue.enqueue(run.run_id, payload, resume=False)
            )
        workflows = await self._idle(run.run_id)
        state = await anyio.to_thread.run_sync(self._state, run.run_id)
        if state is None or state.status is Status.RUNNING:
            # Refused (not signed), or its workflow raised or gave up (DBOS's recovery
            # attempts spent): the model hears it; the child's log stays as it is.
            status, output = workflows.get(run.run_id, ("not queued", None))
            why = output.get("error") if isinstance(output, dict) else output
            done = "did not start it" if state is None else f"ended its workflow {status}"
            raise ChildFailed(f"the fleet {done}: {why or 'no error was given'}")
        return Session.of(state, run.run_id, None)

    def _signed(self, payload: dict[str, Any]) -> dict[str, Any]:
        # Without a key (a fleet run only with --trust), unsigned: a worker shows its grant.
        return payload if self._key is None else self._key.signed(payload)

    def _budgets(self, launch: ChildLaunch) -> None:
        """The child joins its parent's budgets: the batch's, and the tree's (opened by the
        top run's first child, at what the top run has spent)."""
        events, parent = self._events, launch.parent.run_id
        batch = events.budget_of(parent)
        if batch is not None:
            events.join_budget(batch, launch.run_id)
        tree = tree_id(launch)
        if launch.parent.root is None and launch.limit is not None:
            events.open_tree(tree, launch.limit, launch.spent, parent)
        if events.budget(tree) is not None:
            events.join_tree(tree, launch.run_id)

    async def _idle(self, run_id: str) -> dict[str, tuple[str, Any]]:
        """The child's workflows once none is queued or running."""
        pause = POLL_FIRST
        while True:
            found = await anyio.to_thread.run_sync(self._queue.workflows, run_id)
            if not any(status in ACTIVE for status, _ in found.values()):
                return found
            await anyio.sleep(pause)
            pause = min(POLL_LAST, pause * 1.5)

    def _state(self, run_id: str) -> ExecutionContext | None:
        if not self._events.has_run(run_id):
            return None
        return self._store.load(self._store.find(run_id)).state

    def _order(self, run: RunInput, decided: Mapping[str, Any]) -> None:
        """The child's resume order with the person's decisions, when the child still waits
        on the calls they decide (a recovered parent's order already applied is not given
        again)."""
        state = self._state(run.run_id)
        if state is None or state.status is not Status.AWAITING_APPROVAL:
            return
        waiting = {call.id for call in state.awaiting_approval} | {
            call.id for child in state.children_awaiting for call in child.awaiting
        }  # (its own calls, and its children's: they go on down)
        approve = tuple(i for i in decided.get("approve", ()) if i in waiting or i == "all")
        deny = tuple(i for i in decided.get("deny", ()) if i in waiting or i == "all")
        if not (approve or deny):
            return
        try:
            checked = check_resume(
                run.run_id,
                state,
                (),
                limits=Limits(),  # as a child resumed in-process: `Resume`'s own
                approve=approve,
                deny=deny,
                reason=decided.get("reason") if deny else None,
            )
        except FleetResumeRefused as exc:
            raise ChildFailed(str(exc)) from None
        order = checked.order(run, after_seq=state.last_seq)
        workflow_id = next_resume_id(run.run_id, self._queue.workflows(run.run_id))
        self._queue.enqueue(workflow_id, self._signed(order_to_json(order)), resume=True)
