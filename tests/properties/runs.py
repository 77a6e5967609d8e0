"""Generated valid runs: a simulated shell driven by `next_action`, as the real runner is.

The model's replies are drawn lazily while the loop runs, so any sequence of replies (text
answers, 1-5 tool calls, thinking, failed attempts) produces a log that is valid by
construction, together with the state after each event.
"""

from __future__ import annotations

import string
from typing import Any

from attrs import frozen
from hypothesis import strategies as st

from ruizn.decide import CallModel, Finish, Finished, RefuseTools, RunTools, next_action
from ruizn.events import (
    Event,
    LlmCallFailed,
    LlmCallStarted,
    LlmResponse,
    LlmToken,
    RunFinished,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from ruizn.reducers import reduce, start
from ruizn.state import (
    ContentBlock,
    ErrorType,
    ExecutionContext,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResult,
    ToolUseBlock,
    Usage,
)

READ_FILE = {
    "name": "read_file",
    "description": "Read a UTF-8 text file in the workspace.",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}
GREP = {"name": "grep", "description": "Search.", "input_schema": {"type": "object"}}

texts = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8", exclude_categories=("Cs",)),
        st.sampled_from('读取当前目录下的\n\u2028\t"\\'),
    ),
    max_size=30,
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
usages = st.builds(
    Usage,
    input_tokens=st.integers(0, 10_000),
    output_tokens=st.integers(0, 10_000),
    cache_creation_input_tokens=st.integers(0, 10_000),
    cache_read_input_tokens=st.integers(0, 10_000),
)
thinking_blocks = st.one_of(
    st.builds(ThinkingBlock, thinking=texts, signature=st.text(string.ascii_letters, min_size=1)),
    st.builds(RedactedThinkingBlock, data=st.text(string.ascii_letters, min_size=1)),
)
tool_results = st.one_of(
    st.builds(ToolResult.ok, texts),
    st.builds(ToolResult.error, st.sampled_from(list(ErrorType)), texts),
)


@frozen
class Reply:
    content: tuple[ContentBlock, ...]
    stop_reason: str
    usage: Usage
    tokens: tuple[str, ...]
    failed_attempts: tuple[tuple[str, ...], ...]  # tokens streamed by attempts that failed


@st.composite
def replies(draw: st.DrawFn, *, tools: bool | None = None) -> Reply:
    thinking = tuple(draw(st.lists(thinking_blocks, max_size=2)))
    text = draw(texts)
    use_tools = draw(st.booleans()) if tools is None else tools
    blocks: tuple[ContentBlock, ...] = (*thinking, *((TextBlock(text=text),) if text else ()))
    if use_tools:
        count = draw(st.integers(1, 5))
        prefix = draw(st.text(string.ascii_lowercase, min_size=1, max_size=4))
        calls = tuple(
            ToolUseBlock(
                id=f"toolu_{prefix}_{i}",
                name=draw(st.sampled_from(["read_file", "grep", "missing_tool"])),
                input=draw(st.dictionaries(texts, json_values, max_size=3)),
            )
            for i in range(count)
        )
        blocks, stop = (*blocks, *calls), "tool_use"
    else:
        stop = draw(st.sampled_from(["end_turn", "stop_sequence"]))
    failed = tuple(draw(st.lists(st.lists(texts, max_size=3).map(tuple), max_size=2)))
    tokens = tuple(draw(st.lists(texts, max_size=4)))
    return Reply(blocks, stop, draw(usages), tokens, failed)


@frozen
class Run:
    events: tuple[Event, ...]
    states: tuple[ExecutionContext, ...]  # states[i] is the state after events[i]
    model_calls: int

    @property
    def final(self) -> ExecutionContext:
        return self.states[-1]


def simulate(data: st.DataObject, *, max_steps: int, tools: bool | None = None) -> Run:
    events: list[Event] = []
    states: list[ExecutionContext] = []

    def emit(cls: type[Any], **fields: Any) -> None:
        event = cls(seq=len(events) + 1, ts=1_000_000.0 + len(events), **fields)
        state = start(event) if isinstance(event, RunStarted) else reduce(states[-1], event)
        events.append(event)
        states.append(state)

    emit(
        RunStarted,
        run_id="20260101-000000-abcdef",
        goal=data.draw(texts.filter(str.strip), label="goal"),
        model="claude-sonnet-4-5",
        max_steps=max_steps,
        max_tokens=1024,
        system=data.draw(st.sampled_from(["", "Be brief."]), label="system"),
        tools=data.draw(st.sampled_from([(READ_FILE,), (READ_FILE, GREP), ()]), label="tools"),
    )
    calls = 0
    while True:
        match next_action(states[-1]):
            case CallModel(step=step):
                calls += 1
                reply = data.draw(replies(tools=tools), label=f"reply {step}")
                for attempt, tokens in enumerate(reply.failed_attempts, start=1):
                    emit(LlmCallStarted, step=step, attempt=attempt)
                    for token in tokens:
                        emit(LlmToken, text=token)
                    emit(
                        LlmCallFailed,
                        error_type="overloaded_error",
                        message="Overloaded",
                        attempt=attempt,
                        will_retry=True,
                    )
                emit(LlmCallStarted, step=step, attempt=len(reply.failed_attempts) + 1)
                for token in reply.tokens:
                    emit(LlmToken, text=token)
                emit(
                    LlmResponse,
                    content=reply.content,
                    stop_reason=reply.stop_reason,
                    usage=reply.usage,
                )
            case RunTools(calls=pending):
                # Results may arrive in any order; starts are interleaved with them.
                order = data.draw(st.permutations(pending), label="result order")
                if data.draw(st.booleans(), label="concurrent"):
                    for call in pending:
                        emit(ToolCallStarted, id=call.id, name=call.name, input=call.input)
                    for call in order:
                        emit(ToolCallFinished, id=call.id, result=data.draw(tool_results))
                else:
                    for call in order:
                        emit(ToolCallStarted, id=call.id, name=call.name, input=call.input)
                        emit(ToolCallFinished, id=call.id, result=data.draw(tool_results))
            case RefuseTools(calls=pending, reason=reason):
                for call in pending:
                    emit(
                        ToolCallFinished,
                        id=call.id,
                        result=ToolResult.error(ErrorType.INVALID_INPUT, reason),
                    )
            case Finish(status=status, error=error):
                emit(
                    RunFinished,
                    status=status,
                    steps=states[-1].step,
                    elapsed=1.5,
                    error=error,
                    usage=states[-1].usage,
                )
            case Finished():
                return Run(tuple(events), tuple(states), calls)
