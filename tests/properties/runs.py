"""Generated valid runs: a simulated shell driven by `next_action`, as the real runner is.

`simulate` plays the shell's loop (see ruizn.shell.runner.AgentRunner): it asks
`next_action` what to do, and does exactly that, writing the events the runner writes, with
seq 1, 2, 3... and increasing ts. The model's replies are drawn lazily while the loop runs,
so the model may answer anything (text, 1-5 tool calls, thinking, failed attempts, any stop
reason) and the log is still valid by construction. Tool results arrive in any order, their
starts and finishes interleaved.

Beside the events, a run keeps the state after each event and, computed without the
reducer, the transcript the run must end with (`expected_messages`).
"""

from __future__ import annotations

import os
import string
from typing import Any

from attrs import evolve, frozen
from hypothesis import HealthCheck, settings
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
    Message,
    RedactedThinkingBlock,
    Status,
    TextBlock,
    ThinkingBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)

# The examples per test are sized so tests/properties runs in well under a minute on 2 cores;
# RUIZN_HYPOTHESIS_SCALE=10 runs ten times as many (a longer hunt, e.g. before a release).
SCALE = max(1, int(os.environ.get("RUIZN_HYPOTHESIS_SCALE", "1")))


def runs_settings(examples: int) -> settings:
    """Settings for a test over simulated runs: `examples` (times SCALE), no deadline."""
    return settings(
        max_examples=examples * SCALE,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


READ_FILE = {
    "name": "read_file",
    "description": "Read a UTF-8 text file in the workspace.",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
}
GREP = {
    "name": "grep",
    "description": "Search the workspace for a regular expression.",
    "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}}},
}

# Text the model, the user and the tools may produce: any unicode (no lone surrogates: they
# cannot be written as UTF-8), with the characters that break naive line-oriented code.
AWKWARD = (
    "读取当前目录下的 README.md",
    "你好\uff0c世界",  # a fullwidth comma
    "line one\nline two",
    "\r\n",
    "\u2028",
    "\u2029",
    "\x85",
    "\x00",
    "\t",
    '"quoted"',
    "back\\slash",
    "😀",
    "\ufeff",
    "e\u0301",
    "  ",
)
texts = st.lists(
    st.one_of(
        st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
        st.sampled_from(AWKWARD),
    ),
    max_size=3,
).map("".join)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(texts, json_values, max_size=3)
# What a model sends a tool: mostly a path, sometimes any JSON object (cheaper to draw).
tool_inputs = st.one_of(
    st.fixed_dictionaries({"path": texts}),
    st.fixed_dictionaries({"pattern": texts}, optional={"path": texts}),
    json_objects,
)

usages = st.builds(
    Usage,
    input_tokens=st.integers(0, 200_000),
    output_tokens=st.integers(0, 64_000),
    cache_creation_input_tokens=st.integers(0, 200_000),
    cache_read_input_tokens=st.integers(0, 200_000),
)
signatures = st.text(string.ascii_letters + string.digits + "+/=", min_size=1, max_size=40)
thinking_blocks = st.one_of(
    st.builds(ThinkingBlock, thinking=texts, signature=signatures),
    st.builds(RedactedThinkingBlock, data=signatures),
)
tool_results = st.one_of(
    st.builds(ToolResult.ok, texts),
    st.builds(ToolResult.error, st.sampled_from(list(ErrorType)), texts),
)
tool_names = st.one_of(
    st.sampled_from(["read_file", "read_file", "grep", "no_such_tool"]),
    st.text(string.ascii_letters + "_-", min_size=1, max_size=20),
)

SUCCESS_STOPS = ("end_turn", "stop_sequence")
# Stop reasons that end a text-only turn with status error (see decide._finish_turn).
ERROR_STOPS = ("max_tokens", "refusal", "tool_use", "pause_turn", "model_context_window_exceeded")
PLACEHOLDER_ID = "toolu_?"


@frozen
class Failure:
    """An attempt of a model call that failed (after streaming `tokens`)."""

    tokens: tuple[str, ...]
    error_type: str
    message: str
    status_code: int | None
    # The SDK retried before the stream began: the runner logs LlmCallFailed (notify_retry)
    # without a new LlmCallStarted.
    sdk_retry: bool


failures = st.builds(
    Failure,
    tokens=st.lists(texts, max_size=3).map(tuple),
    error_type=st.sampled_from(["overloaded_error", "api_error", "connection_error", "http_529"]),
    message=st.sampled_from(["Overloaded", "Internal server error", "Connection reset"])
    | texts.filter(bool),
    status_code=st.sampled_from([None, 500, 529]),
    sdk_retry=st.booleans(),
)


@frozen
class Reply:
    """What the model answers one call. Tool ids are given by the simulation (unique)."""

    content: tuple[ContentBlock, ...]
    stop_reason: str | None
    usage: Usage
    tokens: tuple[str, ...]
    failures: tuple[Failure, ...]  # attempts that failed and were retried
    fatal: Failure | None  # the last attempt failed and was not retried: the run ends

    @property
    def tool_uses(self) -> tuple[ToolUseBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolUseBlock))


@st.composite
def replies(draw: st.DrawFn, *, tools: bool | None = None, errors: bool = False) -> Reply:
    """One reply. `tools`: True always asks for tools, False never, None either.
    `errors`: also replies that end the run with status error (a text-only stop reason
    other than end_turn/stop_sequence, or a call that fails for good)."""
    thinking = draw(st.lists(thinking_blocks, max_size=2))
    # Three replies in four ask for tools, so runs are several steps long.
    use_tools = draw(st.integers(0, 3)) > 0 if tools is None else tools
    calls = [
        ToolUseBlock(id=PLACEHOLDER_ID, name=draw(tool_names), input=draw(tool_inputs))
        for _ in range(draw(st.integers(1, 5)) if use_tools else 0)
    ]
    # Text may come before, between or after the calls, and may be empty (the model sometimes
    # streams an empty text block).
    body: list[ContentBlock] = [*calls]
    for text in draw(st.lists(texts, max_size=2)):
        body.insert(draw(st.integers(0, len(body))), TextBlock(text=text))
    if calls:
        # max_tokens with a tool_use: the calls are refused, the run goes on.
        stop = draw(st.sampled_from(["tool_use", "tool_use", "max_tokens"]))
    elif errors:
        stop = draw(st.sampled_from([*SUCCESS_STOPS, *ERROR_STOPS, None]))
    else:
        stop = draw(st.sampled_from(SUCCESS_STOPS))
    text_parts = [b.text for b in body if isinstance(b, TextBlock)]
    tokens = tuple(text_parts) if draw(st.booleans()) else tuple(draw(st.lists(texts, max_size=4)))
    fatal = draw(failures) if errors and draw(st.integers(0, 4)) == 0 else None
    return Reply(
        content=(*thinking, *body),
        stop_reason=stop,
        usage=draw(usages),
        tokens=tokens,
        failures=tuple(draw(st.lists(failures, max_size=2))),
        fatal=fatal,
    )


@frozen
class Run:
    events: tuple[Event, ...]
    states: tuple[ExecutionContext, ...]  # states[i] is the state after events[i]
    replies: tuple[Reply, ...]  # the replies the loop consumed, with their tool ids
    expected_messages: tuple[Message, ...]  # the transcript, built without the reducer
    results: dict[str, ToolResult]  # what each tool call was answered with
    max_steps: int

    @property
    def final(self) -> ExecutionContext:
        return self.states[-1]

    @property
    def model_calls(self) -> int:
        """Distinct steps the loop called the model for (retries are the same step)."""
        return len({e.step for e in self.events if isinstance(e, LlmCallStarted)})


def run_started(data: st.DataObject, *, max_steps: int) -> dict[str, Any]:
    return {
        "run_id": "20260101-000000-a1b2c3",
        "goal": data.draw(texts.filter(str.strip), label="goal"),
        "model": "claude-sonnet-4-5",
        "max_steps": max_steps,
        "max_tokens": data.draw(st.sampled_from([1024, 4096, 64_000]), label="max_tokens"),
        "system": data.draw(st.one_of(st.just(""), texts), label="system"),
        "tools": data.draw(st.sampled_from([(READ_FILE,), (READ_FILE, GREP), ()]), label="tools"),
        "workspace": "/work/demo",
        "ruizn_version": "0.1.0",
    }


def simulate(
    data: st.DataObject, *, max_steps: int, tools: bool | None = None, errors: bool = False
) -> Run:
    """Drive the loop with `next_action` until it says the run is over."""
    events: list[Event] = []
    states: list[ExecutionContext] = []
    t0 = data.draw(st.floats(1.6e9, 2.0e9), label="t0")
    tick = data.draw(st.floats(0.001, 5.0), label="tick")

    def now() -> float:
        return t0 + tick * len(events)

    def emit(cls: type[Any], **fields: Any) -> None:
        event = cls(seq=len(events) + 1, ts=now(), **fields)
        state = start(event) if isinstance(event, RunStarted) else reduce(states[-1], event)
        events.append(event)
        states.append(state)

    def finish(status: Status, error: str | None) -> None:
        emit(
            RunFinished,
            status=status,
            steps=states[-1].step,
            elapsed=round(now() - t0, 3),
            error=error,
            usage=states[-1].usage,
        )

    emit(RunStarted, **run_started(data, max_steps=max_steps))
    expected = [Message(role="user", content=(TextBlock(text=states[0].goal),))]
    consumed: list[Reply] = []
    results: dict[str, ToolResult] = {}
    turn: tuple[ToolUseBlock, ...] = ()  # the tool calls of the newest assistant turn
    schedule: list[tuple[str, ToolUseBlock]] = []  # ("start" | "finish", call) still to do
    next_id = 1
    # Each step is at most: a model call, 5 starts and 5 finishes; then Finish and Finished.
    for _ in range(12 * (max_steps + 1) + 2):
        action = next_action(states[-1])
        match action:
            case CallModel(step=step):
                assert step == states[-1].step + 1
                assert not schedule
                reply = data.draw(replies(tools=tools, errors=errors), label=f"reply {step}")
                ids = iter(f"toolu_{n:04d}" for n in range(next_id, next_id + 5))
                content = tuple(
                    evolve(b, id=next(ids)) if isinstance(b, ToolUseBlock) else b
                    for b in reply.content
                )
                reply = evolve(reply, content=content)
                next_id += len(reply.tool_uses)
                consumed.append(reply)
                attempt = 1
                emit(LlmCallStarted, step=step, attempt=attempt)
                attempts = (*reply.failures, *((reply.fatal,) if reply.fatal else ()))
                for n, failure in enumerate(attempts):
                    for token in () if failure.sdk_retry else failure.tokens:
                        emit(LlmToken, text=token)
                    will_retry = n < len(reply.failures)
                    emit(
                        LlmCallFailed,
                        error_type=failure.error_type,
                        message=failure.message,
                        attempt=attempt,
                        will_retry=will_retry,
                        retry_in=0.5 * 2 ** (attempt - 1) if will_retry else 0.0,
                        status_code=failure.status_code,
                        request_id=f"req_{step}_{attempt}",
                    )
                    if not will_retry:
                        break
                    attempt += 1
                    if not failure.sdk_retry:
                        emit(LlmCallStarted, step=step, attempt=attempt)
                if reply.fatal is not None:
                    message = reply.fatal.message
                    finish(
                        Status.ERROR,
                        f"{message} (after {attempt} attempts)" if attempt > 1 else message,
                    )
                    continue
                for token in reply.tokens:
                    emit(LlmToken, text=token)
                emit(
                    LlmResponse,
                    content=reply.content,
                    stop_reason=reply.stop_reason,
                    usage=reply.usage,
                    request_id=f"req_{step}",
                )
                expected.append(Message(role="assistant", content=reply.content))
                turn = reply.tool_uses
                if turn:
                    # Any interleaving of starts and finishes: each call appears twice in a
                    # permutation, its first appearance is its start.
                    order = data.draw(
                        st.permutations([i for i in range(len(turn)) for _ in (0, 1)]),
                        label="tool order",
                    )
                    seen: set[int] = set()
                    for i in order:
                        schedule.append(("finish" if i in seen else "start", turn[i]))
                        seen.add(i)
            case RunTools(calls=calls):
                kind, call = schedule.pop(0)
                assert call.id in {c.id for c in calls}, "the loop runs only what it is told"
                if kind == "start":
                    emit(ToolCallStarted, id=call.id, name=call.name, input=call.input)
                else:
                    result = data.draw(tool_results, label=f"result {call.id}")
                    results[call.id] = result
                    emit(ToolCallFinished, id=call.id, result=result, duration=tick / 2)
            case RefuseTools(calls=calls, reason=reason):
                # Refused calls are never started: only their finishes, in the drawn order.
                schedule = [(kind, call) for kind, call in schedule if kind == "finish"]
                _, call = schedule.pop(0)
                assert call.id in {c.id for c in calls}
                result = ToolResult.error(ErrorType.INVALID_INPUT, reason)
                results[call.id] = result
                emit(ToolCallFinished, id=call.id, result=result)
            case Finish(status=status, error=error):
                finish(status, error)
            case Finished():
                return Run(
                    events=tuple(events),
                    states=tuple(states),
                    replies=tuple(consumed),
                    expected_messages=tuple(expected),
                    results=results,
                    max_steps=max_steps,
                )
        if turn and not schedule and all(c.id in results for c in turn):
            expected.append(
                Message(
                    role="user",
                    content=tuple(
                        ToolResultBlock(
                            tool_use_id=c.id,
                            content=results[c.id].content,
                            is_error=results[c.id].is_error,
                        )
                        for c in turn
                    ),
                )
            )
            turn = ()
    raise AssertionError(f"the loop did not end within {max_steps} steps: {action!r}")
