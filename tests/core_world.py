"""A small run of the pure core, shared by the transition and cassette tests: its first
event, a tool turn and a text turn, and the states reached by legal events."""

from __future__ import annotations

from typing import Any

from ruizn.events import Event, LlmCallStarted, LlmResponse, RunStarted
from ruizn.reducers import rebuild, reduce
from ruizn.settings import RunSettings
from ruizn.state import ExecutionContext, TextBlock, ToolUseBlock, Usage

__all__ = ["CALL", "FIRST", "STARTED", "TEXT_TURN", "TOOL_TURN", "after", "then"]

FIRST = RunStarted(
    seq=1,
    ts=0.0,
    run_id="r",
    goal="g",
    settings=RunSettings(model="m", max_steps=2, max_tokens=100, system="", max_retries=1),
)
CALL = ToolUseBlock(id="t1", name="look", input={"p": 1})


def after(*events: Any) -> ExecutionContext:
    """The state after FIRST and `events` (each given without seq/ts: they are numbered)."""
    numbered: list[Event] = [FIRST]
    for i, (cls, fields) in enumerate(events, start=2):
        numbered.append(cls(seq=i, ts=float(i), **fields))
    return rebuild(numbered)


STARTED = (LlmCallStarted, {"step": 1, "attempt": 1})
TOOL_TURN = (LlmResponse, {"content": (CALL,), "stop_reason": "tool_use", "usage": Usage()})
TEXT_TURN = (LlmResponse, {"content": (TextBlock(text="hi"),), "stop_reason": "end_turn"})


def then(state: ExecutionContext, cls: type[Any], **fields: Any) -> ExecutionContext:
    """`state` after one more event (numbered next)."""
    return reduce(state, cls(seq=state.last_seq + 1, ts=9.0, **fields))
