"""The core's rules for a structured answer: the reducer checks every output_checked again,
and a run with an output schema never finishes success without a valid output."""

from __future__ import annotations

from typing import Any

import pytest

from ruizn.decide import CheckOutput, Finish, next_action
from ruizn.events import (
    LlmCallStarted,
    LlmResponse,
    OutputChecked,
    RunFinished,
    RunResumed,
    RunStarted,
    UserMessage,
)
from ruizn.reducers import InvalidTransition, reduce, start
from ruizn.settings import RunSettings
from ruizn.state import ExecutionContext, Phase, Status, TextBlock, ToolUseBlock

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def _answered(content: Any, *, mode: str = "format", retries: int = 2) -> ExecutionContext:
    settings = RunSettings(
        model="m", output_schema=SCHEMA, output_mode=mode, output_retries=retries
    )
    state = start(RunStarted(seq=1, ts=0.0, run_id="r", goal="g", settings=settings))
    state = reduce(state, LlmCallStarted(seq=2, ts=0.0, step=1))
    stop = "tool_use" if any(isinstance(b, ToolUseBlock) for b in content) else "end_turn"
    return reduce(state, LlmResponse(seq=3, ts=0.0, content=content, stop_reason=stop))


def _finished(state: ExecutionContext, status: Status) -> ExecutionContext:
    return reduce(
        state,
        RunFinished(seq=state.last_seq + 1, ts=0.0, status=status, steps=state.step, elapsed=0.0),
    )


def test_a_log_cannot_claim_a_valid_output_the_schema_refuses() -> None:
    state = _answered((TextBlock(text='{"n": "three"}'),))
    with pytest.raises(InvalidTransition, match="disagrees"):
        reduce(state, OutputChecked(seq=4, ts=0.0, valid=True, output={"n": "three"}))
    with pytest.raises(InvalidTransition, match="success without a valid output"):
        _finished(state, Status.SUCCESS)


def test_a_miss_goes_back_to_the_model_then_ends_output_invalid() -> None:
    state = _answered((TextBlock(text="three"),), retries=0)
    action = next_action(state)
    assert isinstance(action, CheckOutput)
    assert not action.verdict.valid
    verdict = action.verdict
    after = reduce(state, OutputChecked(seq=4, ts=0.0, valid=False, error=verdict.error))
    assert after.phase is Phase.DONE  # no retries left: nothing is sent back
    final = next_action(after)
    assert isinstance(final, Finish)
    assert final.status is Status.OUTPUT_INVALID
    assert _finished(after, Status.OUTPUT_INVALID).status is Status.OUTPUT_INVALID

    retried = _answered((TextBlock(text="three"),), retries=1)
    back = reduce(retried, OutputChecked(seq=4, ts=0.0, valid=False, error=verdict.error))
    assert back.phase is Phase.READY
    assert "not JSON" in back.messages[-1].content[0].text  # type: ignore[union-attr]
    with pytest.raises(InvalidTransition, match="retries are not spent"):
        _finished(_answered((TextBlock(text="three"),), retries=1), Status.OUTPUT_INVALID)


def test_the_final_tool_call_is_answered_by_the_check_and_ends_the_run() -> None:
    call = ToolUseBlock(id="t1", name="final_output", input={"n": 3})
    state = _answered((call,), mode="tool")
    action = next_action(state)
    assert isinstance(action, CheckOutput)
    assert action.verdict.call_id == "t1"
    verdict = action.verdict
    after = reduce(
        state,
        OutputChecked(seq=4, ts=0.0, valid=True, output=verdict.output, call_id="t1"),
    )
    assert after.phase is Phase.DONE
    assert after.output == {"n": 3}
    assert after.messages[-1].role == "user"  # the call is answered: the history is whole
    assert next_action(after) == Finish(status=Status.SUCCESS)


def test_a_new_message_asks_for_a_new_checked_answer() -> None:
    state = _answered((TextBlock(text='{"n": 1}'),))
    state = reduce(state, OutputChecked(seq=4, ts=0.0, valid=True, output={"n": 1}))
    state = _finished(state, Status.SUCCESS)
    state = reduce(state, RunResumed(seq=state.last_seq + 1, ts=0.0, max_steps=5))
    state = reduce(state, UserMessage(seq=state.last_seq + 1, ts=0.0, text="and Paris?"))
    assert not state.output_valid
    state = reduce(state, LlmCallStarted(seq=state.last_seq + 1, ts=0.0, step=2))
    reply = (TextBlock(text="Paris is bigger."),)
    state = reduce(
        state, LlmResponse(seq=state.last_seq + 1, ts=0.0, content=reply, stop_reason="end_turn")
    )
    action = next_action(state)
    assert isinstance(action, CheckOutput)  # not a success on the old answer
    assert not action.verdict.valid
