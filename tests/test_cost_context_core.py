"""The core's rules for cost, budgets and context (in-process): the reducer refuses what the
rules do not give, decide acts by them, and a clearing never touches the last turn and
always brings the estimate under the limit."""

from __future__ import annotations

from typing import Any

import pytest
from attrs import evolve
from hypothesis import given, settings
from hypothesis import strategies as st

from ruizn.decide import ClearContext, CompactContext, Finish, next_action
from ruizn.events import (
    BudgetSpent,
    ClearedResult,
    ContextCleared,
    Event,
    LlmCallStarted,
    LlmResponse,
    RunFinished,
    RunStarted,
    ToolCallFinished,
)
from ruizn.limits import Limits
from ruizn.reducers import InvalidTransition, rebuild, reduce
from ruizn.resuming import ResumeRefused, plan_resume
from ruizn.rules import CONTEXT_EXCEEDED
from ruizn.settings import RunSettings
from ruizn.state import (
    ExecutionContext,
    Status,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from ruizn.window import added_tokens, plan_clearing

PRICED = "fixed prices"


def run(settings: RunSettings, sizes: list[int], *, cost: float | None = 0.25) -> ExecutionContext:
    """A run that read one result of each size, a step each, ending ready for the next call."""
    events: list[Event] = [RunStarted(seq=1, ts=0.0, run_id="r", goal="g", settings=settings)]

    def add(cls: type[Any], **fields: Any) -> None:
        events.append(cls(seq=len(events) + 1, ts=0.0, **fields))

    for step, size in enumerate(sizes, start=1):
        # The prompt as an API would count it: what the run estimates (at least 10 tokens).
        prompt = max(rebuild(events).context_tokens, 10)
        add(LlmCallStarted, step=step)
        call = ToolUseBlock(id=f"t{step}", name="read_file", input={"path": f"f{step}"})
        add(
            LlmResponse,
            content=(call,),
            stop_reason="tool_use",
            usage=Usage(input_tokens=prompt, output_tokens=5),
            cost=cost,
            priced_by=PRICED,
        )
        add(ToolCallFinished, id=f"t{step}", result=ToolResult.ok("x" * size))
        action = next_action(rebuild(events))
        if isinstance(action, ClearContext):
            add(ContextCleared, results=action.results, limit=action.limit)
    return rebuild(events)


def step_on(state: ExecutionContext, cls: type[Any], **fields: Any) -> ExecutionContext:
    return reduce(state, cls(seq=state.last_seq + 1, ts=0.0, **fields))


BUDGET = RunSettings(model="m", max_steps=50, max_cost=0.5)


def test_a_spent_budget_finishes_the_run_max_cost_and_forbids_the_next_call() -> None:
    state = run(BUDGET, [10, 10])
    assert state.cost == 0.5
    assert next_action(state) == Finish(status=Status.MAX_COST)
    with pytest.raises(InvalidTransition, match="past a limit"):
        step_on(state, LlmCallStarted, step=3)
    done = step_on(
        state, RunFinished, status=Status.MAX_COST, steps=2, elapsed=0.0, usage=state.usage
    )
    assert done.status is Status.MAX_COST


def test_the_reducer_refuses_a_max_cost_finish_the_budget_does_not_give() -> None:
    state = run(BUDGET, [10])
    with pytest.raises(InvalidTransition, match="no limit of the run stops it"):
        step_on(state, RunFinished, status=Status.MAX_COST, steps=1, elapsed=0.0, usage=state.usage)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"cost": -1.0, "priced_by": PRICED}, "the cost -1.0"),
        ({"cost": float("nan"), "priced_by": PRICED}, "the cost nan"),
        ({"cost": 0.1, "priced_by": None}, "a cost but no price list"),
    ],
)
def test_the_reducer_refuses_a_cost_that_cannot_be(fields: dict[str, Any], problem: str) -> None:
    state = step_on(run(BUDGET, []), LlmCallStarted, step=1)
    with pytest.raises(InvalidTransition, match=problem):
        step_on(
            state, LlmResponse, content=(TextBlock(text="hi"),), stop_reason="end_turn", **fields
        )


def test_unknown_and_unlogged_prices_make_the_total_unknown() -> None:
    unknown = run(RunSettings(model="m"), [10], cost=None)
    assert unknown.cost_unknown == 1
    assert unknown.total_cost is None
    started = step_on(run(RunSettings(model="m"), []), LlmCallStarted, step=1)
    older = step_on(
        started,
        LlmResponse,
        content=(TextBlock(text="hi"),),
        stop_reason="end_turn",
        usage=Usage(input_tokens=7),
    )
    assert older.unpriced_steps == 1
    assert older.total_cost is None


def test_a_resume_adds_money_only_when_asked_and_above_the_spend() -> None:
    stopped = run(BUDGET, [10, 10])
    stopped = step_on(
        stopped, RunFinished, status=Status.MAX_COST, steps=2, elapsed=0.0, usage=stopped.usage
    )
    with pytest.raises(ResumeRefused, match="new total above"):
        plan_resume(stopped, Limits())
    with pytest.raises(ResumeRefused, match="leaves nothing to spend"):
        plan_resume(stopped, Limits(max_cost=0.5))
    plan = plan_resume(stopped, Limits(max_cost=1.0))
    assert plan is not None
    assert plan.limits.max_cost == 1.0


def test_a_shared_budget_spent_stops_the_run_and_a_resume_clears_it() -> None:
    state = run(RunSettings(model="m"), [10])
    with pytest.raises(InvalidTransition, match="under the limit"):
        step_on(state, BudgetSpent, budget="b", limit=2.0, spent=1.0)
    spent = step_on(state, BudgetSpent, budget="b", limit=2.0, spent=2.1)
    assert next_action(spent) == Finish(status=Status.MAX_COST)


CONTEXT = RunSettings(model="m", max_steps=50, max_context=3_000)


def test_a_clearing_keeps_the_estimate_under_the_limit_and_spares_the_last_turn() -> None:
    state = run(CONTEXT, [4_000, 4_000, 4_000, 4_000])
    assert state.cleared  # the history passed 3,000 tokens
    assert state.context_tokens <= 3_000
    last = state.messages[-1].content[0]
    assert isinstance(last, ToolResultBlock)
    assert last.content == "x" * 4_000
    assert last.tool_use_id not in state.cleared


def test_the_reducer_refuses_a_call_over_the_limit_and_a_clearing_of_the_last_turn() -> None:
    state = run(RunSettings(model="m", max_steps=50), [4_000, 4_000, 4_000])
    assert state.context_tokens > 3_000  # no limit: nothing was cleared
    over = evolve(state, settings=evolve(state.settings, max_context=3_000))
    with pytest.raises(InvalidTransition, match="past the run's context limit"):
        step_on(over, LlmCallStarted, step=4)
    last = ClearedResult(tool_use_id="t3", name="read_file", size=4_000, placeholder="[gone]")
    with pytest.raises(InvalidTransition, match="not in the history before the last turn"):
        step_on(over, ContextCleared, results=(last,), limit=3_000)


def test_the_reducer_refuses_a_placeholder_that_lies_about_the_result() -> None:
    state = run(RunSettings(model="m", max_steps=50), [2_000, 10])
    wrong = ClearedResult(tool_use_id="t1", name="read_file", size=5, placeholder="[gone]")
    with pytest.raises(InvalidTransition, match="size or placeholder"):
        step_on(state, ContextCleared, results=(wrong,), limit=100)
    other = ClearedResult(tool_use_id="t1", name="write_file", size=2_000, placeholder="[gone]")
    with pytest.raises(InvalidTransition, match="names another tool"):
        step_on(state, ContextCleared, results=(other,), limit=100)


def test_a_last_turn_that_cannot_fit_ends_the_run_with_the_context_error() -> None:
    state = run(RunSettings(model="m", max_steps=50), [20_000])
    limited = evolve(state, settings=evolve(state.settings, max_context=1_000))
    assert not plan_clearing(limited).fits
    # The limit is the user's (--max-context): the fix is resuming with a larger one, sized
    # for the history, not "a model with a larger window".
    tokens = limited.context_tokens
    wanted = -(-tokens * 5 // 4 // 1000) * 1000
    assert next_action(limited) == Finish(
        status=Status.ERROR,
        error=f"the conversation (about {tokens:,} tokens) does not fit this run's"
        f" --max-context 1,000 even with every older tool result cleared: resume the run"
        f" with --max-context {wanted} to go on",
    )
    # Past the model's own window, a larger limit cannot help: with compaction off
    # (--compact off), the window error.
    off = evolve(limited.settings, context_window=tokens, compact_at=0)
    assert next_action(evolve(limited, settings=off)) == Finish(
        status=Status.ERROR, error=CONTEXT_EXCEEDED
    )
    # The model's window (no --max-context given): the window error, as before.
    default = evolve(state, settings=evolve(state.settings, context_window=1_500, compact_at=0))
    assert next_action(default) == Finish(status=Status.ERROR, error=CONTEXT_EXCEEDED)
    # With compaction on (the default where the window is known), the history is compacted.
    compacting = evolve(state, settings=evolve(state.settings, context_window=1_500))
    assert next_action(compacting) == CompactContext()


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=9_000), min_size=1, max_size=12),
    limit=st.integers(min_value=500, max_value=8_000),
)
def test_every_call_a_run_makes_is_under_its_limit_or_the_run_ends(
    sizes: list[int], limit: int
) -> None:
    """The law the reducer holds: a run with a context limit either sends a request the
    estimate puts under it, or finishes with the context error; the last turn is whole."""
    settings_ = RunSettings(model="m", max_steps=50, max_context=limit)
    events: list[Event] = [RunStarted(seq=1, ts=0.0, run_id="r", goal="g", settings=settings_)]
    state = rebuild(events)
    for step, size in enumerate(sizes, start=1):
        action = next_action(state)
        if isinstance(action, ClearContext):
            state = step_on(state, ContextCleared, results=action.results, limit=action.limit)
            action = next_action(state)
        if isinstance(action, Finish):
            assert action.error is not None
            assert f"--max-context {limit:,} even with every older tool result cleared" in (
                action.error
            )
            assert state.context_tokens > limit
            return
        assert state.context_tokens <= limit
        state = step_on(state, LlmCallStarted, step=step)
        call = ToolUseBlock(id=f"t{step}", name="read_file", input={"path": f"f{step}"})
        state = step_on(
            state,
            LlmResponse,
            content=(call,),
            stop_reason="tool_use",
            usage=Usage(input_tokens=state.context_tokens, output_tokens=5),
        )
        state = step_on(state, ToolCallFinished, id=f"t{step}", result=ToolResult.ok("y" * size))
        last = state.messages[-1].content[0]
        assert isinstance(last, ToolResultBlock)
        assert last.content == "y" * size
        assert state.context_tokens >= added_tokens("y" * size)


def test_the_new_events_and_fields_go_through_the_log_codec_unchanged() -> None:
    from ruizn.serde import decode, encode

    item = ClearedResult(tool_use_id="t1", name="read_file", size=9, placeholder="[gone]")
    priced = Usage(input_tokens=3, cache_creation_input_tokens=2, cache_creation_1h_input_tokens=1)
    for event in (
        ContextCleared(seq=5, ts=1.5, results=(item,), limit=3_000),
        BudgetSpent(seq=6, ts=1.5, budget="batch", limit=2.0, spent=2.25),
        LlmResponse(
            seq=7, ts=1.5, content=(), stop_reason=None, usage=priced, cost=0.5, priced_by=PRICED
        ),
        RunFinished(seq=8, ts=1.5, status=Status.MAX_COST, steps=1, elapsed=0.0, cost=0.5),
    ):
        assert decode(encode(event)) == event
    # A call logged without the new fields is written as it was before they existed.
    plain = LlmResponse(seq=7, ts=1.5, content=(), stop_reason=None, usage=Usage(input_tokens=3))
    assert "cost" not in encode(plain)
    assert "1h" not in encode(plain)


def test_a_run_cut_mid_call_has_an_unknown_cost_never_the_calls_before() -> None:
    # Its input was sent and is billed, but the API never said the usage: unknown, not $0.50.
    cut = step_on(run(BUDGET, [10]), LlmCallStarted, step=2)
    assert cut.total_cost == 0.25
    done = step_on(
        cut, RunFinished, status=Status.CANCELLED, steps=cut.step, elapsed=0.0, usage=cut.usage
    )
    assert done.total_cost is None
    assert done.cost_unknown == 1
