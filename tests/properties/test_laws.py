"""The laws of the core, over generated valid runs."""

from __future__ import annotations

import contextlib
import json
import time

import pytest
from attrs import evolve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ruizn.decide import CallModel, next_action
from ruizn.events import LlmCallStarted, LlmResponse, LlmToken, RunFinished, RunStarted
from ruizn.reducers import InvalidTransition, reduce, replay, start
from ruizn.request import MAX_BREAKPOINTS, build_request, count_breakpoints
from ruizn.serde import DecodeError, decode, encode
from ruizn.state import (
    RedactedThinkingBlock,
    Status,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from tests.properties.runs import json_values, simulate, texts, tool_results

RUNS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
steps = st.integers(1, 6)


@RUNS
@given(st.data(), steps)
def test_roles_alternate_and_every_tool_use_is_answered_next_in_order(
    data: st.DataObject, max_steps: int
) -> None:
    run = simulate(data, max_steps=max_steps)
    messages = run.final.messages
    assert messages[0].role == "user"
    assert messages[0].content == (TextBlock(text=run.final.goal),)
    for i, message in enumerate(messages):
        assert message.role == ("user" if i % 2 == 0 else "assistant")
        if message.role != "assistant":
            continue
        asked = [b.id for b in message.content if isinstance(b, ToolUseBlock)]
        if not asked:
            continue
        answer = messages[i + 1]
        assert answer.role == "user"
        assert all(isinstance(b, ToolResultBlock) for b in answer.content)
        assert [b.tool_use_id for b in answer.content] == asked  # exactly once, in order


@RUNS
@given(st.data(), steps)
def test_decode_encode_round_trips_every_event_on_one_line(
    data: st.DataObject, max_steps: int
) -> None:
    run = simulate(data, max_steps=max_steps)
    for event in run.events:
        line = encode(event)
        assert "\n" not in line
        assert "\r" not in line
        assert decode(line) == event
        assert decode(line.encode()) == event


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.builds(LlmToken, seq=st.integers(1), ts=st.floats(0, 2e9), text=texts),
        st.builds(
            RunFinished,
            seq=st.integers(1),
            ts=st.floats(0, 2e9),
            status=st.sampled_from(list(Status)),
            steps=st.integers(0, 100),
            elapsed=st.floats(0, 1e6),
            error=st.none() | texts,
        ),
        st.builds(
            LlmResponse,
            seq=st.integers(1),
            ts=st.floats(0, 2e9),
            content=st.lists(
                st.one_of(
                    st.builds(TextBlock, text=texts),
                    st.builds(ThinkingBlock, thinking=texts, signature=texts),
                    st.builds(RedactedThinkingBlock, data=texts),
                    st.builds(
                        ToolUseBlock,
                        id=texts,
                        name=texts,
                        input=st.dictionaries(texts, json_values, max_size=3),
                    ),
                ),
                max_size=4,
            ).map(tuple),
            stop_reason=st.none() | texts,
        ),
    )
)
def test_decode_encode_round_trips_arbitrary_events(event: object) -> None:
    line = encode(event)  # type: ignore[arg-type]
    assert "\n" not in line
    assert decode(line) == event


@RUNS
@given(st.data(), steps)
def test_replay_of_the_log_gives_the_final_state_and_every_prefix_its_state(
    data: st.DataObject, max_steps: int
) -> None:
    run = simulate(data, max_steps=max_steps)
    assert replay(run.events) == run.final
    for k in range(1, len(run.events) + 1):
        assert replay(run.events[:k]) == run.states[k - 1]
    cut = data.draw(st.integers(1, len(run.events)), label="cut")
    state = replay(run.events[:cut])
    for event in run.events[cut:]:
        state = reduce(state, event)
    assert state == run.final
    # and through the codec, line by line
    assert replay(decode(encode(e)) for e in run.events) == run.final


@RUNS
@given(st.data(), st.integers(1, 8), st.sampled_from([None, True]))
def test_the_loop_ends_within_max_steps_with_success_or_max_steps(
    data: st.DataObject, max_steps: int, tools: bool | None
) -> None:
    run = simulate(data, max_steps=max_steps, tools=tools)
    assert run.model_calls <= max_steps
    assert run.final.step == run.model_calls
    assert run.final.status in (Status.SUCCESS, Status.MAX_STEPS)
    if tools:  # a model that always asks for tools is stopped by the limit
        assert run.final.status is Status.MAX_STEPS
        assert run.model_calls == max_steps
    assert isinstance(run.events[-1], RunFinished)


@RUNS
@given(st.data(), steps)
def test_requests_have_at_most_four_breakpoints_and_mark_system_tools_and_history(
    data: st.DataObject, max_steps: int
) -> None:
    run = simulate(data, max_steps=max_steps)
    for event, before in zip(run.events[1:], run.states, strict=False):
        if not isinstance(event, LlmCallStarted):
            continue
        assert isinstance(next_action(before), CallModel)
        request = build_request(before)
        assert count_breakpoints(request) <= MAX_BREAKPOINTS
        if before.system:
            assert request["system"][-1]["cache_control"] == {"type": "ephemeral"}
        else:
            assert "system" not in request
        if before.tools:
            assert request["tools"][-1]["cache_control"] == {"type": "ephemeral"}
            assert all("cache_control" not in t for t in request["tools"][:-1])
        messages = request["messages"]
        assert messages[-1]["role"] == "user"
        assert messages[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        assert [m["role"] for m in messages] == [
            "user" if i % 2 == 0 else "assistant" for i in range(len(messages))
        ]
        for message in messages:
            for block in message["content"]:
                assert not (block["type"] == "text" and block["text"] == "")
        sent_thinking = [
            b
            for m in messages
            for b in m["content"]
            if b["type"] in ("thinking", "redacted_thinking")
        ]
        kept = [
            b
            for m in before.messages
            for b in m.content
            if isinstance(b, ThinkingBlock | RedactedThinkingBlock)
        ]
        assert len(sent_thinking) == len(kept)
        for wire, block in zip(sent_thinking, kept, strict=True):
            if isinstance(block, ThinkingBlock):
                assert (wire["thinking"], wire["signature"]) == (block.thinking, block.signature)
            else:
                assert wire["data"] == block.data
        json.dumps(request)  # the request is plain JSON


@RUNS
@given(st.data(), steps)
def test_reduce_refuses_gaps_duplicates_a_second_run_and_unknown_tool_results(
    data: st.DataObject, max_steps: int
) -> None:
    run = simulate(data, max_steps=max_steps)
    events, states = run.events, run.states
    k = data.draw(st.integers(1, len(events) - 1), label="k")
    with pytest.raises(InvalidTransition):
        reduce(states[k - 1], evolve(events[k], seq=events[k].seq + 1))  # a gap
    with pytest.raises(InvalidTransition):
        reduce(states[k], events[k])  # the same event twice
    other = evolve(events[0], seq=states[k].last_seq + 1, run_id="other")
    with pytest.raises(InvalidTransition):
        reduce(states[k], other)  # a log of another run appended
    from ruizn.events import ToolCallFinished

    stranger = ToolCallFinished(
        seq=states[k].last_seq + 1, ts=0.0, id="toolu_nobody", result=data.draw(tool_results)
    )
    with pytest.raises(InvalidTransition):
        reduce(states[k], stranger)


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        texts, st.binary().map(lambda b: b.decode("utf-8", "replace")), json_values.map(json.dumps)
    )
)
def test_decode_raises_only_decode_error_on_arbitrary_lines(line: str) -> None:
    with contextlib.suppress(DecodeError):
        decode(line)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "v",
                "type",
                "seq",
                "ts",
                "text",
                "status",
                "steps",
                "elapsed",
                "content",
                "id",
                "result",
                "max_steps",
            ]
        ),
        json_values,
        max_size=8,
    ),
    st.sampled_from(
        ["llm_token", "run_finished", "llm_response", "tool_call_finished", "run_resumed", "nope"]
    ),
)
def test_decode_raises_only_decode_error_on_event_shaped_garbage(
    fields: dict[str, object], tag: str
) -> None:
    fields = {"v": 1, **fields, "type": tag}
    with contextlib.suppress(DecodeError):
        decode(json.dumps(fields))


def _token_log(count: int) -> list[object]:
    first = RunStarted(
        seq=1, ts=0.0, run_id="r", goal="g", model="m", max_steps=1, max_tokens=1, system=""
    )
    return [
        first,
        LlmCallStarted(seq=2, ts=0.0, step=1),
        *(LlmToken(seq=i, ts=0.0, text="tok ") for i in range(3, count + 3)),
    ]


def test_llm_tokens_cost_constant_time_each() -> None:
    small, large = _token_log(40_000), _token_log(200_000)
    began = time.perf_counter()
    replay(small)  # type: ignore[arg-type]
    t_small = time.perf_counter() - began
    began = time.perf_counter()
    state = replay(large)  # type: ignore[arg-type]
    t_large = time.perf_counter() - began
    assert state.streamed_tokens == 200_000
    assert len(state.messages) == 1  # no text was concatenated into the state
    # 5x the events: linear is ~5x; quadratic would be ~25x. Loose on purpose.
    assert t_large < 10 * t_small


def test_a_log_must_begin_with_run_started() -> None:
    with pytest.raises(InvalidTransition):
        replay([LlmToken(seq=1, ts=0.0, text="x")])
    with pytest.raises(InvalidTransition):
        start(
            RunStarted(
                seq=2, ts=0.0, run_id="r", goal="g", model="m", max_steps=1, max_tokens=1, system=""
            )
        )


@settings(max_examples=300, deadline=None)
@given(
    st.builds(
        LlmToken, seq=st.integers(1), ts=st.floats(0, 2e9) | st.integers(0, 2**40), text=texts
    )
)
def test_the_token_fast_path_writes_the_generic_bytes(event: LlmToken) -> None:
    from ruizn.serde import SCHEMA_VERSION, converter

    generic = json.dumps(
        {"v": SCHEMA_VERSION, "type": "llm_token", **converter.unstructure(event)},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    assert encode(event) == generic
