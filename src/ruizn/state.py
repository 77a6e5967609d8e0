"""The run's state: frozen records and nothing else.

Everything here is immutable (tuples, frozen attrs) so a state can be shared, compared and
replayed without copies. Only `ruizn.reducers` builds new states, with `attrs.evolve`.
"""

from __future__ import annotations

import enum
from typing import Any, Literal

from attrs import field, frozen

JsonObject = dict[str, Any]


class Status(enum.StrEnum):
    RUNNING = "running"
    SUCCESS = "success"
    MAX_STEPS = "max_steps"
    ERROR = "error"
    CANCELLED = "cancelled"


class ErrorType(enum.StrEnum):
    """Why a tool call failed; the model sees this, so the names are part of the contract."""

    TIMEOUT = "timeout"
    PERMISSION_ERROR = "permission_error"
    NOT_FOUND = "not_found"
    INVALID_INPUT = "invalid_input"
    UNKNOWN_TOOL = "unknown_tool"
    RUNTIME_ERROR = "runtime_error"
    INTERRUPTED = "interrupted"


@frozen(kw_only=True)
class ToolResult:
    content: str
    is_error: bool = False
    error_type: str | None = None

    @classmethod
    def ok(cls, content: str) -> ToolResult:
        return cls(content=content)

    @classmethod
    def error(cls, error_type: ErrorType, content: str) -> ToolResult:
        return cls(content=content, is_error=True, error_type=error_type.value)


@frozen(kw_only=True)
class TextBlock:
    type: Literal["text"] = "text"
    text: str


@frozen(kw_only=True)
class ToolUseBlock:
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    # A JSON object as the model sent it. Dicts are not hashable, so the record compares by
    # value but is not hashed; nothing in ruizn mutates it after the provider built it.
    input: JsonObject = field(factory=dict, hash=False)


@frozen(kw_only=True)
class ToolResultBlock:
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str
    is_error: bool = False


@frozen(kw_only=True)
class ThinkingBlock:
    type: Literal["thinking"] = "thinking"
    # Must go back to the API byte for byte: the signature covers the text.
    thinking: str
    signature: str


@frozen(kw_only=True)
class RedactedThinkingBlock:
    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


ContentBlock = TextBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock


@frozen(kw_only=True)
class Message:
    role: Literal["user", "assistant"]
    content: tuple[ContentBlock, ...]


@frozen(kw_only=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens
            + other.cache_creation_input_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
        )

    @property
    def total_input_tokens(self) -> int:
        """All prompt tokens, however they were billed."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


@frozen(kw_only=True)
class ToolCall:
    """A tool_use the model asked for, as the shell must run it."""

    id: str
    name: str
    input: JsonObject = field(factory=dict, hash=False)


@frozen(kw_only=True)
class ExecutionContext:
    run_id: str
    goal: str
    model: str
    max_steps: int
    system: str
    tools: tuple[JsonObject, ...] = ()
    max_tokens: int = 4096
    workspace: str = ""
    # A step is one model call; `step` counts the calls that returned a response.
    step: int = 0
    status: Status = Status.RUNNING
    messages: tuple[Message, ...] = ()
    usage: Usage = field(factory=Usage)
    stop_reason: str | None = None
    error: str | None = None
    # Tool results of the current turn, keyed by tool_use id, until every call is answered;
    # then they are merged into one user message (see reducers._on_tool_call_finished).
    pending_results: tuple[tuple[str, ToolResult], ...] = ()
    # Deltas streamed by the model call in flight. Only counted: the text itself is in the
    # log (LlmToken) and the finished turn in LlmResponse, so replay never concatenates.
    streamed_tokens: int = 0
    # Tool calls started but not finished: what a crash interrupted (see shell resume).
    tools_in_flight: tuple[str, ...] = ()
    last_seq: int = 0
    elapsed: float = 0.0

    @property
    def pending_tool_calls(self) -> tuple[ToolCall, ...]:
        """tool_use blocks of the last assistant turn that have no result yet."""
        if not self.messages or self.messages[-1].role != "assistant":
            return ()
        answered = {tool_use_id for tool_use_id, _ in self.pending_results}
        return tuple(
            ToolCall(id=b.id, name=b.name, input=b.input)
            for b in self.messages[-1].content
            if isinstance(b, ToolUseBlock) and b.id not in answered
        )
