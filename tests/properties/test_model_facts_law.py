"""The law of kept Models API answers (`ruizn.modelfacts.reusable`): an answer stands in for
asking only when it says the model is there, is about that model, and is less than a day
old; never one that would refuse a run, and never one from the future."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ruizn.modelfacts import FACTS_KEPT_FOR, ModelFacts, reusable

ids = st.sampled_from(["claude-sonnet-5-5", "claude-opus-4-8", "x"])
facts = st.builds(
    ModelFacts,
    id=ids,
    lifecycle=st.sampled_from(["active", "deprecated", "retired"]),
    context_window=st.none() | st.integers(1, 10**7),
)
times = st.floats(0, 4e9, allow_nan=False)
ages = st.floats(-3 * FACTS_KEPT_FOR, 3 * FACTS_KEPT_FOR, allow_nan=False)


@given(model=ids, kept=st.none() | facts, asked_at=times, age=ages)
def test_only_a_fresh_answer_that_the_model_is_there_is_reused(
    model: str, kept: ModelFacts | None, asked_at: float, age: float
) -> None:
    now = asked_at + age
    used = reusable(model, kept, asked_at, now)
    if kept is None or kept.lifecycle == "retired" or kept.id != model:
        assert not used  # asked again before it refuses, or about another model
    else:
        assert used == (0.0 <= now - asked_at < FACTS_KEPT_FOR)


@given(model=ids, kept=facts, asked_at=times, age=ages, later=st.floats(0, FACTS_KEPT_FOR))
def test_an_answer_once_stale_stays_stale(
    model: str, kept: ModelFacts, asked_at: float, age: float, later: float
) -> None:
    now = asked_at + age
    if not reusable(model, kept, asked_at, now) and now - asked_at >= FACTS_KEPT_FOR:
        assert not reusable(model, kept, asked_at, now + later)
