"""Law: a tool input past the depth limit is refused the same way at every depth, by the real
runner with an in-process model (FunctionModel), and the log still rebuilds the run.

The model asks once for a tool with an input `depth` levels deep, then answers in text. At or
under MAX_DEPTH the call reaches the tool; past it the reply is one failed, retried model call
(`invalid_response`, one message whatever the depth), the tool never runs, and nothing on the
way (redactor, jsonschema, the log's encoder, equality) meets the deep value.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import ruizn
from ruizn.bounds import MAX_DEPTH
from ruizn.effects.models.provider import ModelReply
from ruizn.events import LlmCallFailed, ToolCallStarted
from ruizn.state import ToolUseBlock, Usage
from tests.properties.runs import runs_settings

REFUSAL = f"invalid response: tool_use 'toolu_1' input is nested deeper than {MAX_DEPTH} levels"


def _input(depth: int, kinds: list[bool]) -> dict[str, Any]:
    """An object `depth` levels deep; below it, arrays or objects as `kinds` says."""
    value: Any = "x"
    for level in range(depth - 1):
        value = {"k": value} if kinds[level % len(kinds)] else [value]
    return {"a": value}


@ruizn.tool
def probe(a: Any) -> str:
    """Take anything.

    Args:
        a: Anything at all.
    """
    return "seen"


@runs_settings(25)
@given(
    st.integers(1, 2 * MAX_DEPTH) | st.sampled_from([600, 3_000, 100_000]),
    st.lists(st.booleans(), min_size=1, max_size=5),
)
def test_a_too_deep_input_is_one_refused_reply_at_every_depth(
    depth: int, kinds: list[bool]
) -> None:
    asked: list[int] = []

    def model(request: dict[str, Any]) -> ModelReply | str:
        asked.append(1)
        if len(asked) == 1:
            call = ToolUseBlock(id="toolu_1", name="probe", input=_input(depth, kinds))
            return ModelReply(content=(call,), stop_reason="tool_use", usage=Usage())
        return "done"

    with tempfile.TemporaryDirectory() as folder:
        result = ruizn.Agent(model=model, tools=[probe], workspace=Path(folder)).run("go")
        assert result.status == "success", result.state.error
        assert result.log_path is not None
        events = list(ruizn.replay_events(result.log_path))
        assert ruizn.replay(result.log_path) == result.state
    failed = [
        (e.error_type, e.message, e.will_retry) for e in events if isinstance(e, LlmCallFailed)
    ]
    ran = [e for e in events if isinstance(e, ToolCallStarted)]
    if depth > MAX_DEPTH:
        assert failed == [("invalid_response", REFUSAL, True)]
        assert ran == []
    else:
        assert failed == []
        assert len(ran) == 1
