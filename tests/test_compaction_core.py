"""Compaction in the pure core: when decide compacts, and what the reducer refuses (a
context_compacted that disagrees with the history, a compaction with a call unanswered)."""

from __future__ import annotations

from typing import Any

import pytest
from attrs import evolve

from ruizn.compaction import compacted_messages, tokens_after
from ruizn.decide import CompactContext, Finish, next_action
from ruizn.events import (
    ContextCompacted,
    LlmCallFailed,
    LlmCallStarted,
    LlmResponse,
    RunStarted,
    ToolCallFinished,
)
from ruizn.reducers import InvalidTransition, reduce, start
from ruizn.serde import decode, encode
from ruizn.settings import RunSettings
from ruizn.state import (
    CompactionBlock,
    ExecutionContext,
    Status,
    TextBlock,
    ToolResult,
    ToolUseBlock,
    Usage,
)

SIGNED = CompactionBlock(content="what happened", encrypted_content="enc", signature="sig")


def step_on(state: ExecutionContext, cls: type[Any], **fields: Any) -> ExecutionContext:
    event = cls(seq=state.last_seq + 1, ts=0.0, **fields)
    assert decode(encode(event)) == event  # every event the tests make survives the log
    return reduce(state, event)


def ran(steps: int, *, compaction: str = "server", prompt: int = 5_000) -> ExecutionContext:
    settings = RunSettings(model="m", compact_at=1_000, compaction=compaction)  # type: ignore[arg-type]
    state = start(RunStarted(seq=1, ts=0.0, run_id="r", goal="the goal", settings=settings))
    for step in range(1, steps + 1):
        state = step_on(state, LlmCallStarted, step=step)
        call = ToolUseBlock(id=f"t{step}", name="read_file", input={"path": "f"})
        state = step_on(
            state,
            LlmResponse,
            content=(call,),
            stop_reason="tool_use",
            usage=Usage(input_tokens=prompt, output_tokens=5),
        )
        state = step_on(state, ToolCallFinished, id=f"t{step}", result=ToolResult.ok("x"))
    return state


def compacted(state: ExecutionContext, block: CompactionBlock = SIGNED, **fields: Any) -> Any:
    state = step_on(
        state, LlmCallStarted, step=state.step + 1, attempt=state.attempt + 1, compaction="auto"
    )
    values: dict[str, Any] = {
        "block": block,
        "source": "server" if block.signed else "client",
        "trigger": "auto",
        "replaced": len(state.messages),
        "tokens_before": state.context_tokens,
        "tokens_after": tokens_after(state, block),
        "usage": Usage(input_tokens=100, output_tokens=10),
    }
    return step_on(state, ContextCompacted, **{**values, **fields})


def test_a_history_past_compact_at_is_compacted_once_then_called() -> None:
    state = ran(2)
    assert next_action(state) == CompactContext()
    after = compacted(state)
    assert after.messages == compacted_messages(state, SIGNED)
    assert after.messages[0].content == (SIGNED,)
    assert after.messages[0].role == "assistant"
    text = after.messages[1].content[0]
    assert isinstance(text, TextBlock)
    assert "the goal" in text.text
    assert after.usage == state.usage + Usage(input_tokens=100, output_tokens=10)
    # Not twice for one step, even if the estimate still says so.
    assert next_action(evolve(after, context_tokens=5_000)).__class__.__name__ == "CallModel"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"replaced": 1}, "replaces 1 messages"),
        ({"source": "client"}, "does not match its source"),
        ({"tokens_after": 3}, "token counts disagree"),
        ({"tokens_before": 3}, "token counts disagree"),
    ],
)
def test_the_reducer_refuses_a_compaction_that_disagrees_with_the_history(
    change: dict[str, Any], why: str
) -> None:
    with pytest.raises(InvalidTransition, match=why):
        compacted(ran(2), **change)


def test_a_client_run_refuses_the_apis_block_and_takes_its_own() -> None:
    with pytest.raises(InvalidTransition, match="not this run's form"):
        compacted(ran(2, compaction="client"))
    own = CompactionBlock(content="a summary")
    after = compacted(ran(2, compaction="client"), own)
    assert after.messages[0].role == "user"
    assert after.messages[0].content[0] == own


def test_no_compaction_with_a_tool_call_unanswered() -> None:
    state = ran(1)
    state = step_on(state, LlmCallStarted, step=2)
    call = ToolUseBlock(id="t2", name="read_file", input={})
    state = step_on(
        state, LlmResponse, content=(call,), stop_reason="tool_use", usage=Usage(input_tokens=9)
    )
    with pytest.raises(InvalidTransition):
        step_on(state, LlmCallStarted, step=3, compaction="auto")


def test_a_prompt_too_long_compacts_then_a_second_ends_the_run_naming_compact_at() -> None:
    state = ran(1, prompt=10)
    state = step_on(state, LlmCallStarted, step=2)
    state = step_on(
        state,
        LlmCallFailed,
        error_type="invalid_request_error",
        message="invalid request: prompt is too long: 9 > 8",
        status_code=400,
        will_retry=True,
        compact=True,
    )
    assert next_action(state) == CompactContext(attempt=2)
    state = compacted(state)
    assert next_action(state).__class__.__name__ == "CallModel"
    state = step_on(state, LlmCallStarted, step=2)
    with pytest.raises(InvalidTransition, match="cannot make"):
        step_on(
            state,
            LlmCallFailed,
            error_type="invalid_request_error",
            message="invalid request: prompt is too long: 9 > 8",
            status_code=400,
            will_retry=True,
            compact=True,
        )
    state = step_on(
        state,
        LlmCallFailed,
        error_type="invalid_request_error",
        message="invalid request: prompt is too long: 9 > 8",
        status_code=400,
    )
    action = next_action(state)
    assert isinstance(action, Finish)
    assert action.status is Status.ERROR
    assert action.error is not None
    assert "--compact-at" in action.error


def test_compaction_off_never_compacts() -> None:
    state = ran(2)
    off = evolve(state, settings=evolve(state.settings, compact_at=0))
    assert not isinstance(next_action(off), CompactContext)
    with pytest.raises(InvalidTransition, match="compaction is off"):
        step_on(off, LlmCallStarted, step=3, compaction="auto")
