"""Law 6 (the reducer half): a corrupt or spliced log is refused, never misread.

`reduce` raises InvalidTransition for a gap in seq, an event applied twice, a second
RunStarted (another run's log appended) and a tool result for a call that is not pending.
"""

from __future__ import annotations

import pytest
from attrs import evolve
from hypothesis import given
from hypothesis import strategies as st

from ruizn.events import (
    LlmCallFailed,
    LlmToken,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from ruizn.reducers import InvalidTransition, rebuild, reduce, start
from ruizn.settings import RunSettings
from ruizn.state import Status, ToolResult, ToolUseBlock
from tests.properties.runs import runs_settings, simulate, tool_results

RUNS = runs_settings(50)


@RUNS
@given(st.data(), st.integers(1, 8), st.integers(1, 3))
def test_reduce_refuses_a_gap_in_seq(data: st.DataObject, max_steps: int, gap: int) -> None:
    run = simulate(data, max_steps=max_steps)
    k = data.draw(st.integers(1, len(run.events) - 1), label="k")
    event = run.events[k]
    with pytest.raises(InvalidTransition):
        reduce(run.states[k - 1], evolve(event, seq=event.seq + gap))
    with pytest.raises(InvalidTransition):
        reduce(run.states[k - 1], evolve(event, seq=event.seq - gap))  # or going back
    if k < len(run.events) - 1:  # a line lost in the middle of the log
        with pytest.raises(InvalidTransition):
            rebuild(run.events[:k] + run.events[k + 1 :])


@RUNS
@given(st.data(), st.integers(1, 8))
def test_reduce_refuses_a_duplicated_event(data: st.DataObject, max_steps: int) -> None:
    run = simulate(data, max_steps=max_steps)
    k = data.draw(st.integers(0, len(run.events) - 1), label="k")
    with pytest.raises(InvalidTransition):
        rebuild((*run.events[: k + 1], run.events[k], *run.events[k + 1 :]))
    with pytest.raises(InvalidTransition):
        reduce(run.states[k], run.events[k])


@RUNS
@given(st.data(), st.integers(1, 8))
def test_reduce_refuses_a_second_run_started(data: st.DataObject, max_steps: int) -> None:
    run = simulate(data, max_steps=max_steps)
    other = simulate(data, max_steps=max_steps)
    with pytest.raises(InvalidTransition):
        rebuild(run.events + other.events)  # another run's log appended as is
    k = data.draw(st.integers(0, len(run.events) - 1), label="k")
    renumbered = evolve(other.events[0], seq=run.states[k].last_seq + 1)
    with pytest.raises(InvalidTransition, match="second run_started"):
        reduce(run.states[k], renumbered)  # even with a seq that follows
    with pytest.raises(InvalidTransition):
        start(evolve(other.events[0], seq=2))


@RUNS
@given(st.data(), st.integers(1, 8))
def test_reduce_refuses_a_tool_call_finished_for_an_unknown_id(
    data: st.DataObject, max_steps: int
) -> None:
    run = simulate(data, max_steps=max_steps)
    asked = {b.id for m in run.final.messages for b in m.content if isinstance(b, ToolUseBlock)}
    stranger = data.draw(st.text(min_size=1).filter(lambda i: i not in asked), label="id")
    for state in run.states:
        result = data.draw(tool_results, label="result")
        seq = state.last_seq + 1
        with pytest.raises(InvalidTransition):
            reduce(state, ToolCallFinished(seq=seq, ts=0.0, id=stranger, result=result))
        with pytest.raises(InvalidTransition):
            reduce(state, ToolCallStarted(seq=seq, ts=0.0, id=stranger, name="read_file"))
        # a call already answered is not pending any more either
        pending = {c.id for c in state.pending_tool_calls}
        for done in sorted(asked - pending):
            with pytest.raises(InvalidTransition):
                reduce(state, ToolCallFinished(seq=seq, ts=0.0, id=done, result=result))


@RUNS
@given(st.data(), st.integers(1, 8))
def test_reduce_refuses_model_and_tool_events_after_run_finished(
    data: st.DataObject, max_steps: int
) -> None:
    run = simulate(data, max_steps=max_steps)
    assert run.final.status is not Status.RUNNING
    seq = run.final.last_seq + 1
    finished = RunFinished(seq=seq, ts=0.0, status=Status.SUCCESS, steps=0, elapsed=0.0)
    with pytest.raises(InvalidTransition):
        reduce(run.final, finished)
    with pytest.raises(InvalidTransition):
        reduce(run.final, ToolCallFinished(seq=seq, ts=0.0, id="x", result=ToolResult.ok("")))
    events = [e for e in run.events if not isinstance(e, RunStarted | RunFinished)]
    for event in events:
        with pytest.raises(InvalidTransition):
            reduce(run.final, evolve(event, seq=seq))


@pytest.mark.parametrize(
    "event",
    [
        LlmToken(seq=3, ts=2.0, text="late"),
        LlmCallFailed(seq=3, ts=2.0, error_type="api_error", message="late"),
    ],
    ids=["llm_token", "llm_call_failed"],
)
def test_reduce_refuses_a_token_after_run_finished(event: LlmToken | LlmCallFailed) -> None:
    first = RunStarted(
        seq=1,
        ts=0.0,
        run_id="r",
        goal="g",
        settings=RunSettings(model="claude-sonnet-5-5", max_steps=1, max_tokens=1024, system=""),
    )
    state = rebuild([first, RunFinished(seq=2, ts=1.0, status=Status.ERROR, steps=0, elapsed=1.0)])
    with pytest.raises(InvalidTransition):
        reduce(state, event)


def test_a_log_must_begin_with_run_started_with_seq_1() -> None:
    with pytest.raises(InvalidTransition):
        rebuild([LlmToken(seq=1, ts=0.0, text="x")])
    with pytest.raises(InvalidTransition):
        rebuild([])
    first = RunStarted(
        seq=2,
        ts=0.0,
        run_id="r",
        goal="g",
        settings=RunSettings(model="m", max_steps=1, max_tokens=1, system=""),
    )
    with pytest.raises(InvalidTransition):
        start(first)
