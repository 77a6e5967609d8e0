"""Forks: the points where a run can be split, and the events a fork begins with. Pure.

A fork (`ruizn fork RUN --at SEQ`) is a new run whose log holds the parent's events up to SEQ
under a new run_started (a new run id, the parent named), so the new log alone rebuilds the
parent's state at SEQ. SEQ must be a point between steps: a SEQ inside a model call or a tool
turn is refused, naming the nearest points on either side (ruizn never cuts back on its own:
the user picks the point they mean).
"""

from __future__ import annotations

from collections.abc import Iterable

from ruizn.events import Event, RunStarted
from ruizn.reducers import reduce, start
from ruizn.state import ExecutionContext, Phase


class ForkRefused(ValueError):
    """A fork that cannot be made as asked; the message is one line for the user."""


def at_rest(state: ExecutionContext) -> bool:
    """Whether a run may be split here: between steps, where a stop leaves nothing half done.

    That is ready to call the model (with no failed attempt of the call pending), done with a
    turn, or finished (wherever the run itself stopped: `resume` knows how to go on from
    there). Inside a model call, between its attempts, or while a tool turn is open is not.
    """
    if state.phase is Phase.FINISHED:
        return True
    return state.phase in (Phase.READY, Phase.DONE) and state.failure is None


def fork_prefix(events: Iterable[Event], at: int) -> tuple[Event, ...]:
    """The parent's events 1..`at`, checked by the reducer, or ForkRefused naming the nearest
    points between steps. Reads `events` only as far as it must."""
    kept: list[Event] = []
    state: ExecutionContext | None = None
    before = 0
    where = ""
    for event in events:
        if state is None:
            if not isinstance(event, RunStarted):
                raise ForkRefused("the log does not begin with run_started")
            state = start(event)
        else:
            state = reduce(state, event)
        if event.seq < at:
            kept.append(event)
            before = event.seq if at_rest(state) else before
            continue
        if event.seq == at:
            kept.append(event)
            if at_rest(state):
                return tuple(kept)
            where = _inside(state)
            continue
        if at_rest(state):
            raise ForkRefused(
                f"seq {at} is {where}: fork at seq {before} or {event.seq}, the nearest"
                " points between steps"
            )
    if state is None or state.last_seq < at:
        count = 0 if state is None else state.last_seq
        raise ForkRefused(f"--at {at} is past the end of the run: its log has {count} events")
    raise ForkRefused(f"seq {at} is {where}: fork at seq {before}, the nearest point between steps")


def _inside(state: ExecutionContext) -> str:
    if state.phase is Phase.STREAMING:
        return f"inside a model call (step {state.step + 1})"
    if state.phase is Phase.TOOLS:
        return f"inside the tool turn of step {state.step}"
    return f"between the attempts of a model call (step {state.step + 1})"
