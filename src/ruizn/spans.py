"""A run as OpenTelemetry spans (the GenAI semantic conventions), projected from its events.

One `invoke_agent ruizn` span per session of the run (run_started or run_resumed to
run_finished; a resumed session is a child of the first), one `chat {model}` span per model
call attempt, one `execute_tool {name}` span per tool call. A subagent's run (its
run_started names its parent, kind "agent") is in its parent's trace: its first session is
an `invoke_agent {agent}` span (gen_ai.agent.name the agent's, gen_ai.agent.id its run id)
under the parent's `execute_tool agent` span of the call that started it, whose id is made
from the parent's subagent_started, so each log alone gives its spans and they nest.
Times are the log's; ids are derived from the run id and the seq of the event that opened
the span, so the same log always gives the same trace, and a span, once its end is in the
log, never changes as the log grows (a live export and a later `ruizn export` send the
same spans).

Pure: no clock, no I/O, no OpenTelemetry import. `ruizn.effects.telemetry.otlp` turns these
records into the SDK's spans and sends them. No message content is exported (goal, texts, tool
inputs and results stay in the log): only names, ids, times, token counts and errors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Literal

from attrs import define, field, frozen

from ruizn.events import (
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
from ruizn.state import ToolUseBlock, Usage

__all__ = ["Span", "SpanBuilder", "project_spans", "span_id", "trace_id"]

AttributeValue = str | bool | int | float | tuple[str, ...]
Kind = Literal["internal", "client"]

PROVIDER = "anthropic"
AGENT = "ruizn"
# Runs that ended in these statuses failed; max_steps and awaiting_approval stopped as asked.
_FAILED = frozenset({"error", "cancelled"})


@frozen(kw_only=True)
class Span:
    trace_id: int  # 128 bits
    span_id: int  # 64 bits
    parent_id: int | None
    name: str
    kind: Kind
    start_ns: int
    end_ns: int
    attributes: tuple[tuple[str, AttributeValue], ...]
    error: str | None = None  # the status description when the span failed

    @property
    def attrs(self) -> dict[str, AttributeValue]:
        return dict(self.attributes)


def trace_id(run_id: str) -> int:
    """The run's trace id: the same for every export of the run, never 0."""
    digest = hashlib.sha256(b"ruizn trace\0" + run_id.encode("utf-8", "replace")).digest()
    return int.from_bytes(digest[:16], "big") or 1


def span_id(run_id: str, seq: int) -> int:
    """The id of the span opened by event `seq` of the run, never 0."""
    key = f"{run_id}\0{seq}".encode("utf-8", "replace")
    digest = hashlib.sha256(b"ruizn span\0" + key).digest()
    return int.from_bytes(digest[:8], "big") or 1


def _ns(ts: float) -> int:
    return round(ts * 1e9)


@define
class _Open:
    """A span begun and not yet ended."""

    span_id: int
    parent_id: int | None
    name: str
    kind: Kind
    start: float
    attributes: dict[str, AttributeValue]
    usage: Usage = field(factory=Usage)  # a session's: the sum of its calls'


@define
class SpanBuilder:
    """Feed it a run's events in log order; each `feed` returns the spans that event ended.

    Mutable on purpose: a live export feeds one event at a time and must pay O(1) for it.
    `close` ends what the log left open, at the last event's time, marked incomplete.
    """

    run_id: str = ""
    model: str = "?"
    max_tokens: int = 0
    # 0: the run's own, or for a subagent its tree's top run's (its Parent's `root`, or the
    # parent itself; a log written before `root` was recorded names only its parent: the
    # caller gives the top run's then).
    trace: int = field(default=0)
    root: int | None = None
    session: _Open | None = None
    call: _Open | None = None
    tools: dict[str, _Open] = field(factory=dict)
    names: dict[str, str] = field(factory=dict)  # tool_use id -> tool name
    approvals: dict[str, dict[str, AttributeValue]] = field(factory=dict)
    requested: dict[str, float] = field(factory=dict)
    last_ts: float = 0.0

    def feed(self, event: Event) -> tuple[Span, ...]:
        if type(event) is LlmToken:
            self.saw(event.ts)
            return ()
        ended: list[Span] = []
        match event:
            case RunStarted():
                ended += self._end_session_cut()
                parent = event.parent if event.parent and event.parent.kind == "agent" else None
                if self.root is None:  # a second run_started (a planted log) keeps the trace
                    self.run_id = event.run_id
                    if parent is not None:  # under the parent's call that started it
                        self.trace = self.trace or trace_id(parent.root or parent.run_id)
                        self.root = span_id(parent.run_id, parent.seq)
                    self.trace = self.trace or trace_id(event.run_id)
                self.model = event.settings.model
                self.max_tokens = event.settings.max_tokens
                self._open_session(event.seq, event.ts, resumed=False)
                if parent is not None and self.session is not None:
                    self.session.name = f"invoke_agent {parent.agent or AGENT}"
                    self.session.attributes["gen_ai.agent.name"] = parent.agent or AGENT
                    self.session.attributes["gen_ai.agent.id"] = event.run_id
                    self.session.attributes["ruizn.parent.run_id"] = parent.run_id
                    self.root = self.session.span_id
            case RunResumed():
                ended += self._end_session_cut()
                if event.max_tokens is not None:
                    self.max_tokens = event.max_tokens
                self._open_session(event.seq, event.ts, resumed=True)
            case LlmCallStarted():
                ended += self._end_call_cut()
                self.call = _Open(
                    span_id=self._id(event.seq),
                    parent_id=self._parent(),
                    name=f"chat {self.model}",
                    kind="client",
                    start=event.ts,
                    attributes={
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": PROVIDER,
                        "gen_ai.request.model": self.model,
                        "gen_ai.request.max_tokens": self.max_tokens,
                        "gen_ai.conversation.id": self.run_id,
                        "ruizn.step": event.step,
                        "ruizn.attempt": event.attempt,
                        **({"ruizn.compaction": event.compaction} if event.compaction else {}),
                    },
                )
            case ContextCompacted():
                # The compaction call's end: its own usage (the API's compaction iterations).
                call = self._call_for(event.seq, event.ts)
                call.attributes.update(_usage_attributes(event.usage))
                call.attributes["ruizn.compaction.source"] = event.source
                call.attributes["ruizn.compaction.tokens_before"] = event.tokens_before
                call.attributes["ruizn.compaction.tokens_after"] = event.tokens_after
                if self.session is not None:
                    self.session.usage = self.session.usage + event.usage
                ended.append(self._end(call, event.ts))
                self.call = None
            case LlmResponse():
                for block in event.content:
                    if isinstance(block, ToolUseBlock):
                        self.names[block.id] = block.name
                call = self._call_for(event.seq, event.ts)
                usage = event.usage
                call.attributes.update(_usage_attributes(usage))
                call.attributes["gen_ai.response.finish_reasons"] = (
                    (event.stop_reason,) if event.stop_reason else ()
                )
                if event.request_id:
                    call.attributes["ruizn.request_id"] = event.request_id
                if self.session is not None:
                    self.session.usage = self.session.usage + usage
                ended.append(self._end(call, event.ts))
                self.call = None
            case LlmCallFailed():
                call = self._call_for(event.seq, event.ts)
                call.attributes["error.type"] = event.error_type
                call.attributes["ruizn.will_retry"] = event.will_retry
                if event.status_code is not None:
                    call.attributes["http.response.status_code"] = event.status_code
                if event.request_id:
                    call.attributes["ruizn.request_id"] = event.request_id
                ended.append(self._end(call, event.ts, error=event.message))
                self.call = None
            case ToolApprovalRequested():
                self.names.setdefault(event.id, event.name)
                self.requested[event.id] = event.ts
            case ToolApprovalDecided():
                approval: dict[str, AttributeValue] = {
                    "ruizn.approval.approved": event.approved,
                    "ruizn.approval.by": event.by,
                }
                if event.id in self.requested:
                    wait = max(0.0, event.ts - self.requested[event.id])
                    approval["ruizn.approval.wait_seconds"] = wait
                self.approvals[event.id] = approval
            case ToolCallStarted():
                self.names[event.id] = event.name
                opened = self._open_tool(event.seq, event.id, event.ts)
                before = self.tools.get(event.id)
                if before is not None and "ruizn.subagent.run_id" in before.attributes:
                    # An `agent` call run again after a crash resumes its child: one span.
                    opened.span_id, opened.start = before.span_id, before.start
                    opened.attributes.update(_subagent(before.attributes))
                self.tools[event.id] = opened
            case SubagentStarted():
                # The child's spans hang from this call's span, by an id the child's log
                # can name (its run_started holds this event's seq); the span is sent only
                # when the call ends, so the new id is the only one it ever has.
                running = self.tools.get(event.id)
                if running is not None:
                    running.span_id = self._id(event.seq)
                    running.attributes["ruizn.subagent.name"] = event.agent
                    running.attributes["ruizn.subagent.run_id"] = event.run_id
            case SubagentFinished():
                running = self.tools.get(event.id)
                if running is not None:
                    running.attributes["ruizn.subagent.status"] = str(event.status)
            case ToolCallFinished():
                tool = self.tools.pop(event.id, None)
                if tool is None:  # answered without running (denied, refused, interrupted)
                    tool = self._open_tool(event.seq, event.id, event.ts)
                tool.attributes.update(self.approvals.pop(event.id, {}))
                self.requested.pop(event.id, None)
                error = None
                if event.result.is_error:
                    tool.attributes["error.type"] = event.result.error_type or "tool_error"
                    error = f"{tool.attributes['gen_ai.tool.name']} failed"
                ended.append(self._end(tool, event.ts, error=error))
            case RunFinished():
                ended += self._end_call_cut()
                session = self.session
                if session is not None:
                    status = str(event.status)
                    session.attributes["ruizn.run.status"] = status
                    session.attributes["ruizn.run.steps"] = event.steps
                    error = None
                    if status != "success":
                        session.attributes["error.type"] = status
                    if status in _FAILED:
                        error = event.error or status
                    ended.append(self._end_session(event.ts, error=error))
        self.last_ts = max(self.last_ts, event.ts)
        return tuple(ended)

    def saw(self, ts: float) -> None:
        """The log reached `ts` (a token the caller did not feed: it ends no span, but a
        span the log leaves open is cut at the last event's time)."""
        self.last_ts = max(self.last_ts, ts)

    def close(self) -> tuple[Span, ...]:
        """End every span the log left open (a run still going, or one that was killed)."""
        ended = [self._cut(tool) for tool in self.tools.values()]
        self.tools.clear()
        return (*ended, *self._end_session_cut())

    # -- helpers ---------------------------------------------------------------------------

    def _id(self, seq: int) -> int:
        return span_id(self.run_id, seq)

    def _parent(self) -> int | None:
        return self.session.span_id if self.session is not None else self.root

    def _open_session(self, seq: int, ts: float, *, resumed: bool) -> None:
        self.session = _Open(
            span_id=self._id(seq),
            parent_id=self.root,
            name=f"invoke_agent {AGENT}",
            kind="internal",
            start=ts,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.provider.name": PROVIDER,
                "gen_ai.agent.name": AGENT,
                "gen_ai.request.model": self.model,
                "gen_ai.conversation.id": self.run_id,
                "ruizn.run.id": self.run_id,
                "ruizn.resumed": resumed,
            },
        )
        if self.root is None:
            self.root = self.session.span_id

    def _open_tool(self, seq: int, call_id: str, ts: float) -> _Open:
        name = self.names.get(call_id, "?")
        return _Open(
            span_id=self._id(seq),
            parent_id=self._parent(),
            name=f"execute_tool {name}",
            kind="internal",
            start=ts,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id,
                "gen_ai.tool.type": "function",
            },
        )

    def _call_for(self, seq: int, ts: float) -> _Open:
        """The call a response or failure ends; one with no call started gets a span of its
        own, of zero length, so nothing in the log goes unexported."""
        if self.call is not None:
            return self.call
        return _Open(
            span_id=self._id(seq),
            parent_id=self._parent(),
            name=f"chat {self.model}",
            kind="client",
            start=ts,
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": PROVIDER,
                "gen_ai.request.model": self.model,
            },
        )

    def _end(self, span: _Open, ts: float, *, error: str | None = None) -> Span:
        return Span(
            trace_id=self.trace or trace_id(self.run_id),
            span_id=span.span_id,
            parent_id=span.parent_id,
            name=span.name,
            kind=span.kind,
            start_ns=_ns(span.start),
            end_ns=_ns(max(ts, span.start)),
            attributes=tuple(span.attributes.items()),
            error=error,
        )

    def _cut(self, span: _Open) -> Span:
        span.attributes["ruizn.incomplete"] = True
        span.attributes.setdefault("error.type", "interrupted")
        return self._end(span, self.last_ts, error="the log ends before this span does")

    def _end_call_cut(self) -> list[Span]:
        call, self.call = self.call, None
        return [] if call is None else [self._cut(call)]

    def _end_session(self, ts: float, *, error: str | None) -> Span:
        session = self.session
        assert session is not None
        session.attributes.update(_usage_attributes(session.usage))
        self.session = None
        return self._end(session, ts, error=error)

    def _end_session_cut(self) -> list[Span]:
        ended = self._end_call_cut()
        if self.session is not None:
            session = self.session
            session.attributes.update(_usage_attributes(session.usage))
            self.session = None
            ended.append(self._cut(session))
        return ended


def _subagent(attributes: dict[str, AttributeValue]) -> dict[str, AttributeValue]:
    return {k: v for k, v in attributes.items() if k.startswith("ruizn.subagent.")}


def _usage_attributes(usage: Usage) -> dict[str, AttributeValue]:
    # Anthropic counts cached prompt tokens apart from input_tokens; the GenAI conventions
    # want input_tokens to hold every prompt token, cached or not, with the cache parts
    # beside it.
    return {
        "gen_ai.usage.input_tokens": usage.total_input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
    }


def project_spans(events: Iterable[Event]) -> tuple[Span, ...]:
    """Every span of a run's log, in the order they end (open ones last, cut at the end)."""
    builder = SpanBuilder()
    spans: list[Span] = []
    for event in events:
        spans.extend(builder.feed(event))
    spans.extend(builder.close())
    return tuple(spans)
