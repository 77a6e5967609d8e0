"""Depth is judged before anything recursive walks outside JSON, and the same way at any depth.

The values and texts here are built with loops, never with `json.dumps` of a whole value or
a recursive helper, so the tests themselves reach 100,000 levels.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ruizn.bounds import MAX_DEPTH, MAX_LINE_DEPTH, deeper_than, text_deeper_than
from ruizn.events import LlmCallStarted, LlmResponse, RunStarted
from ruizn.reducers import InvalidTransition, reduce, start
from ruizn.rules import reply_problem
from ruizn.serde import DecodeError, decode, encode
from ruizn.settings import RunSettings
from ruizn.state import TextBlock, ToolUseBlock, Usage
from tests.properties.runs import runs_settings

DEPTHS = [MAX_DEPTH + 1, 600, 3_000, 100_000]
PROBLEM = f"tool_use 'toolu_1' input is nested deeper than {MAX_DEPTH} levels"
LINE_PROBLEM = f"the line is nested deeper than {MAX_LINE_DEPTH} levels"

# A level is an array, or an object under one of these keys: brackets and escaped quotes
# inside strings must not count as levels.
KEYS = ("a", "[", "{{", '"]', "\\", '}]\\"[')


def nested(kinds: list[int]) -> tuple[Any, str]:
    """A value whose containers are `kinds` from the outside in (0: an array, k: an object
    under KEYS[k]), with a string inside, and its JSON text."""
    value: Any = "x[y]{z}"
    text = json.dumps(value)
    for kind in reversed(kinds):
        if kind == 0:
            value, text = [value], f"[{text}]"
        else:
            key = KEYS[kind % len(KEYS)]
            value, text = {key: value}, f"{{{json.dumps(key)}: {text}}}"
    return value, text


def tool_input(depth: int) -> dict[str, Any]:
    """A tool input `depth` levels deep (the input object itself is level 1)."""
    if depth == 1:
        return {"path": "x"}
    value: list[Any] = []
    for _ in range(depth - 2):
        value = [value]
    return {"path": value}


def _deep_kinds(depth: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, 8), min_size=depth, max_size=depth)


kinds_strategy = st.integers(1, 3 * MAX_DEPTH).flatmap(_deep_kinds) | st.sampled_from(
    [600, 3_000]
).map(lambda depth: [1] + [0] * (depth - 1))


@runs_settings(300)
@given(kinds_strategy)
def test_a_value_and_its_text_are_too_deep_exactly_past_the_limit(kinds: list[int]) -> None:
    value, text = nested(kinds)
    depth = len(kinds)
    for limit in (MAX_DEPTH, 1, max(1, depth - 1), depth):
        assert deeper_than(value, limit) == (depth > limit)
        assert text_deeper_than(text, limit) == (depth > limit)
        assert text_deeper_than(text.encode(), limit) == (depth > limit)


@runs_settings(200)
@given(st.integers(1, 3 * MAX_DEPTH) | st.integers(3 * MAX_DEPTH, 100_000))
def test_a_reply_is_refused_with_one_message_at_every_depth_past_the_limit(depth: int) -> None:
    block = ToolUseBlock(id="toolu_1", name="read_file", input=tool_input(depth))
    problem = reply_problem((TextBlock(text="hi"), block))
    assert problem == (PROBLEM if depth > MAX_DEPTH else None)


def _streaming() -> Any:
    first = RunStarted(
        seq=1,
        ts=0.0,
        run_id="r",
        goal="g",
        settings=RunSettings(model="m", max_steps=2, max_tokens=100, system=""),
    )
    return reduce(start(first), LlmCallStarted(seq=2, ts=0.0, step=1, attempt=1))


def _response(depth: int) -> LlmResponse:
    block = ToolUseBlock(id="toolu_1", name="read_file", input=tool_input(depth))
    return LlmResponse(seq=3, ts=0.0, content=(block,), stop_reason="tool_use", usage=Usage())


@pytest.mark.parametrize("depth", DEPTHS)
def test_the_reducer_refuses_a_response_holding_a_too_deep_input(depth: int) -> None:
    with pytest.raises(InvalidTransition) as caught:
        reduce(_streaming(), _response(depth))
    assert str(caught.value) == f"llm_response refused: {PROBLEM}"


def test_the_reducer_takes_an_input_exactly_at_the_limit() -> None:
    state = reduce(_streaming(), _response(MAX_DEPTH))
    assert state.turn_calls[0].input == tool_input(MAX_DEPTH)


def test_a_cyclic_value_is_too_deep_not_walked_for_ever() -> None:
    loop: dict[str, Any] = {}
    loop["a"] = loop
    loop["b"] = [loop, loop]
    assert deeper_than(loop)
    assert reply_problem((ToolUseBlock(id="toolu_1", name="x", input=loop),)) == PROBLEM


def test_text_that_is_not_json_gets_an_answer_not_an_error() -> None:
    assert text_deeper_than("[" * 1000)  # an array never closed
    assert text_deeper_than('"never closed [' + "[" * 1000) in (True, False)
    assert not text_deeper_than("]" * 1000)
    assert not text_deeper_than(b"\xff[" * 10 + b"]" * 10)


def _line(depth: int) -> str:
    """An llm_response line whose tool input is `depth` levels deep, written as the log
    writes it (the line is then depth + 3 deep: line, content, block, input)."""
    line = encode(_response(1))
    inner = "[" * (depth - 1) + "]" * (depth - 1)
    return line.replace('"path":"x"', f'"path":{inner}')


@pytest.mark.parametrize("depth", [MAX_LINE_DEPTH - 2, 600, 3_000, 100_000])
@pytest.mark.parametrize("as_bytes", [False, True])
def test_decode_refuses_a_too_deep_line_with_one_decode_error(depth: int, as_bytes: bool) -> None:
    line = _line(depth)
    with pytest.raises(DecodeError) as caught:
        decode(line.encode() if as_bytes else line)
    assert str(caught.value) == LINE_PROBLEM


def test_decode_takes_a_line_as_deep_as_the_deepest_input_the_log_may_hold() -> None:
    assert decode(_line(MAX_DEPTH)) == _response(MAX_DEPTH)
    # A line a little deeper still decodes; the reducer is the one that refuses the input.
    event = decode(_line(MAX_DEPTH + 1))
    assert isinstance(event, LlmResponse)
    assert reply_problem(event.content) == PROBLEM


@pytest.mark.parametrize("depth", DEPTHS[1:])
@pytest.mark.parametrize(
    "head",
    [
        "",  # not an object
        '{"v":2,"type":"llm_call_started","seq":2,"ts":0,"step":1,"attempt":1,"x":',  # junk
        '{"v":2,"type":"llm_token","seq":"2","ts":0,"text":',  # a token line gone wrong
    ],
)
def test_decode_of_deep_garbage_is_a_decode_error(depth: int, head: str) -> None:
    with pytest.raises(DecodeError):
        decode(head + "[" * depth + "]" * depth + ("}" if head else ""))
    with pytest.raises(DecodeError):
        decode(head + "[" * depth)  # never closed
