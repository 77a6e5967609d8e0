"""Law 1: the transcript a run builds is one the Messages API accepts.

Roles alternate user/assistant starting with the user's goal, and every tool_use is answered
by exactly one tool_result in the very next user message, in tool_use order, whatever order
the results arrived in.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from ruizn.events import ToolCallFinished
from ruizn.state import TextBlock, ToolResultBlock, ToolUseBlock
from tests.properties.runs import runs_settings, simulate

RUNS = runs_settings(90)


@RUNS
@given(st.data(), st.integers(1, 8), st.booleans())
def test_roles_alternate_from_the_goal_and_each_tool_use_is_answered_next_in_order(
    data: st.DataObject, max_steps: int, errors: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=errors)
    for state in run.states:  # after every event, not only at the end
        messages = state.messages
        assert messages[0].role == "user"
        assert messages[0].content == (TextBlock(text=state.goal),)
        assert [m.role for m in messages] == [
            "user" if i % 2 == 0 else "assistant" for i in range(len(messages))
        ]
    messages = run.final.messages
    results = {e.id: e.result for e in run.events if isinstance(e, ToolCallFinished)}
    answered: Counter[str] = Counter()
    for i, message in enumerate(messages):
        if message.role == "user":
            answered.update(
                b.tool_use_id for b in message.content if isinstance(b, ToolResultBlock)
            )
            continue
        asked = [b.id for b in message.content if isinstance(b, ToolUseBlock)]
        if not asked:
            assert i == len(messages) - 1, "a text-only turn ends the run"
            continue
        answer = messages[i + 1]  # never the last message: the loop answers before it stops
        assert all(isinstance(b, ToolResultBlock) for b in answer.content)
        assert [b.tool_use_id for b in answer.content] == asked
        for block in answer.content:
            assert isinstance(block, ToolResultBlock)
            result = results[block.tool_use_id]
            assert (block.content, block.is_error) == (result.content, result.is_error)
    asked_ids = [b.id for m in messages for b in m.content if isinstance(b, ToolUseBlock)]
    assert answered == Counter(asked_ids)  # exactly once each
    assert all(count == 1 for count in answered.values())
    assert run.final.turn_calls == ()
    assert run.final.tools_in_flight == ()
    # and it is the transcript built from the replies and results without the reducer
    assert messages == run.expected_messages
