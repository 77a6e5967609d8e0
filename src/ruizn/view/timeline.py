"""A run as a timeline: the model calls, tool calls, approvals and ends its log records.

A projection of the events, nothing more: `project(events)` folds them (in log order) into
frozen records that `ruizn view` draws. It reads no clock and trusts nothing it is given: a
log may have been written by anyone, so an id that matches nothing, a call that never ends
or a tool that never started is drawn as what it is, never an error.

A model call's cost is the one its llm_response recorded (priced when it was made). A call
the price list could not price, or one from a log older than prices, is unknown (None),
never $0.00; and so is the total of a run that holds one.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Literal

from attrs import define, evolve, field, frozen

from ruizn.events import (
    BudgetSpent,
    Checkpointed,
    ClearedResult,
    ContextCleared,
    ContextCompacted,
    Event,
    LlmCallFailed,
    LlmCallStarted,
    LlmResponse,
    LlmToken,
    RunFinished,
    RunResumed,
    RunStarted,
    SubagentFinished,
    SubagentStarted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallFinished,
    ToolCallStarted,
)
from ruizn.state import (
    DecidedBy,
    JsonObject,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResult,
    ToolUseBlock,
    Usage,
)

__all__ = [
    "AgentRun",
    "ApprovalWait",
    "Attempt",
    "Mark",
    "Sitting",
    "Step",
    "Timeline",
    "ToolRun",
    "project",
]

Outcome = Literal["response", "failed", "open"]


@frozen(kw_only=True)
class Attempt:
    """One try at a step's model call, from llm_call_started to its response or failure."""

    seq: int
    step: int
    attempt: int
    start: float
    end: float | None  # None: the log ends while it is in flight
    outcome: Outcome
    first_token: float | None = None
    deltas: int = 0
    usage: Usage | None = None
    cost: float | None = None
    stop_reason: str | None = None
    request_id: str | None = None
    error_type: str | None = None
    message: str | None = None
    status_code: int | None = None
    will_retry: bool = False
    retry_in: float = 0.0


@frozen(kw_only=True)
class ApprovalWait:
    requested: float
    decided: float | None = None
    approved: bool | None = None
    by: DecidedBy | None = None
    reason: str | None = None
    always: bool = False


@frozen(kw_only=True)
class AgentRun:
    """The child run (a subagent) an `agent` call started, as the parent's log tells it."""

    run_id: str
    agent: str
    description: str = ""
    status: str | None = None  # None: the parent's log holds no end of it (yet)
    steps: int = 0
    cost: float | None = None
    error: str | None = None


@frozen(kw_only=True)
class ToolRun:
    """A tool call the model asked for, and what became of it."""

    id: str
    name: str
    input: JsonObject = field(factory=dict, hash=False)
    start: float | None = None  # None: it never ran (denied, refused, or not yet)
    end: float | None = None
    duration: float | None = None
    result: ToolResult | None = None
    approval: ApprovalWait | None = None
    lane: int = 0  # calls of a step that overlap in time get different lanes
    child: AgentRun | None = None  # an `agent` call's child run


@frozen(kw_only=True)
class Step:
    number: int
    attempts: tuple[Attempt, ...]
    content: tuple[TextBlock | ThinkingBlock | RedactedThinkingBlock, ...] = ()
    tools: tuple[ToolRun, ...] = ()

    @property
    def start(self) -> float:
        return self.attempts[0].start if self.attempts else 0.0

    @property
    def end(self) -> float:
        ends = [a.end if a.end is not None else a.start for a in self.attempts]
        for tool in self.tools:
            ends.extend(t for t in (tool.start, tool.end) if t is not None)
            if tool.approval is not None:
                ends.append(tool.approval.decided or tool.approval.requested)
        return max(ends, default=self.start)


@frozen(kw_only=True)
class Mark:
    """Something the run did between steps that is no call: tool results cleared from the
    history (context_cleared), the history summarised (context_compacted: `limit` is the
    tokens after, `spent` its cost, `budget` its source), a shared budget found spent
    (budget_spent), or the workspace's files saved before a step's tools or at the end
    (checkpoint)."""

    seq: int
    ts: float
    after_step: int  # the step it follows (0: before the first)
    kind: Literal["context_cleared", "budget_spent", "context_compacted", "checkpoint"]
    cleared: tuple[ClearedResult, ...] = ()
    limit: float = 0  # tokens (context) or US dollars (budget)
    budget: str | None = None
    spent: float | None = None
    checkpoint: Checkpointed | None = None


@frozen(kw_only=True)
class Sitting:
    """One process's stretch of the run: run_started or run_resumed, to run_finished."""

    seq: int
    start: float
    resumed: bool
    max_steps: int
    torn_bytes: int = 0
    approval: str | None = None  # the mode from here on (a resume: None when unchanged)
    end: float | None = None
    status: str | None = None
    error: str | None = None
    steps: int | None = None
    elapsed: float | None = None


@frozen(kw_only=True)
class Timeline:
    run_id: str
    goal: str
    model: str
    system: str
    start: float
    end: float
    tool_names: tuple[str, ...]
    approval_mode: str
    sessions: tuple[Sitting, ...]
    steps: tuple[Step, ...]
    usage: Usage
    status: str  # the last run_finished's, or "running" when the log has none after a start
    error: str | None = None
    events: int = 0
    marks: tuple[Mark, ...] = ()

    @property
    def answer(self) -> str | None:
        """The text of the run's last response, when the run ended well with it."""
        if self.status != "success" or not self.steps:
            return None
        text = [b.text for b in self.steps[-1].content if isinstance(b, TextBlock)]
        return "".join(text) if text else None

    @property
    def cost(self) -> float | None:
        """The run's cost: None as soon as one call's cost is unknown."""
        total = 0.0
        for step in self.steps:
            for attempt in step.attempts:
                if attempt.usage is not None and attempt.cost is None:
                    return None
                total += attempt.cost or 0.0
        return total


# -- the fold -------------------------------------------------------------------------------
# Working records are mutable while the events are folded (one O(1) update per event: a
# 2,000-step log is 100,000 events), and frozen once at the end.


@define
class _Attempt:
    seq: int
    step: int
    attempt: int
    start: float
    end: float | None = None
    outcome: Outcome = "open"
    first_token: float | None = None
    deltas: int = 0
    usage: Usage | None = None
    cost: float | None = None
    stop_reason: str | None = None
    request_id: str | None = None
    failed: LlmCallFailed | None = None


@define
class _Tool:
    id: str
    name: str
    input: JsonObject
    start: float | None = None
    end: float | None = None
    duration: float | None = None
    result: ToolResult | None = None
    approval: ApprovalWait | None = None
    child: AgentRun | None = None


@define
class _Step:
    number: int
    attempts: list[_Attempt] = field(factory=list)
    content: tuple[TextBlock | ThinkingBlock | RedactedThinkingBlock, ...] = ()
    tools: list[_Tool] = field(factory=list)


@define
class _Fold:
    started: RunStarted | None = None
    sessions: list[Sitting] = field(factory=list)
    steps: list[_Step] = field(factory=list)
    by_number: dict[int, _Step] = field(factory=dict)
    tools: dict[str, _Tool] = field(factory=dict)
    open_attempt: _Attempt | None = None
    compacting: bool = False  # a compaction call is open (its end is a mark)
    usage: Usage = field(factory=Usage)
    marks: list[Mark] = field(factory=list)
    first_ts: float | None = None
    last_ts: float = 0.0
    events: int = 0

    def step(self, number: int) -> _Step:
        found = self.by_number.get(number)
        if found is None:
            found = _Step(number=number)
            self.by_number[number] = found
            self.steps.append(found)
        return found

    def last_step(self) -> _Step:
        return self.steps[-1] if self.steps else self.step(0)

    def tool(self, call_id: str, name: str = "?", call_input: JsonObject | None = None) -> _Tool:
        found = self.tools.get(call_id)
        if found is None:  # an id no response asked for: drawn on the step it came in
            found = _Tool(id=call_id, name=name, input=call_input or {})
            self.tools[call_id] = found
            self.last_step().tools.append(found)
        return found

    def feed(self, event: Event) -> None:
        self.events += 1
        if self.first_ts is None:
            self.first_ts = event.ts
        self.last_ts = max(self.last_ts, event.ts)
        match event:
            case LlmToken():
                attempt = self.open_attempt
                if attempt is not None:
                    if attempt.first_token is None:
                        attempt.first_token = event.ts
                    attempt.deltas += 1
            case LlmCallStarted(compaction=str()):
                self.open_attempt = None  # a compaction is a mark, not a step's attempt
                self.compacting = True
            case LlmCallFailed() if self.compacting:
                self.compacting = False
            case ContextCompacted():
                self.compacting = False
                self.marks.append(
                    Mark(
                        seq=event.seq,
                        ts=event.ts,
                        after_step=self._steps_so_far(),
                        kind="context_compacted",
                        limit=event.tokens_after,
                        budget=event.source,
                        spent=event.cost,
                    )
                )
            case LlmCallStarted():
                attempt = _Attempt(
                    seq=event.seq, step=event.step, attempt=event.attempt, start=event.ts
                )
                self.step(event.step).attempts.append(attempt)
                self.open_attempt = attempt
            case LlmResponse():
                attempt = self._close_attempt(event.ts, "response")
                attempt.usage = event.usage
                attempt.cost = event.cost
                attempt.stop_reason = event.stop_reason
                attempt.request_id = event.request_id
                self.usage = self.usage + event.usage
                step = self.step(attempt.step)
                step.content = tuple(
                    b
                    for b in event.content
                    if isinstance(b, TextBlock | ThinkingBlock | RedactedThinkingBlock)
                )
                for block in event.content:
                    if isinstance(block, ToolUseBlock):
                        tool = _Tool(id=block.id, name=block.name, input=block.input)
                        self.tools[block.id] = tool
                        step.tools.append(tool)
            case LlmCallFailed():
                attempt = self._close_attempt(event.ts, "failed")
                attempt.failed = event
            case ToolApprovalRequested():
                tool = self.tool(event.id, event.name, event.input)
                tool.approval = ApprovalWait(requested=event.ts)
            case ToolApprovalDecided():
                tool = self.tool(event.id)
                requested = tool.approval.requested if tool.approval else event.ts
                tool.approval = ApprovalWait(
                    requested=requested,
                    decided=event.ts,
                    approved=event.approved,
                    by=event.by,
                    reason=event.reason,
                    always=event.always,
                )
            case ToolCallStarted():
                self.tool(event.id, event.name, event.input).start = event.ts
            case ToolCallFinished():
                tool = self.tool(event.id)
                tool.end, tool.result, tool.duration = event.ts, event.result, event.duration
            case SubagentStarted():
                self.tool(event.id).child = AgentRun(
                    run_id=event.run_id, agent=event.agent, description=event.description
                )
            case SubagentFinished():
                tool = self.tool(event.id)
                known = tool.child or AgentRun(run_id=event.run_id, agent="?")
                tool.child = evolve(
                    known,
                    status=str(event.status),
                    steps=event.steps,
                    cost=event.cost,
                    error=event.error,
                )
            case RunStarted():
                if self.started is None:
                    self.started = event
                self._open_session(event.seq, event.ts, event.settings.max_steps, resumed=False)
                self.sessions[-1] = evolve(self.sessions[-1], approval=event.settings.approval)
            case RunResumed():
                self._open_session(event.seq, event.ts, event.max_steps, resumed=True)
                self.sessions[-1] = evolve(
                    self.sessions[-1], torn_bytes=event.torn_bytes, approval=event.approval
                )
            case ContextCleared():
                self.marks.append(
                    Mark(
                        seq=event.seq,
                        ts=event.ts,
                        after_step=self._steps_so_far(),
                        kind="context_cleared",
                        cleared=event.results,
                        limit=event.limit,
                    )
                )
            case Checkpointed():
                self.marks.append(
                    Mark(
                        seq=event.seq,
                        ts=event.ts,
                        after_step=self._steps_so_far(),
                        kind="checkpoint",
                        checkpoint=event,
                    )
                )
            case BudgetSpent():
                self.marks.append(
                    Mark(
                        seq=event.seq,
                        ts=event.ts,
                        after_step=self._steps_so_far(),
                        kind="budget_spent",
                        limit=event.limit,
                        budget=event.budget,
                        spent=event.spent,
                    )
                )
            case RunFinished():
                self.open_attempt = None
                if not self.sessions:
                    self._open_session(event.seq, event.ts, 0, resumed=False)
                self.sessions[-1] = evolve(
                    self.sessions[-1],
                    end=event.ts,
                    status=str(event.status),
                    error=event.error,
                    steps=event.steps,
                    elapsed=event.elapsed,
                )

    def _steps_so_far(self) -> int:
        return self.steps[-1].number if self.steps else 0

    def _close_attempt(self, ts: float, outcome: Outcome) -> _Attempt:
        attempt = self.open_attempt
        if attempt is None:  # a reply with no call started: an attempt of zero length
            number = self.steps[-1].number + 1 if self.steps else 1
            attempt = _Attempt(seq=0, step=number, attempt=1, start=ts)
            self.step(number).attempts.append(attempt)
        attempt.end, attempt.outcome = ts, outcome
        self.open_attempt = None
        return attempt

    def _open_session(self, seq: int, ts: float, max_steps: int, *, resumed: bool) -> None:
        self.open_attempt = None
        self.sessions.append(Sitting(seq=seq, start=ts, resumed=resumed, max_steps=max_steps))


def project(events: Iterable[Event]) -> Timeline:
    """The timeline of a run's events, in log order (a log cut anywhere still projects)."""
    fold = _Fold()
    for event in events:
        fold.feed(event)
    return _freeze(fold)


class TimelineBuilder:
    """`project`, one event at a time (for a caller that reads the log for other uses too)."""

    def __init__(self) -> None:
        self._fold = _Fold()

    def __call__(self, event: Event) -> None:
        self._fold.feed(event)

    def timeline(self) -> Timeline:
        return _freeze(self._fold)


def _freeze(fold: _Fold) -> Timeline:
    started = fold.started
    settings = started.settings if started else None
    model = settings.model if settings else "?"
    steps = tuple(_freeze_step(step) for step in fold.steps)
    last = fold.sessions[-1] if fold.sessions else None
    status = last.status if last is not None and last.status is not None else "running"
    return Timeline(
        run_id=started.run_id if started else "?",
        goal=started.goal if started else "",
        model=model,
        system=settings.system if settings else "",
        start=fold.first_ts if fold.first_ts is not None else 0.0,
        end=fold.last_ts,
        tool_names=tuple(str(t.get("name", "?")) for t in settings.tools) if settings else (),
        approval_mode=settings.approval if settings else "ask",
        sessions=tuple(fold.sessions),
        steps=steps,
        usage=fold.usage,
        status=status,
        error=last.error if last is not None else None,
        events=fold.events,
        marks=tuple(fold.marks),
    )


def _freeze_step(step: _Step) -> Step:
    attempts = tuple(_freeze_attempt(a) for a in step.attempts)
    lanes = _lanes(step.tools)
    tools = tuple(
        ToolRun(
            id=t.id,
            name=t.name,
            input=t.input,
            start=t.start,
            end=t.end,
            duration=t.duration,
            result=t.result,
            approval=t.approval,
            lane=lane,
            child=t.child,
        )
        for t, lane in zip(step.tools, lanes, strict=True)
    )
    return Step(number=step.number, attempts=attempts, content=step.content, tools=tools)


def _freeze_attempt(a: _Attempt) -> Attempt:
    failed = a.failed
    return Attempt(
        seq=a.seq,
        step=a.step,
        attempt=a.attempt,
        start=a.start,
        end=a.end,
        outcome=a.outcome,
        first_token=a.first_token,
        deltas=a.deltas,
        usage=a.usage,
        cost=a.cost,
        stop_reason=a.stop_reason,
        request_id=a.request_id if failed is None else failed.request_id,
        error_type=failed.error_type if failed else None,
        message=failed.message if failed else None,
        status_code=failed.status_code if failed else None,
        will_retry=failed.will_retry if failed else False,
        retry_in=failed.retry_in if failed else 0.0,
    )


def _lanes(tools: list[_Tool]) -> list[int]:
    """Lane per call: calls whose run times overlap never share one. Interval partitioning
    (by start, reusing the lane that freed first): as few lanes as the overlap needs, in
    O(n log n) however many calls a turn holds."""
    lanes = [0] * len(tools)
    free: list[tuple[float, int]] = []  # (when the lane's last call ended, lane)
    count = 0
    order = sorted(
        (i for i, t in enumerate(tools) if t.start is not None),
        key=lambda i: (tools[i].start or 0.0, i),
    )
    for i in order:
        start = tools[i].start or 0.0
        finished = tools[i].end
        end = start if finished is None else max(start, finished)
        if free and free[0][0] <= start:
            _, lane = heapq.heappop(free)
        else:
            lane, count = count, count + 1
        lanes[i] = lane
        heapq.heappush(free, (end, lane))
    return lanes
