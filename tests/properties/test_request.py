"""Law 5: every request the loop sends is one the Messages API accepts, and caches well.

At most 4 cache breakpoints; the system prompt (when non-empty), the last tool (when there
are tools) and the last block of the two newest user messages are marked, nothing else;
messages alternate from user and hold no empty text block; thinking blocks go back exactly
as the model sent them (the signature covers the text).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ruizn.decide import CallModel, next_action
from ruizn.request import MAX_BREAKPOINTS, build_request, count_breakpoints
from ruizn.settings import RunSettings
from ruizn.state import (
    ContentBlock,
    ExecutionContext,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from tests.properties.runs import Run, runs_settings, simulate

RUNS = runs_settings(50)
EPHEMERAL = {"type": "ephemeral"}


def _sent(run: Run) -> list[tuple[ExecutionContext, dict[str, Any]]]:
    """The requests the loop sends: one for each state where next_action says CallModel."""
    out = []
    for state in run.states:
        if isinstance(next_action(state), CallModel):
            out.append((state, build_request(state)))
    return out


def _marked(node: object) -> int:
    """cache_control markers anywhere in the request, counted without count_breakpoints."""
    if isinstance(node, dict):
        return ("cache_control" in node) + sum(_marked(v) for v in node.values())
    if isinstance(node, list):
        return sum(_marked(v) for v in node)
    return 0


def _unmarked(block: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k != "cache_control"}


def _wire(block: ContentBlock) -> dict[str, Any] | None:
    """What the API must receive for `block` (None: an empty or blank text block, dropped)."""
    match block:
        case TextBlock(text=text):
            return {"type": "text", "text": text} if text.strip() else None
        case ToolUseBlock():
            return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
        case ToolResultBlock():
            return {
                "type": "tool_result",
                "tool_use_id": block.tool_use_id,
                "content": block.content,
                "is_error": block.is_error,
            }
        case ThinkingBlock():
            return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
        case RedactedThinkingBlock():
            return {"type": "redacted_thinking", "data": block.data}
    raise AssertionError(block)


@RUNS
@given(st.data(), st.integers(1, 8))
def test_requests_carry_at_most_four_cache_breakpoints(data: st.DataObject, max_steps: int) -> None:
    run = simulate(data, max_steps=max_steps)
    for state in run.states:  # any state, not only those that call the model
        request = build_request(state)
        assert _marked(request) == count_breakpoints(request) <= MAX_BREAKPOINTS


@RUNS
@given(st.data(), st.integers(1, 8))
def test_requests_mark_the_system_the_last_tool_and_the_two_newest_user_messages(
    data: st.DataObject, max_steps: int
) -> None:
    run = simulate(data, max_steps=max_steps)
    for state, request in _sent(run):
        if state.settings.system:
            assert request["system"] == [
                {"type": "text", "text": state.settings.system, "cache_control": EPHEMERAL}
            ]
        else:
            assert "system" not in request
        if state.settings.tools:
            assert request["tools"][-1]["cache_control"] == EPHEMERAL
            assert [_unmarked(t) for t in request["tools"]] == list(state.settings.tools)
            assert all("cache_control" not in t for t in request["tools"][:-1])
        else:
            assert "tools" not in request
        users = [i for i, m in enumerate(request["messages"]) if m["role"] == "user"]
        should = {(i, len(request["messages"][i]["content"]) - 1) for i in users[-2:]}
        if not state.continuing:  # a continued turn ends with the assistant's partial answer
            assert users[-1] == len(request["messages"]) - 1  # the newest message is the user's
        are = {
            (i, j)
            for i, m in enumerate(request["messages"])
            for j, block in enumerate(m["content"])
            if "cache_control" in block
        }
        assert are == should
        for i, j in are:
            assert request["messages"][i]["content"][j]["cache_control"] == EPHEMERAL


@RUNS
@given(st.data(), st.integers(1, 8))
def test_request_messages_alternate_from_user_and_hold_no_empty_text_block(
    data: st.DataObject, max_steps: int
) -> None:
    run = simulate(data, max_steps=max_steps)
    for state, request in _sent(run):
        assert request["model"] == state.settings.model
        assert request["max_tokens"] == state.settings.max_tokens
        messages = request["messages"]
        assert [m["role"] for m in messages] == [
            "user" if i % 2 == 0 else "assistant" for i in range(len(messages))
        ]
        assert messages[-1]["role"] == "user" or state.continuing
        if len(messages) < len(state.messages):  # an empty partial turn is not sent
            assert state.continuing
            assert len(messages) == len(state.messages) - 1
        for message, kept in zip(messages, state.messages[: len(messages)], strict=True):
            assert message["content"], "the API refuses a message with no content"
            assert not any(b["type"] == "text" and b["text"] == "" for b in message["content"])
            want = [w for w in map(_wire, kept.content) if w is not None]
            got = [_unmarked(b) for b in message["content"]]
            for block in got:  # is_error may be left out when false
                if block["type"] == "tool_result":
                    block.setdefault("is_error", False)
            # the partial answer of a continued turn goes back without trailing space
            last = message is messages[-1] and message["role"] == "assistant"
            if last and want and want[-1]["type"] == "text":
                want[-1] = {**want[-1], "text": want[-1]["text"].rstrip()}
            assert got == want
        assert json.loads(json.dumps(request, ensure_ascii=False)) == request  # plain JSON


@RUNS
@given(st.data(), st.integers(1, 8))
def test_thinking_blocks_go_back_to_the_api_unchanged(data: st.DataObject, max_steps: int) -> None:
    run = simulate(data, max_steps=max_steps)
    for state, request in _sent(run):
        kept = [
            b
            for m in state.messages
            for b in m.content
            if isinstance(b, ThinkingBlock | RedactedThinkingBlock)
        ]
        sent = [
            b
            for m in request["messages"]
            for b in m["content"]
            if b["type"] in ("thinking", "redacted_thinking")
        ]
        assert len(sent) == len(kept)
        for wire, block in zip(sent, kept, strict=True):
            if isinstance(block, ThinkingBlock):
                assert wire == {
                    "type": "thinking",
                    "thinking": block.thinking,
                    "signature": block.signature,
                }
            else:
                assert wire == {"type": "redacted_thinking", "data": block.data}


@RUNS
@given(st.data(), st.integers(1, 8))
def test_building_a_request_changes_nothing_in_the_state(
    data: st.DataObject, max_steps: int
) -> None:
    run = simulate(data, max_steps=max_steps)
    for state in run.states:
        before = copy.deepcopy(state)
        first = build_request(state)
        first["messages"].clear()
        assert state == before
        assert all("cache_control" not in t for t in state.settings.tools)
        assert build_request(state) == build_request(before)


def _with_text(text: str) -> ExecutionContext:
    user = Message(role="user", content=(TextBlock(text="read README.md"),))
    turn = Message(
        role="assistant",
        content=(
            TextBlock(text=text),
            ToolUseBlock(id="toolu_1", name="read_file", input={"path": "README.md"}),
        ),
    )
    answer = Message(role="user", content=(ToolResultBlock(tool_use_id="toolu_1", content="x"),))
    return ExecutionContext(
        run_id="r",
        goal="read README.md",
        settings=RunSettings(model="claude-sonnet-5-5", max_steps=5, system=""),
        messages=(user, turn, answer),
        step=1,
    )


@pytest.mark.parametrize("text", ["\n\n", " ", "\t"])
def test_requests_hold_no_whitespace_only_text_block(text: str) -> None:
    request = build_request(_with_text(text))
    for message in request["messages"]:
        for block in message["content"]:
            assert block["type"] != "text" or block["text"].strip()
