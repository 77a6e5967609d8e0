"""The reducer's cases for subagents: a child run started by an `agent` call, and its end,
whose usage and cost become part of this run's (one budget for the tree).

Pure; `ruizn.reducers.reduce` dispatches to them."""

from __future__ import annotations

import math
import re

from attrs import evolve

from ruizn.events import SubagentFinished, SubagentStarted
from ruizn.rules import InvalidTransition
from ruizn.state import ChildRun, ExecutionContext, Status, Usage

__all__ = ["on_subagent_finished", "on_subagent_started"]

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


def on_subagent_started(state: ExecutionContext, event: SubagentStarted) -> ExecutionContext:
    if event.id not in state.tools_in_flight:
        raise InvalidTransition(f"subagent_started for {event.id!r}, a call not running")
    if any(child.id == event.id for child in state.children):
        # A resumed call goes on with the child it started: never a second one.
        raise InvalidTransition(f"subagent_started twice for {event.id!r}")
    if any(child.run_id == event.run_id for child in state.children) or (
        event.run_id == state.run_id
    ):
        raise InvalidTransition(f"subagent_started with a run id in use ({event.run_id!r})")
    if _RUN_ID.fullmatch(event.run_id) is None:
        # A resume finds the child by this id: never a path, nor another folder's name.
        raise InvalidTransition(f"subagent_started with a run id that is not one: {event.run_id!r}")
    names = {definition.name for definition in state.settings.subagents}
    if event.agent not in names:
        raise InvalidTransition(f"subagent_started for an agent the run lacks ({event.agent!r})")
    child = ChildRun(id=event.id, run_id=event.run_id, agent=event.agent)
    return evolve(state, children=(*state.children, child), last_seq=event.seq)


def on_subagent_finished(state: ExecutionContext, event: SubagentFinished) -> ExecutionContext:
    found = [i for i, child in enumerate(state.children) if child.id == event.id]
    if not found:
        raise InvalidTransition(f"subagent_finished for {event.id!r}, which started none")
    index = found[0]
    child = state.children[index]
    if child.run_id != event.run_id:
        raise InvalidTransition(f"subagent_finished names another run than {child.run_id!r}")
    if child.status is not None and child.status is not Status.AWAITING_APPROVAL:
        # Only a child that stopped for a decision goes on (resumed) and ends again.
        raise InvalidTransition(f"subagent_finished twice for {event.id!r}")
    if event.id not in state.tools_in_flight:
        raise InvalidTransition(f"subagent_finished for {event.id!r}, a call not running")
    if bool(event.awaiting) is not (event.status is Status.AWAITING_APPROVAL):
        raise InvalidTransition("subagent_finished lists awaited calls iff it awaits approval")
    if event.status is Status.RUNNING or event.steps < 0:
        raise InvalidTransition("subagent_finished with status running or negative steps")
    if _less(event.usage, Usage()) is None:
        raise InvalidTransition("subagent_finished with negative token counts")
    if event.cost is not None and not (math.isfinite(event.cost) and event.cost >= 0):
        raise InvalidTransition("subagent_finished with a cost that is not a price")
    # The event carries the child's totals; the run adds what is new since its last end.
    before = child if child.status is not None else None
    usage = event.usage if before is None else _less(event.usage, before.usage)
    if usage is None:
        raise InvalidTransition("subagent_finished with totals below the child's last ones")
    ended = evolve(
        child,
        status=event.status,
        steps=event.steps,
        usage=event.usage,
        cost=event.cost,
        error=event.error,
        awaiting=event.awaiting,
    )
    children = (*state.children[:index], ended, *state.children[index + 1 :])
    was_unknown = before is not None and before.cost is None
    known_before = 0.0 if before is None or before.cost is None else before.cost
    return evolve(
        state,
        children=children,
        usage=state.usage + usage,
        cost=state.cost + max(0.0, (event.cost or 0.0) - known_before),
        cost_unknown=state.cost_unknown + (event.cost is None) - was_unknown,
        last_seq=event.seq,
    )


def _less(total: Usage, part: Usage) -> Usage | None:
    """`total - part`, field by field; None when a field would fall below 0."""
    values = {
        name: getattr(total, name) - getattr(part, name)
        for name in (
            "input_tokens",
            "output_tokens",
            "cache_creation_input_tokens",
            "cache_read_input_tokens",
            "cache_creation_1h_input_tokens",
        )
    }
    return None if min(values.values()) < 0 else Usage(**values)
