"""Laws over continue and fork: the log stays the truth across both.

- continue (a person's message after a run ended, `runs.simulate(continues=True)`): replay of
  every prefix is the state the loop had then, the transcript holds each message once, where
  it was given, and a message's step budget is kept;
- fork: at every point between steps, the fork's log alone rebuilds the parent's state there
  (but for the run id); at every other seq it is refused, naming the nearest points on
  either side, and none lies between; a fork driven on by the real runner (resume, or a
  continue) is again rebuilt exactly by its log.
"""

from __future__ import annotations

import itertools
import re

import anyio
import pytest
from attrs import evolve
from hypothesis import given
from hypothesis import strategies as st

from ruizn.effects.models.function import FunctionModel
from ruizn.effects.runlog.sink import MemorySink
from ruizn.effects.tools.base import ToolRegistry
from ruizn.events import Event, LlmCallStarted, Parent, RunResumed, RunStarted, UserMessage
from ruizn.fork import ForkRefused, at_rest, fork_prefix
from ruizn.limits import Limits
from ruizn.reducers import rebuild
from ruizn.resuming import ResumeRefused, plan_continue, plan_resume
from ruizn.shell.runner import AgentRunner
from ruizn.state import ExecutionContext, Status, TextBlock
from tests.properties.runs import _DrawnTool, _Model, runs_settings, simulate, texts

RUNS = runs_settings(60)
NEAREST = re.compile(r"fork at seq (\d+)(?: or (\d+))?")


@RUNS
@given(st.data(), st.integers(1, 5), st.booleans(), st.booleans())
def test_replay_of_every_prefix_is_the_live_state_across_continues(
    data: st.DataObject, max_steps: int, errors: bool, approvals: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=errors, approvals=approvals, continues=True)
    assert [e.seq for e in run.events] == list(range(1, len(run.events) + 1))
    assert rebuild(run.events) == run.final
    for k in range(1, len(run.events) + 1):
        assert rebuild(run.events[:k]) == run.states[k - 1]
    assert run.final.messages == run.expected_messages
    roles = [m.role for m in run.final.messages]
    assert all(a != b for a, b in itertools.pairwise(roles))
    for i, event in enumerate(run.events):
        if not isinstance(event, UserMessage):
            continue
        # logged right after the run_resumed that takes the run on, and seen by the model
        assert isinstance(run.events[i - 1], RunResumed)
        after = run.states[i]
        assert after.messages[-1].content[-1] == TextBlock(text=event.text)
        # the message's budget: no step past the total its run_resumed set
        budget_total = run.events[i - 1].max_steps  # type: ignore[union-attr]
        later_steps = [
            e.step
            for e in run.events[i:]
            if isinstance(e, LlmCallStarted) and not _resumed_between(run.events, i, e.seq)
        ]
        assert all(step <= budget_total for step in later_steps)


def _resumed_between(events: tuple[Event, ...], start: int, seq: int) -> bool:
    return any(isinstance(e, RunResumed) for e in events[start : seq - 1])


def _fork(events: tuple[Event, ...], at: int) -> tuple[Event, ...]:
    prefix = fork_prefix(iter(events), at)
    first = prefix[0]
    assert isinstance(first, RunStarted)
    head = evolve(
        first, run_id="fork-1", ts=first.ts + 1, parent=Parent(run_id=first.run_id, seq=at)
    )
    return (head, *prefix[1:])


@RUNS
@given(st.data(), st.integers(1, 5), st.booleans(), st.booleans(), st.booleans())
def test_a_fork_rebuilds_the_parent_at_every_point_between_steps_and_is_refused_elsewhere(
    data: st.DataObject, max_steps: int, errors: bool, crashes: bool, approvals: bool
) -> None:
    run = simulate(
        data,
        max_steps=max_steps,
        errors=errors,
        crashes=crashes,
        approvals=approvals,
        continues=True,
    )
    rest = [k for k in range(1, len(run.events) + 1) if at_rest(run.states[k - 1])]
    assert rest[0] == 1  # a fork can always start from the goal
    for k in range(1, len(run.events) + 1):
        if k in rest:
            fork = _fork(run.events, k)
            assert fork[1:] == run.events[1:k]
            assert rebuild(fork) == evolve(run.states[k - 1], run_id="fork-1")
            continue
        with pytest.raises(ForkRefused) as refused:
            fork_prefix(iter(run.events), k)
        found = NEAREST.search(str(refused.value))
        assert found is not None, str(refused.value)
        before = int(found.group(1))
        after = int(found.group(2)) if found.group(2) else None
        assert before == max(r for r in rest if r < k)
        later = [r for r in rest if r > k]
        assert after == (later[0] if later else None)
    with pytest.raises(ForkRefused, match="past the end"):
        fork_prefix(iter(run.events), len(run.events) + 1)


@runs_settings(40)
@given(st.data(), st.integers(1, 4), st.booleans())
def test_a_fork_driven_on_by_the_runner_is_rebuilt_exactly_by_its_log(
    data: st.DataObject, max_steps: int, errors: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=errors, continues=True)
    rest = [k for k in range(1, len(run.events) + 1) if at_rest(run.states[k - 1])]
    at = data.draw(st.sampled_from(rest), label="fork at")
    fork = _fork(run.events, at)
    state = rebuild(fork)
    ran: list[str] = []
    registry = ToolRegistry(
        [
            _DrawnTool("look", data, ran, read_only=True),
            _DrawnTool("change", data, ran, read_only=False),
        ]
    )
    runner = AgentRunner(
        provider=FunctionModel(_Model(data, tools=None, errors=errors)),
        registry=registry,
        sink=(sink := MemorySink()),
        clock=lambda: 2.0e9,
        timer=lambda: 0.0,
        state=state,
    )
    message = None
    try:
        plan = plan_resume(state, Limits(max_steps=state.step + 2))
    except ResumeRefused:
        plan = None
    if plan is None or data.draw(st.booleans(), label="continue instead?"):
        message = data.draw(texts.filter(str.strip), label="message")
        try:
            plan = plan_continue(state, message, Limits(max_steps=2))
        except ResumeRefused:
            return  # calls left waiting: only a resume with decisions goes on from here
    runner.resume(plan, message=message)
    final = anyio.run(runner.drive)
    assert rebuild((*fork, *sink.events)) == final
    assert final.status is not Status.RUNNING
    assert final.run_id == "fork-1"
    assert _is_prefix(run.states[at - 1], final)


def _is_prefix(parent: ExecutionContext, child: ExecutionContext) -> bool:
    """The fork's history begins with the parent's history at the fork point (a message
    may join the parent's last user message)."""
    head = parent.messages[:-1]
    return child.messages[: len(head)] == head
