"""The run's state: frozen records and nothing else.

Everything here is immutable (tuples, frozen attrs) so a state can be shared, compared and
replayed without copies. Only `ruizn.reducers` builds new states, with `attrs.evolve`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Any, Literal

from attrs import field, frozen

from ruizn.settings import JsonObject as JsonObject  # noqa: PLC0414 - re-exported for the records
from ruizn.settings import RunSettings


class Status(enum.StrEnum):
    RUNNING = "running"
    SUCCESS = "success"
    MAX_STEPS = "max_steps"
    # Stopped before a model call: the run's budget (max_cost), or a fleet batch's, is spent.
    MAX_COST = "max_cost"
    ERROR = "error"
    CANCELLED = "cancelled"
    # Stopped cleanly with tool calls waiting for a human's decision (see decide, approvals):
    # `ruizn resume --approve/--deny` or a prompt goes on from here.
    AWAITING_APPROVAL = "awaiting_approval"
    # The answer never matched the run's output schema, retries included.
    OUTPUT_INVALID = "output_invalid"


class Phase(enum.StrEnum):
    """Where a run is in its loop; `reducers.ALLOWED` says which events each phase takes."""

    READY = "ready"  # the next model call may start (the last message is the user's)
    STREAMING = "streaming"  # a model call is in flight: tokens, then a response or a failure
    TOOLS = "tools"  # the last turn asked for tools that are not all answered yet
    DONE = "done"  # the last turn needs nothing more: the run must finish
    FINISHED = "finished"  # run_finished was logged: only a resume goes on


class ErrorType(enum.StrEnum):
    """Why a tool call failed; the model sees this, so the names are part of the contract."""

    TIMEOUT = "timeout"
    PERMISSION_ERROR = "permission_error"
    NOT_FOUND = "not_found"
    INVALID_INPUT = "invalid_input"
    UNKNOWN_TOOL = "unknown_tool"
    RUNTIME_ERROR = "runtime_error"
    INTERRUPTED = "interrupted"
    INVALID_RESPONSE = "invalid_response"
    DENIED = "denied"  # a person or the approval policy refused the call; it was not run
    EXIT_STATUS = "exit_status"  # a command ran and exited non-zero (its output is the content)


# Who decided a call: the person asked, the run's approval mode, or a person's earlier
# "always approve this tool" (`a` at the prompt).
DecidedBy = Literal["user", "policy", "always-rule"]


@frozen(kw_only=True)
class Approval:
    """Where one tool call of the turn stands with its approval request."""

    approved: bool | None = None  # None: requested, no decision yet
    by: DecidedBy | None = None
    reason: str | None = None


@frozen(kw_only=True)
class ImageSource:
    type: Literal["base64"] = "base64"
    media_type: str
    data: str  # the image's bytes, base64


@frozen(kw_only=True)
class ImageBlock:
    """An image in a tool's result, exactly as the Messages API takes it (see ruizn.media)."""

    type: Literal["image"] = "image"
    source: ImageSource


@frozen(kw_only=True)
class TextBlock:
    type: Literal["text"] = "text"
    text: str


# What a tool result holds: a string, or (when it holds an image) text and image blocks in
# order. Only ruizn.media makes the second form (`content_of`, `fit`); the reducer refuses
# any other (`media.problem`), so one result has one form, in the log and on the wire.
ResultBlock = TextBlock | ImageBlock
ResultContent = str | tuple[ResultBlock, ...]


@frozen(kw_only=True)
class ToolResult:
    content: ResultContent
    is_error: bool = False
    error_type: str | None = None

    @classmethod
    def ok(cls, content: ResultContent) -> ToolResult:
        return cls(content=content)

    @classmethod
    def error(cls, error_type: ErrorType, content: str) -> ToolResult:
        return cls(content=content, is_error=True, error_type=error_type.value)


@frozen(kw_only=True)
class PreToolVerdict:
    """What the PreToolUse hooks decided about one call: `ran` hooks so far, the strongest
    decision (deny over ask over allow over none) and its reason."""

    id: str
    ran: int = 0
    decision: str = "none"
    reason: str | None = None


class TurnResults:
    """The results of a turn's calls, by position (None: not answered yet). An immutable
    value: it equals, iterates and unstructures as that tuple.

    Answering one call costs O(1), not a copy of the turn: a turn can hold ten thousand
    calls, and a tuple rebuilt per answer made such a turn (and its replay) quadratic.
    Versions share one dict of answers, in the order they came, and each version sees the
    first `_seen` of them. `answer` on the newest version extends the dict; on an older one
    (a branch: replaying a prefix twice, a law that reduces one state two ways) it first
    copies what that version sees. No version ever shows anything but what it showed.
    """

    __slots__ = ("_answers", "_seen", "_size")

    def __init__(
        self,
        size: int = 0,
        _answers: dict[int, tuple[int, ToolResult]] | None = None,
        _seen: int = 0,
    ) -> None:
        self._size = size
        self._answers: dict[int, tuple[int, ToolResult]] = {} if _answers is None else _answers
        self._seen = _seen

    @classmethod
    def of(cls, results: tuple[ToolResult | None, ...]) -> TurnResults:
        made = cls(len(results))
        for index, result in enumerate(results):
            if result is not None:
                made = made.answer(index, result)
        return made

    def get(self, index: int) -> ToolResult | None:
        if not 0 <= index < self._size:
            raise IndexError(index)
        entry = self._answers.get(index)
        return entry[1] if entry is not None and entry[0] < self._seen else None

    def answer(self, index: int, result: ToolResult) -> TurnResults:
        """This version with call `index` answered (which it must not be yet)."""
        if self.get(index) is not None:
            raise ValueError(f"call {index} of the turn is answered already")
        answers = self._answers
        if len(answers) != self._seen:  # an older version: branch off with a copy
            answers = {i: entry for i, entry in answers.items() if entry[0] < self._seen}
        answers[index] = (self._seen, result)
        return TurnResults(self._size, answers, self._seen + 1)

    @property
    def answered(self) -> int:
        return self._seen

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[ToolResult | None]:
        return iter(self.as_tuple())

    def as_tuple(self) -> tuple[ToolResult | None, ...]:
        results: list[ToolResult | None] = [None] * self._size
        for index, (position, result) in self._answers.items():
            if position < self._seen:
                results[index] = result
        return tuple(results)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TurnResults):
            return self.as_tuple() == other.as_tuple()
        if isinstance(other, tuple):
            return self.as_tuple() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compares by value, like the tuple it shows

    def __repr__(self) -> str:
        return f"TurnResults({self.as_tuple()!r})"


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
    content: ResultContent
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


@frozen(kw_only=True)
class CompactionBlock:
    """A summary that stands in for the messages before it (see ruizn.compaction). From the
    API (a compaction request): its fields exactly as returned, sent back verbatim, first in
    `messages`; `signature` covers them. From ruizn's own summary request: `content` only
    (no signature), sent as text."""

    type: Literal["compaction"] = "compaction"
    content: str | None
    encrypted_content: str | None = None
    signature: str | None = None
    # The API's `tool_addition`/`tool_removal` entries for the compacted range, as returned.
    tool_changes: tuple[JsonObject, ...] | None = field(default=None, hash=False)

    @property
    def signed(self) -> bool:
        """The API made it (a signature or opaque content to send back); else ruizn did."""
        return self.signature is not None or self.encrypted_content is not None


ContentBlock = (
    TextBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | CompactionBlock
)


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
    # Of cache_creation_input_tokens, those written with the 1-hour TTL (billed higher than
    # the 5-minute ones, which are the rest; ruizn itself asks for 5 minutes).
    cache_creation_1h_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens
            + other.cache_creation_input_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_creation_1h_input_tokens=self.cache_creation_1h_input_tokens
            + other.cache_creation_1h_input_tokens,
        )

    @property
    def total_input_tokens(self) -> int:
        """All prompt tokens, however they were billed."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


@frozen(kw_only=True)
class MediaTally:
    """The images the run's next request holds: those of every tool result so far (see
    ruizn.media, which counts them and sets the limits)."""

    images: int = 0
    encoded: int = 0  # their base64, in characters
    large: int = 0  # those over media.MAX_SIDE_MANY px on a side


@frozen(kw_only=True)
class ToolCall:
    """A tool_use the model asked for, as the runner must run it."""

    id: str
    name: str
    input: JsonObject = field(factory=dict, hash=False)


@frozen(kw_only=True)
class CallFailure:
    """The last failed attempt of the model call in progress (see reducers, decide)."""

    message: str
    will_retry: bool
    retry_in: float = 0.0
    # The prompt did not fit the window: the history is compacted before the next attempt.
    compact: bool = False


@frozen(kw_only=True)
class ChildRun:
    """A subagent this run started (subagent_started) and, once it ended, how
    (subagent_finished: `status` None while it runs). Its totals are in the run's."""

    id: str  # the `agent` call that started it
    run_id: str
    agent: str
    status: Status | None = None
    steps: int = 0
    usage: Usage = field(factory=Usage)
    cost: float | None = None
    error: str | None = None
    awaiting: tuple[ToolCall, ...] = ()  # its calls waiting for a decision (awaiting_approval)


@frozen(kw_only=True)
class ExecutionContext:
    run_id: str
    goal: str
    # The run's settings as they stand: run_started's, with what each run_resumed changed.
    settings: RunSettings
    phase: Phase = Phase.READY
    # A step is one model call; `step` counts the calls that returned a response.
    step: int = 0
    # Attempts made so far at the model call of step `step + 1` (retries included).
    attempt: int = 0
    failure: CallFailure | None = None
    status: Status = Status.RUNNING
    messages: tuple[Message, ...] = ()
    usage: Usage = field(factory=Usage)
    # The cost in USD of the responses whose price the log records (`llm_response.cost`), the
    # number priced with no known price for the model, and the number logged before ruizn
    # priced responses (`ruizn show` prices those now, each on its own usage).
    cost: float = 0.0
    cost_unknown: int = 0
    unpriced_steps: int = 0
    # A budget shared with other runs (a fleet's batch) that is spent: no more model calls.
    budget_spent: str | None = None
    # The estimated input tokens of the next request: the last response's whole prompt and
    # answer, plus what was added since, less what was cleared (see ruizn.window).
    context_tokens: int = 0
    # tool_use ids whose results were cleared from the history (context_cleared).
    cleared: tuple[str, ...] = ()
    stop_reason: str | None = None
    # True while the last assistant message is unfinished and the next call continues it
    # (stop_reason pause_turn, or a text cut at max_tokens after a resume raised the limit).
    continuing: bool = False
    error: str | None = None
    # The tool calls of the last assistant turn, with their results as they arrive (None:
    # not answered yet). When every call is answered they are merged into one user message,
    # in the order the model asked (see tool_turns.on_tool_call_finished).
    turn_calls: tuple[ToolCall, ...] = ()
    turn_results: TurnResults = field(factory=TurnResults)
    turn_open: int = 0
    # Per call of turn_calls: None (no approval asked for) or where its request stands.
    turn_approvals: tuple[Approval | None, ...] = ()
    # Calls of the turn whose tool changed or went away (tools_changed) after the model made
    # them: answered with why, never run against another tool (see decide.stale_result).
    turn_stale: tuple[str, ...] = ()
    # Tools a person approved for the rest of the run (`a` at the prompt); later calls of
    # these are approved by the "always-rule".
    always_approved: tuple[str, ...] = ()
    # tool_use id -> index in turn_calls. Derived from turn_calls when a response arrives and
    # never mutated; kept so each tool event costs O(1) lookups, not a scan of the turn (a
    # turn may hold thousands of calls). Not part of equality or the JSON form.
    turn_index: dict[str, int] = field(factory=dict, eq=False, hash=False, repr=False)
    # Deltas streamed by the model call in flight. Only counted: the text itself is in the
    # log (LlmToken) and the finished turn in LlmResponse, so replay never concatenates.
    streamed_tokens: int = 0
    # Tool calls started but not finished: what a crash interrupted (see
    # resuming.interrupted_calls).
    tools_in_flight: tuple[str, ...] = ()
    # The images of every result so far (what the next request holds), counted by the
    # reducer as results arrive; derived from messages and turn_results like turn_index, so
    # not part of equality or the JSON form.
    media: MediaTally = field(factory=MediaTally, eq=False, hash=False, repr=False)
    last_seq: int = 0
    elapsed: float = 0.0
    # The tree id of the run's last checkpoint of the workspace's files (None: none yet).
    checkpoint: str | None = None
    # A run with an output schema: the validated answer (output_checked), whether there is
    # one, and how many answers did not match (each sent back with its error).
    output: Any = field(default=None, hash=False)
    output_valid: bool = False
    output_checks: int = 0
    # Hooks (ruizn.hooks). Per call of the turn: the PreToolUse hooks run so far and their
    # combined decision. The step whose end the Stop hooks saw (-1: none yet) and whether a
    # Stop hook sent the model back (Claude Code's stop_hook_active). A hook that ended the
    # run (a blocked prompt, `continue: false`): why.
    turn_pre: tuple[PreToolVerdict, ...] = ()
    stop_hooked_step: int = -1
    stop_blocked: bool = False
    hook_stop: str | None = None
    # SessionStart then UserPromptSubmit hooks run at the run's start so far.
    start_hooks_ran: int = 0
    # Compaction (ruizn.compaction): the trigger ("auto", "manual") of the compaction call in
    # flight or being retried (None: the call in flight, if any, is a step); the step at
    # which the history was last compacted (-1: never), so one step is compacted at most
    # once; how many compactions the run made and what they cost (in `cost` too).
    compacting: str | None = None
    compacted_step: int = -1
    compactions: int = 0
    compaction_cost: float = 0.0
    # PreCompact hooks run before the compaction at step `precompact_step`: how many, what
    # they added to the instructions, and why one blocked it; PostCompact hooks run after
    # the last compaction.
    precompact_step: int = -1
    precompact_ran: int = 0
    precompact_notes: tuple[str, ...] = ()
    precompact_block: str | None = None
    postcompact_ran: int = 0
    compact_trigger: str | None = None  # what set off the last compaction (auto, manual)
    # The subagents this run started, in order (their usage and cost are in the run's).
    children: tuple[ChildRun, ...] = ()
    # A subagent's own run: (its parent's run id, its agent's name), from its run_started.
    agent_of: tuple[str, str] | None = None
    # A subagent's: the top run of its tree (its parent's, or the one its parent names).
    agent_root: str | None = None

    @property
    def total_cost(self) -> float | None:
        """The run's cost in USD, when the log prices every model call; else None."""
        if self.cost_unknown or self.unpriced_steps:
            return None
        return self.cost

    @property
    def children_awaiting(self) -> tuple[ChildRun, ...]:
        """Children stopped awaiting approval whose `agent` call is still running: this
        run waits on their decisions (`resume --approve ID` hands one to its child)."""
        return tuple(
            child
            for child in self.children
            if child.status is Status.AWAITING_APPROVAL and child.id in self.tools_in_flight
        )

    @property
    def pending_tool_calls(self) -> tuple[ToolCall, ...]:
        """tool_use blocks of the last assistant turn that have no result yet."""
        return tuple(
            call
            for call, result in zip(self.turn_calls, self.turn_results, strict=True)
            if result is None
        )

    @property
    def awaiting_approval(self) -> tuple[ToolCall, ...]:
        """Calls of the last turn whose approval was requested and not decided yet."""
        return tuple(
            call
            for call, result, approval in zip(
                self.turn_calls, self.turn_results, self.turn_approvals, strict=True
            )
            if result is None and approval is not None and approval.approved is None
        )
