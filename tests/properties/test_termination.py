"""Law 4: the loop always ends, after at most max_steps model calls (the real runner).

- a run whose model behaves (no failed call, no refused reply) ends in success or max_steps;
- whatever the model does, it ends, with exactly one run_finished as its last event, after at
  most max_steps responses, and a run that ends in error says why;
- max_steps is reached only after exactly max_steps responses.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ruizn.decide import Finished, next_action
from ruizn.events import LlmResponse, RunFinished
from ruizn.state import Status
from tests.properties.runs import Run, runs_settings, simulate

RUNS = runs_settings(60)


def _assert_ended(run: Run) -> None:
    assert run.model_calls <= run.max_steps
    responses = sum(isinstance(e, LlmResponse) for e in run.events)
    assert run.final.step == responses <= run.max_steps
    finished = [e for e in run.events if isinstance(e, RunFinished)]
    assert finished == [run.events[-1]], "exactly one run_finished, the last event"
    assert next_action(run.final) == Finished(status=run.final.status)
    if run.final.status is Status.MAX_STEPS:
        assert run.final.step == run.max_steps
    if run.final.status is Status.ERROR:
        assert run.final.error


@RUNS
@given(st.data(), st.integers(1, 8), st.booleans())
def test_the_loop_ends_within_max_steps_whatever_the_model_replies(
    data: st.DataObject, max_steps: int, errors: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=errors)
    _assert_ended(run)
    if not errors:  # only well-behaved replies: never an error
        assert run.final.status in (Status.SUCCESS, Status.MAX_STEPS)


@runs_settings(30)
@given(st.data(), st.integers(1, 6))
def test_a_model_that_always_asks_for_tools_is_stopped_at_max_steps(
    data: st.DataObject, max_steps: int
) -> None:
    run = simulate(data, max_steps=max_steps, tools=True)
    _assert_ended(run)
    assert run.final.status is Status.MAX_STEPS
    assert run.model_calls == run.final.step == max_steps
