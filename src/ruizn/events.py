"""Everything that can happen in a run, as frozen past-tense facts.

Each event carries `seq` (1, 2, 3... within a run, continuing across resumes) and `ts`
(seconds since the epoch, supplied by the shell: the core never reads a clock). Each class
has a `TAG`, the `type` written to the log. Tags are constants, never derived from class
names, so renaming a class cannot orphan old logs.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from attrs import field, frozen

from ruizn.defaults import ApprovalMode, CompactionForm, Effort
from ruizn.limits import Limits
from ruizn.settings import RunSettings
from ruizn.state import (
    CompactionBlock,
    ContentBlock,
    DecidedBy,
    JsonObject,
    Status,
    ToolCall,
    ToolResult,
    Usage,
)
from ruizn.toolsource import ToolSource

# Bump when a change to the events would make an older reader misread a newer log.
# 2: `attempt` counts every attempt of a step's model call (ruizn makes all retries);
#    run_started records the retry policy, run_resumed may raise max_tokens,
#    llm_call_failed records the server's retry-after.
# 3: run_started carries the run's settings whole (`settings`, a RunSettings) instead of a
#    copy of each field; run_resumed may change the workspace and the approval mode.
#    Version 2 logs are read and upgraded line by line (serde.decode).
SCHEMA_VERSION = 3


@frozen(kw_only=True)
class Parent:
    """The run a run came from. A fork (`ruizn fork RUN --at SEQ`) begins with the parent's
    events up to `seq`; a rerun (`ruizn rerun RUN`) re-drove the recording, whose last event
    was `seq`; a subagent (kind "agent") was started by the parent's `agent` call `call`
    (its subagent_started is `seq`), as the definition named `agent`; `root` is the top
    run of its tree when the parent is itself a subagent (so its log alone names the trace)."""

    run_id: str
    seq: int
    kind: Literal["fork", "rerun", "agent"] = "fork"
    # A subagent's (written only when set, so forks and reruns keep their bytes).
    agent: str | None = None
    call: str | None = None
    root: str | None = None


@frozen(kw_only=True)
class RunStarted:
    TAG: ClassVar[str] = "run_started"
    seq: int
    ts: float
    run_id: str
    goal: str
    settings: RunSettings
    ruizn_version: str = ""
    # Written only when set (serde), so every run_started without one keeps its bytes (and
    # its trust record, which hashes them).
    parent: Parent | None = None


@frozen(kw_only=True)
class RunResumed:
    """The run goes on after a stop. `max_steps` is the (possibly raised) step limit from now
    on; `max_tokens` a new per-call limit; `max_cost` the run's new budget (a total for the
    whole run) and `max_context` its new context limit (0: off); `workspace` and `approval`
    what a person chose when accepting a run ruizn did not start (None: unchanged); `reask`
    that the log's approvals are asked again; `confine` that its shell's loosening is not."""

    TAG: ClassVar[str] = "run_resumed"
    seq: int
    ts: float
    max_steps: int
    torn_bytes: int = 0
    max_tokens: int | None = None
    workspace: str | None = None
    approval: ApprovalMode | None = None
    max_cost: float | None = None
    max_context: int | None = None
    # The log's approvals are withdrawn (a run a person accepted from a log ruizn did not
    # write): calls it approved but that have not started wait for a decision again, and its
    # "always approve this tool" rules are forgotten. See reducers.reasked.
    reask: bool = False
    # Seconds of the session before, when it ended with no run_finished (killed, a fleet
    # worker taken over): from its first event to its last. Added to the run's elapsed time,
    # so a run's time is every session's, whoever ran them.
    elapsed: float = 0.0
    # The log's loosening of the shell is withdrawn (a run a person accepted from a log ruizn
    # did not write, without accepting these): the sandbox is on again, no
    # --allow-command pattern approves a command, and no --shell-allow-domain host is reached.
    confine: bool = False

    @property
    def limits(self) -> Limits:
        """The limits the run goes on with (flat fields in the log: its format stays)."""
        return Limits(
            max_steps=self.max_steps,
            max_tokens=self.max_tokens,
            max_cost=self.max_cost,
            max_context=self.max_context,
        )


@frozen(kw_only=True)
class UserMessage:
    """A person added a message to a run that had stopped (`ruizn continue`). Logged right
    after the run_resumed that goes on; the model sees it after the whole history."""

    TAG: ClassVar[str] = "user_message"
    seq: int
    ts: float
    text: str


@frozen(kw_only=True)
class LlmCallStarted:
    """A model call begins; its tokens follow. `attempt` is 1 for the first try at step
    `step` and counts up with every retry, whatever failed."""

    TAG: ClassVar[str] = "llm_call_started"
    seq: int
    ts: float
    step: int
    attempt: int = 1
    # A compaction request (ruizn.compaction), not a step: what set it off, "auto" (the
    # history passed --compact-at, or the window was exceeded) or "manual" (`ruizn
    # compact`). It ends with context_compacted (or fails like any call); `step` is the
    # step it comes before.
    compaction: Literal["auto", "manual"] | None = None


@frozen(kw_only=True)
class LlmToken:
    TAG: ClassVar[str] = "llm_token"
    seq: int
    ts: float
    text: str


@frozen(kw_only=True)
class LlmCallFailed:
    """An attempt failed. Its tokens stay in the log but never enter the messages."""

    TAG: ClassVar[str] = "llm_call_failed"
    seq: int
    ts: float
    error_type: str
    message: str
    attempt: int = 1
    will_retry: bool = False
    # The wait before the next attempt, as decide.after_failure chose it (a retry-after from
    # the server included): the real wait, not an estimate.
    retry_in: float = 0.0
    status_code: int | None = None
    request_id: str | None = None
    # What the server asked for (retry-after / retry-after-ms), if anything.
    retry_after: float | None = None
    # The request did not fit the model's window (a 400 "prompt is too long"): the history
    # is compacted, then the call is made again (decide.after_failure).
    compact: bool = False


@frozen(kw_only=True)
class LlmResponse:
    TAG: ClassVar[str] = "llm_response"
    seq: int
    ts: float
    content: tuple[ContentBlock, ...]
    stop_reason: str | None
    usage: Usage = field(factory=Usage)
    request_id: str | None = None
    # What this call cost in USD, priced when it was made, and by which price list
    # ("genai-prices 0.2.3"). cost None with priced_by set: the list knows no price for the
    # model; both None: logged before ruizn priced calls (a reader may price it now).
    cost: float | None = None
    priced_by: str | None = None


@frozen(kw_only=True)
class ClearedResult:
    """One tool result taken out of the history: its call, its size, and what replaced it."""

    tool_use_id: str
    name: str
    size: int  # bytes of the result removed (UTF-8)
    placeholder: str


@frozen(kw_only=True)
class ContextCleared:
    """The oldest tool results were cleared so the next request fits `max_context`; each is
    replaced by its placeholder in the messages from now on (the log keeps the result)."""

    TAG: ClassVar[str] = "context_cleared"
    seq: int
    ts: float
    results: tuple[ClearedResult, ...]
    limit: int  # the context limit (tokens) the request had to fit


@frozen(kw_only=True)
class ContextCompacted:
    """The history was summarised (ruizn.compaction): `block` stands in for its first
    `replaced` messages (all of them) from now on, first in every request. `source`: the
    API's compaction request ("server", the block exactly as returned, signed) or ruizn's
    own summary request ("client"). `tokens_before` is the estimate of the request that
    would have been sent, `tokens_after` that of the next one; `usage` and `cost` are the
    compaction call's own (the API's `usage.iterations` of type compaction included), added
    to the run's totals and budget. Ends the compaction call that llm_call_started began."""

    TAG: ClassVar[str] = "context_compacted"
    seq: int
    ts: float
    block: CompactionBlock
    source: Literal["server", "client"]
    trigger: Literal["auto", "manual"]
    replaced: int
    tokens_before: int
    tokens_after: int
    usage: Usage = field(factory=Usage)
    cost: float | None = None
    priced_by: str | None = None
    request_id: str | None = None
    instructions: str | None = None


@frozen(kw_only=True)
class BudgetSpent:
    """A budget this run shares with others (a fleet's batch) is spent: the run makes no
    more model calls and finishes max_cost. Logged by the runner before the call."""

    TAG: ClassVar[str] = "budget_spent"
    seq: int
    ts: float
    budget: str  # which budget (the batch's name)
    limit: float  # USD
    spent: float  # USD, by every run of the budget, when it was checked


@frozen(kw_only=True)
class ToolCallStarted:
    TAG: ClassVar[str] = "tool_call_started"
    seq: int
    ts: float
    id: str
    name: str
    input: JsonObject = field(factory=dict, hash=False)


@frozen(kw_only=True)
class ToolCallFinished:
    TAG: ClassVar[str] = "tool_call_finished"
    seq: int
    ts: float
    id: str
    result: ToolResult
    duration: float = 0.0


@frozen(kw_only=True)
class ToolApprovalRequested:
    """The call needs a decision before it may run. Logged before anyone is asked, so a run
    stopped (or killed) while waiting still knows, on resume, what it waits for."""

    TAG: ClassVar[str] = "tool_approval_requested"
    seq: int
    ts: float
    id: str
    name: str
    input: JsonObject = field(factory=dict, hash=False)


@frozen(kw_only=True)
class ToolApprovalDecided:
    """Who allowed (or refused) a requested call, and why. A denied call is then answered
    with a `denied` error result; an approved one may start."""

    TAG: ClassVar[str] = "tool_approval_decided"
    seq: int
    ts: float
    id: str
    approved: bool
    by: DecidedBy
    reason: str | None = None
    # The person approved this tool for the rest of the run (`a` at the prompt): later calls
    # of it are approved by the "always-rule".
    always: bool = False


@frozen(kw_only=True)
class ToolsChanged:
    """MCP servers changed their tool lists (notifications/tools/list_changed): the run's
    tools from this event on, whole, as the next request sends them (`tools`, the API
    schemas) and as a resume loads them (`tool_sources`). Only the MCP tools of `servers`
    may differ from the run's tools before it (the reducer refuses anything else)."""

    TAG: ClassVar[str] = "tools_changed"
    seq: int
    ts: float
    servers: tuple[str, ...]
    tools: tuple[JsonObject, ...]
    tool_sources: tuple[ToolSource, ...]


@frozen(kw_only=True)
class OutputChecked:
    """The model's final answer, checked against the run's output schema. `valid`: it is
    `output` (the JSON value). Otherwise `error` (the validator's message) is sent back to
    the model, up to `output_retries` times; then the run ends output_invalid. `call_id`: the
    `final_output` tool call the answer came in (tool mode), answered by this event."""

    TAG: ClassVar[str] = "output_checked"
    seq: int
    ts: float
    valid: bool
    output: Any = field(default=None, hash=False)
    error: str | None = None
    call_id: str | None = None


@frozen(kw_only=True)
class HookRan:
    """A hook command ran (see ruizn.hooks): at which event, for which tool call, how it
    ended (`exit_code` None: killed at its timeout, or it could not start; `error` says
    which) and what it decided: `decision` none, allow, deny, ask (PreToolUse) or block;
    `reason` (what the model or the person is told), `context` (text added for the model),
    `updated_input` (a PreToolUse's new tool input). Replay, resume and rerun take these as
    recorded: a hook never runs again for an event the log holds."""

    TAG: ClassVar[str] = "hook_ran"
    seq: int
    ts: float
    hook_event: str
    command: str
    exit_code: int | None
    decision: str = "none"
    reason: str | None = None
    context: str | None = None
    updated_input: JsonObject | None = field(default=None, hash=False)
    tool_use_id: str | None = None
    duration: float = 0.0
    error: str | None = None


@frozen(kw_only=True)
class LeftOut:
    """A path a checkpoint left out, and why: `ignored` (a .gitignore), `secret` (a
    secret-file name) or `too_big` (over the size cap). `.ruizn/` (the run folders) is always
    left out and never named."""

    path: str
    why: str


@frozen(kw_only=True)
class Checkpointed:
    """The workspace's files were saved, before tools of step `step` that may change them
    ran (or when the run ended: `final`). `tree` names the snapshot in the workspace's store
    of checkpoints (a git tree, in the user's state folder, never in the workspace), holding
    `files` files of `bytes` bytes; `empty_dirs` are the empty folders (git keeps none);
    `left_out` what it did not save (the first hundred; `more_left_out` counts the rest).
    `error`: the snapshot failed (tree ""), and the tools ran all the same."""

    TAG: ClassVar[str] = "checkpoint"
    seq: int
    ts: float
    step: int
    tree: str
    files: int = 0
    bytes: int = 0
    empty_dirs: tuple[str, ...] = ()
    left_out: tuple[LeftOut, ...] = ()
    more_left_out: int = 0
    final: bool = False
    error: str | None = None


@frozen(kw_only=True)
class SubagentStarted:
    """The `agent` call `id` starts a child run `run_id` (its own log, its run_started naming
    this run) as the definition `agent`. Logged, and on disk, before the child's first line:
    a resume finds the child by this and resumes it rather than starting another."""

    TAG: ClassVar[str] = "subagent_started"
    seq: int
    ts: float
    id: str
    run_id: str
    agent: str
    description: str = ""


@frozen(kw_only=True)
class SubagentFinished:
    """The child of call `id` ended (this session of it): its status, steps, and its totals
    (usage, cost: None unknown), which are added to this run's, so this log alone gives the
    tree's cost and a replay never reads the child's."""

    TAG: ClassVar[str] = "subagent_finished"
    seq: int
    ts: float
    id: str
    run_id: str
    status: Status
    steps: int
    usage: Usage = field(factory=Usage)
    cost: float | None = None
    error: str | None = None
    # Status awaiting_approval: the child's calls that wait for a decision. This run stops
    # awaiting_approval too, and `resume --approve ID` hands the decision to the child.
    awaiting: tuple[ToolCall, ...] = ()


@frozen(kw_only=True)
class SettingsChanged:
    """A person changed a setting between turns (a session's `/model`, `/effort`); logged
    after the run_resumed that goes on, so replay sends the next request as the live run did.
    None: unchanged. With a new model: its context window and compaction form, as the
    Models API gave them (None: unknown)."""

    TAG: ClassVar[str] = "settings_changed"
    seq: int
    ts: float
    model: str | None = None
    effort: Effort | None = None
    context_window: int | None = None
    # The new model's compaction form (the Models API's word; None: not known, ruizn's own
    # summary).
    compaction: CompactionForm | None = None


@frozen(kw_only=True)
class RunFinished:
    TAG: ClassVar[str] = "run_finished"
    seq: int
    ts: float
    status: Status
    steps: int
    elapsed: float
    error: str | None = None
    # Totals for the whole run so far, so a reader needs no other line to report them.
    usage: Usage = field(factory=Usage)
    # USD; None: unknown (a call with no known price, or calls logged before ruizn priced).
    cost: float | None = None


Event = (
    RunStarted
    | RunResumed
    | LlmCallStarted
    | LlmToken
    | LlmCallFailed
    | LlmResponse
    | ToolCallStarted
    | ToolCallFinished
    | ToolApprovalRequested
    | ToolApprovalDecided
    | ToolsChanged
    | ContextCleared
    | ContextCompacted
    | BudgetSpent
    | RunFinished
    | UserMessage
    | OutputChecked
    | HookRan
    | Checkpointed
    | SubagentStarted
    | SubagentFinished
    | SettingsChanged
)

EVENT_TYPES: tuple[type[Any], ...] = (
    RunStarted,
    RunResumed,
    LlmCallStarted,
    LlmToken,
    LlmCallFailed,
    LlmResponse,
    ToolCallStarted,
    ToolCallFinished,
    ToolApprovalRequested,
    ToolApprovalDecided,
    ToolsChanged,
    ContextCleared,
    ContextCompacted,
    BudgetSpent,
    RunFinished,
    UserMessage,
    OutputChecked,
    HookRan,
    Checkpointed,
    SubagentStarted,
    SubagentFinished,
    SettingsChanged,
)
