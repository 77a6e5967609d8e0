"""The transition table and its field checks, one refusal at a time (in-process).

Each case starts from a state reached by legal events and applies one event no real run can
write there; the reducer must refuse it with InvalidTransition naming the problem.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from attrs import evolve

from ruizn.events import (
    LlmCallFailed,
    LlmCallStarted,
    LlmResponse,
    LlmToken,
    RunFinished,
    RunResumed,
    ToolCallStarted,
)
from ruizn.reducers import InvalidTransition, add_tokens
from ruizn.rules import reply_problem
from ruizn.serde import DecodeError, decode, encode
from ruizn.settings import ConfigError
from ruizn.state import (
    Phase,
    Status,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from tests.core_world import CALL, FIRST, STARTED, TEXT_TURN, TOOL_TURN, after, then

REFUSALS: dict[str, tuple[tuple[Any, ...], type[Any], dict[str, Any], str]] = {
    "a call for a step that is not next": ((), LlmCallStarted, {"step": 2}, "next step is 1"),
    "an attempt that is not next": ((), LlmCallStarted, {"step": 1, "attempt": 3}, "attempt"),
    "a token while ready": ((), LlmToken, {"text": "x"}, "cannot follow phase ready"),
    "a failure for another attempt": (
        (STARTED,),
        LlmCallFailed,
        {"error_type": "e", "message": "m", "attempt": 2},
        "attempt 1",
    ),
    "a retry past max_retries": (
        (
            STARTED,
            (LlmCallFailed, {"error_type": "e", "message": "m", "will_retry": True}),
            (LlmCallStarted, {"step": 1, "attempt": 2}),
        ),
        LlmCallFailed,
        {"error_type": "e", "message": "m", "attempt": 2, "will_retry": True},
        "past max_retries",
    ),
    "a negative wait": (
        (STARTED,),
        LlmCallFailed,
        {"error_type": "e", "message": "m", "retry_in": -1.0},
        "negative retry_in",
    ),
    "a call after giving up": (
        (STARTED, (LlmCallFailed, {"error_type": "e", "message": "m"})),
        LlmCallStarted,
        {"step": 1, "attempt": 2},
        "gave up",
    ),
    "duplicate tool ids": (
        (STARTED,),
        LlmResponse,
        {"content": (CALL, CALL), "stop_reason": "tool_use"},
        "share the id",
    ),
    "negative usage": (
        (STARTED,),
        LlmResponse,
        {"content": (), "stop_reason": "end_turn", "usage": Usage(input_tokens=-1)},
        "negative token counts",
    ),
    "a start for a call never asked": (
        (STARTED, TOOL_TURN),
        ToolCallStarted,
        {"id": "nope", "name": "look"},
        "did not ask",
    ),
    "a start naming another tool": (
        (STARTED, TOOL_TURN),
        ToolCallStarted,
        {"id": "t1", "name": "other", "input": {"p": 1}},
        "another tool",
    ),
    "a start twice": (
        (STARTED, TOOL_TURN, (ToolCallStarted, {"id": "t1", "name": "look", "input": {"p": 1}})),
        ToolCallStarted,
        {"id": "t1", "name": "look", "input": {"p": 1}},
        "twice",
    ),
    "success before the turn ended": (
        (),
        RunFinished,
        {"status": Status.SUCCESS, "steps": 0, "elapsed": 0.0},
        "not ended",
    ),
    "max_steps before the limit": (
        (),
        RunFinished,
        {"status": Status.MAX_STEPS, "steps": 0, "elapsed": 0.0},
        "max_steps",
    ),
    "status running": (
        (),
        RunFinished,
        {"status": Status.RUNNING, "steps": 0, "elapsed": 0.0},
        "running",
    ),
    "steps that disagree": (
        (),
        RunFinished,
        {"status": Status.ERROR, "steps": 42, "elapsed": 0.0},
        "42 steps",
    ),
    "usage that disagrees": (
        (STARTED, TEXT_TURN),
        RunFinished,
        {"status": Status.SUCCESS, "steps": 1, "elapsed": 0.0, "usage": Usage(output_tokens=9)},
        "usage disagrees",
    ),
    "a resume with max_steps 0": ((), RunResumed, {"max_steps": 0}, "below its minimum"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_each_illegal_event_is_refused_naming_the_problem(case: str) -> None:
    before, cls, fields, says = REFUSALS[case]
    state = after(*before)
    with pytest.raises(InvalidTransition, match=says):
        then(state, cls, **fields)


def test_a_run_started_with_a_bad_limit_or_mode_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_steps must be"):
        evolve(FIRST.settings, max_steps=0)
    with pytest.raises(ConfigError, match="approval must be"):
        evolve(FIRST.settings, approval="maybe")  # type: ignore[arg-type]
    # A log that holds them does not decode: the record refuses them as it is made.
    line = json.loads(encode(FIRST))
    line["settings"]["max_steps"] = 0
    with pytest.raises(DecodeError, match="max_steps must be"):
        decode(json.dumps(line))


def test_tokens_in_bulk_need_the_streaming_phase() -> None:
    with pytest.raises(InvalidTransition, match="cannot follow phase ready"):
        add_tokens(after(), 3)
    assert add_tokens(after(STARTED), 3).streamed_tokens == 3


def test_replies_the_api_could_not_take_back_are_named() -> None:
    assert "has no id" in str(reply_problem((ToolUseBlock(id="", name="x"),)))
    assert "has no name" in str(reply_problem((ToolUseBlock(id="a", name=""),)))
    assert "tool_result" in str(reply_problem((ToolResultBlock(tool_use_id="a", content=""),)))
    assert reply_problem((CALL, TextBlock(text="x"))) is None


def test_a_resume_with_a_larger_max_tokens_continues_an_answer_cut_there() -> None:
    cut = (LlmResponse, {"content": (TextBlock(text="half"),), "stop_reason": "max_tokens"})
    state = after(STARTED, cut, (RunFinished, {"status": Status.ERROR, "steps": 1, "elapsed": 0}))
    same = then(state, RunResumed, max_steps=3)
    assert (same.phase, same.continuing) == (Phase.DONE, False)
    raised = then(state, RunResumed, max_steps=3, max_tokens=200)
    assert (raised.phase, raised.continuing, raised.settings.max_tokens) == (Phase.READY, True, 200)
    more = then(
        then(raised, LlmCallStarted, step=2),
        LlmResponse,
        content=(TextBlock(text=" and the rest"),),
        stop_reason="end_turn",
    )
    assert [m.role for m in more.messages] == ["user", "assistant"]
    assert more.messages[-1].content == (TextBlock(text="half"), TextBlock(text=" and the rest"))
