"""Law 4: the loop always ends, after at most max_steps model calls.

Precisely, with `last` the reply to the last model call (retries are the same call):

- no model call at all (max_steps 0)                       -> max_steps
- `last` failed for good (an attempt not retried)          -> error
- `last` holds a tool_use (whatever its stop_reason)       -> max_steps, after max_steps calls
  (the calls are answered first: run, or refused when the stop_reason is max_tokens)
- `last` is text only, stop_reason end_turn/stop_sequence  -> success
- `last` is text only, any other stop_reason (max_tokens, refusal, tool_use, pause_turn,
  None, ...)                                               -> error

So a run never ends in error unless the model gave such a reply or a call failed for good.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ruizn.decide import Finished, next_action
from ruizn.events import LlmResponse, RunFinished
from ruizn.state import Status
from tests.properties.runs import SUCCESS_STOPS, Run, runs_settings, simulate

RUNS = runs_settings(80)


def _expected_status(run: Run) -> Status:
    if not run.replies:
        return Status.MAX_STEPS
    last = run.replies[-1]
    if last.fatal is not None:
        return Status.ERROR
    if last.tool_uses:
        return Status.MAX_STEPS
    return Status.SUCCESS if last.stop_reason in SUCCESS_STOPS else Status.ERROR


def _assert_ended(run: Run) -> None:
    assert run.model_calls <= run.max_steps
    assert run.model_calls == len(run.replies)
    responses = sum(isinstance(e, LlmResponse) for e in run.events)
    assert run.final.step == responses
    finished = [e for e in run.events if isinstance(e, RunFinished)]
    assert finished == [run.events[-1]], "exactly one run_finished, the last event"
    assert next_action(run.final) == Finished(status=run.final.status)
    assert run.final.status is _expected_status(run)
    if run.final.status is Status.MAX_STEPS:
        assert run.model_calls == run.max_steps
    if run.final.status is Status.ERROR:
        assert run.final.error


@RUNS
@given(st.data(), st.integers(0, 10), st.booleans())
def test_the_loop_ends_within_max_steps_whatever_the_model_replies(
    data: st.DataObject, max_steps: int, errors: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=errors)
    _assert_ended(run)
    if not errors:  # only well-behaved replies: never an error
        assert run.final.status in (Status.SUCCESS, Status.MAX_STEPS)


@runs_settings(40)
@given(st.data(), st.integers(0, 10))
def test_a_model_that_always_asks_for_tools_is_stopped_at_max_steps(
    data: st.DataObject, max_steps: int
) -> None:
    run = simulate(data, max_steps=max_steps, tools=True)
    _assert_ended(run)
    assert run.final.status is Status.MAX_STEPS
    assert run.model_calls == run.final.step == max_steps
