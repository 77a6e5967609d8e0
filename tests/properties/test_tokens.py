"""Law 7: an LlmToken costs O(1) to replay and leaves no text in the state.

A long answer is most of a log. Replay only counts the tokens (the text is in the log and the
finished turn in LlmResponse), so 5x the tokens must cost about 5x the time, not 25x.
"""

from __future__ import annotations

import gc
import json
import time
from typing import Any

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


def _timed_replay(lines: list[str]) -> tuple[ExecutionContext, float]:
    gc.collect()
    began = time.perf_counter()
    state = rebuild(decode(line) for line in lines)
    return state, time.perf_counter() - began


def test_llm_tokens_replay_in_constant_time_each_and_are_only_counted() -> None:
    small = [encode(e) for e in _log(40_000)]
    large = [encode(e) for e in _log(200_000)]
    # Before the response: 200k tokens counted, and no text of theirs kept in the state.
    streaming, t_streaming = _timed_replay(large[:-2])
    assert streaming.streamed_tokens == 200_000
    assert streaming.last_seq == 200_002
    strings = _strings(state_to_json(streaming))
    assert not any(TOKEN * 2 in s for s in strings)
    assert max(map(len, strings)) < 100
    assert len(json.dumps(state_to_json(streaming))) < 2_000
    # The response holds the turn; the counter is reset.
    final, t_final = _timed_replay(large)
    assert final.streamed_tokens == 0
    assert final.messages[-1].content == (TextBlock(text=TOKEN * 200_000),)
    assert final.status is Status.SUCCESS
    # Loose linearity: 5x the events may take up to 12.5x the time (2.5x the per-event cost
    # of the small run); a cost growing with the text so far would take ~25x. Best of a few
    # runs each, so a busy machine does not decide.
    t_small = min(_timed_replay(small)[1] for _ in range(3))
    t_large = min(t_streaming, t_final)
    assert t_large < 12.5 * t_small, (t_small, t_large)
