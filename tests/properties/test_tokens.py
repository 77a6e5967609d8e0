"""Law 7: an LlmToken costs O(1) to replay and leaves no text in the state.

A long answer is most of a log. Replay only counts the tokens (the text is in the log and the
finished turn in LlmResponse): a token changes two numbers of the state and nothing else, so
each costs the same. The time itself is measured by the benchmark (replay linearity).
"""

from __future__ import annotations

import json
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from ruizn.events import Event, LlmCallStarted, LlmResponse, LlmToken, RunFinished, RunStarted
from ruizn.reducers import rebuild
from ruizn.serde import decode, encode, state_to_json
from ruizn.settings import RunSettings
from ruizn.state import ExecutionContext, Status, TextBlock, Usage

TOKEN = "tok "  # every token the same: any concatenation of two would show as "tok tok"


def _log(tokens: int) -> list[Event]:
    head: list[Event] = [
        RunStarted(
            seq=1,
            ts=1767225600.0,
            run_id="20260101-000000-a1b2c3",
            goal="write a long answer",
            settings=RunSettings(
                model="claude-sonnet-5-5", max_steps=1, max_tokens=64_000, system="You are ruizn."
            ),
        ),
        LlmCallStarted(seq=2, ts=1767225600.1, step=1),
    ]
    body = [LlmToken(seq=i, ts=1767225600.2 + i * 1e-5, text=TOKEN) for i in range(3, tokens + 3)]
    end = tokens + 3
    tail: list[Event] = [
        LlmResponse(
            seq=end,
            ts=1767225700.0,
            content=(TextBlock(text=TOKEN * tokens),),
            stop_reason="end_turn",
            usage=Usage(input_tokens=20, output_tokens=tokens),
        ),
        RunFinished(
            seq=end + 1,
            ts=1767225700.1,
            status=Status.SUCCESS,
            steps=1,
            elapsed=100.1,
            usage=Usage(input_tokens=20, output_tokens=tokens),
        ),
    ]
    return head + body + tail


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list | tuple):
        return [s for v in node for s in _strings(v)]
    return []


def _replay(events: list[Event]) -> ExecutionContext:
    """Through the codec, as replay reads a log."""
    return rebuild(decode(encode(event)) for event in events)


@given(tokens=st.integers(min_value=0, max_value=300))
@settings(max_examples=25, deadline=None)
def test_a_token_adds_only_its_count_and_its_seq_to_the_state(tokens: int) -> None:
    """Whatever the number of tokens so far, the state is the one before them with two
    numbers changed: so each token costs the same to replay and keeps no text."""
    log = _log(tokens)
    before = _replay(log[:2])
    streaming = _replay(log[:-2])
    assert streaming == attrs.evolve(before, streamed_tokens=tokens, last_seq=tokens + 2)


def test_a_long_answer_is_counted_while_streaming_and_the_response_holds_the_turn() -> None:
    log = _log(50_000)
    streaming = _replay(log[:-2])
    assert streaming.streamed_tokens == 50_000
    strings = _strings(state_to_json(streaming))
    assert not any(TOKEN * 2 in s for s in strings)
    assert len(json.dumps(state_to_json(streaming))) < 2_000
    # The response holds the turn; the counter is reset.
    final = _replay(log)
    assert final.streamed_tokens == 0
    assert final.messages[-1].content == (TextBlock(text=TOKEN * 50_000),)
    assert final.status is Status.SUCCESS
