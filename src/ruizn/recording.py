"""A recorded run as a recording: what its model was asked and answered, and where each of its
sessions stopped and how the next went on. Pure: built by folding the recording's events.

The log holds states, not requests: the request of each recorded model call is rebuilt with
`request.plan_request` from the state the recording was in just before that call (the runner
builds it the same way, once per step). A re-drive (`ruizn rerun`, `ruizn.Cassette`) sends its
own requests; `compare_requests` says where one first differs from the recorded one, naming
the recording's seq, and the call id and the tool when a tool's result is what changed.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from attrs import evolve, frozen

from ruizn.compaction import compaction_request, instructions_of
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
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallFinished,
    UserMessage,
)
from ruizn.reducers import reduce, start
from ruizn.request import MessagesRequest, message_json, plan_request
from ruizn.state import ExecutionContext, Message, ToolUseBlock


class RecordingError(ValueError):
    """A recording that cannot be re-driven (it holds no model reply); one line."""


@frozen(kw_only=True)
class Exchange:
    """One recorded attempt of a model call: what was asked, what streamed, how it ended."""

    seq: int  # the recording's llm_call_started
    step: int
    attempt: int
    request: MessagesRequest
    tokens: tuple[str, ...]
    # A compaction call ends with context_compacted (ruizn.compaction).
    reply: LlmResponse | LlmCallFailed | ContextCompacted


@frozen(kw_only=True)
class SessionEnd:
    """Where a recorded session ended, and how the next one (if any) went on."""

    finished: RunFinished | None  # None: the session stopped without one (a crash)
    state: ExecutionContext  # the recording's state there
    resumed: RunResumed | None  # the next session's first line; None: the recording ends
    decisions: tuple[ToolApprovalDecided, ...] = ()  # given with that resume (--approve...)
    message: str | None = None  # given with that resume (`ruizn continue`)

    @property
    def seq(self) -> int:
        return self.state.last_seq


@frozen(kw_only=True)
class Recording:
    first: RunStarted
    exchanges: tuple[Exchange, ...]
    stops: tuple[SessionEnd, ...]  # one per session, in order; the last one ends the recording
    prompted: Mapping[str, ToolApprovalDecided]  # a person's answers at the prompt, by call
    # tool_use id -> the seqs of its tool_call_finished (ids may repeat in a long run)
    finished_calls: Mapping[str, tuple[int, ...]]
    final: ExecutionContext

    @property
    def replies(self) -> int:
        return sum(isinstance(e.reply, LlmResponse) for e in self.exchanges)


def recording_of(events: Iterable[Event]) -> Recording:
    """The recording of a recording (its events in order, from run_started on)."""
    iterator = iter(events)
    first = next(iterator, None)
    if not isinstance(first, RunStarted):
        raise RecordingError("the recording does not begin with run_started")
    state = start(first)
    exchanges: list[Exchange] = []
    stops: list[SessionEnd] = []
    prompted: dict[str, ToolApprovalDecided] = {}
    finished_calls: dict[str, tuple[int, ...]] = {}
    call: tuple[LlmCallStarted, ExecutionContext] | None = None
    tokens: list[str] = []
    finished: RunFinished | None = None
    preamble = False  # right after a run_resumed: what the person gave with the resume
    for event in iterator:
        before = state
        state = reduce(before, event)
        match event:
            case LlmCallStarted():
                call, tokens = (event, before), []
            case LlmToken(text=text):
                tokens.append(text)
            case LlmResponse() | LlmCallFailed() | ContextCompacted():
                assert call is not None  # the reducer takes these only after a call started
                started, asked = call
                request = _request_of(started, asked, event)
                exchanges.append(
                    Exchange(
                        seq=started.seq,
                        step=started.step,
                        attempt=started.attempt,
                        request=request,
                        tokens=tuple(tokens),
                        reply=event,
                    )
                )
                call = None
            case RunFinished():
                finished = event
            case RunResumed():
                call = None  # a call a stop cut off has no reply to serve
                stops.append(SessionEnd(finished=finished, state=before, resumed=event))
                finished = None
            case ToolApprovalDecided(by="user") if not preamble:
                prompted[event.id] = event
            case ToolApprovalDecided() if preamble:
                last = stops[-1]
                stops[-1] = evolve(last, decisions=(*last.decisions, event))
            case UserMessage(text=text) if preamble:
                stops[-1] = evolve(stops[-1], message=text)
            case ToolCallFinished():
                finished_calls[event.id] = (*finished_calls.get(event.id, ()), event.seq)
        preamble = isinstance(event, RunResumed) or (
            preamble
            and isinstance(event, ToolCallFinished | ToolApprovalRequested | ToolApprovalDecided)
        )
    stops.append(SessionEnd(finished=finished, state=state, resumed=None))
    return Recording(
        first=first,
        exchanges=tuple(exchanges),
        stops=tuple(stops),
        prompted=prompted,
        finished_calls=finished_calls,
        final=state,
    )


def _request_of(
    started: LlmCallStarted,
    before: ExecutionContext,
    reply: LlmResponse | LlmCallFailed | ContextCompacted,
) -> MessagesRequest:
    """The request a recorded call sent: a step's, or a compaction's with the instructions
    it recorded (a failed compaction: the run's own)."""
    if started.compaction is None:
        return plan_request(before)
    if isinstance(reply, ContextCompacted):
        return compaction_request(before, reply.instructions)
    return compaction_request(before, instructions_of(before))


@frozen(kw_only=True)
class Divergence:
    """Where a re-drive first left its recording."""

    seq: int  # the recording's seq where the difference is (a result, a call, a stop)
    what: str  # one line
    recorded: str
    now: str
    call_id: str | None = None
    tool: str | None = None
    # The recorded child run (a subagent) the seq is in, as "agent NAME (run ID)", and its
    # ancestors' before it (an angle quote between); None: the recording itself.
    child: str | None = None

    @property
    def where(self) -> str:
        """The seq, and the child run it is in."""
        return f"seq {self.seq}" if self.child is None else f"seq {self.seq} of {self.child}"

    def lines(self, context: int = 20) -> list[str]:
        """The divergence for people: its line, then a short diff, recorded vs now."""
        head = f"diverged at {self.where}: {self.what}"
        body = list(
            difflib.unified_diff(
                self.recorded.splitlines(), self.now.splitlines(), lineterm="", n=1
            )
        )[2:]
        if not body:  # the same text: the difference is in a flag (is_error, the status...)
            body = [f"-{line}" for line in self.recorded.splitlines()[:3]]
            body += [f"+{line}" for line in self.now.splitlines()[:3]]
        shown = [_clip(line, 160) for line in body[:context]]
        if len(body) > context:
            shown.append(f"  ... ({len(body) - context} more lines)")
        return [head, "--- recorded", "+++ now", *shown]


def compare_requests(
    recording: Recording, exchange: Exchange, now: MessagesRequest
) -> Divergence | None:
    """How the request `now` differs from the recorded one of `exchange` (the system prompt,
    the tools, the messages), or None. A changed tool result is named by its call and tool."""
    where = f"the request of step {exchange.step} (recorded seq {exchange.seq})"
    recorded = exchange.request
    if recorded.system != now.system:
        return Divergence(
            seq=recording.first.seq,
            what=f"the system prompt differs in {where}",
            recorded=recorded.system,
            now=now.system,
        )
    tools = _tools_difference(recording, recorded.tools, now.tools, where)
    if tools is not None:
        return tools
    return _history_difference(recording, recorded.messages, now.messages, exchange.seq, where)


def compare_stop(
    recording: Recording, stop: SessionEnd, state: ExecutionContext
) -> Divergence | None:
    """How a re-driven session's end differs from the recorded one: its status, steps and
    error, its validated output (a run with an output schema), then the history (the last
    turn's results, which no later request shows)."""
    recorded = stop.state
    if (recorded.status, recorded.step, recorded.error) != (state.status, state.step, state.error):
        return Divergence(
            seq=stop.seq,
            what="the run stopped otherwise than the recording",
            recorded=_ending(recorded),
            now=_ending(state),
        )
    if (recorded.output_valid, recorded.output) != (state.output_valid, state.output):
        # A structured answer: the validated output must be the recorded one.
        return Divergence(
            seq=stop.seq,
            what="the validated output differs from the recording's",
            recorded=_output_text(recorded),
            now=_output_text(state),
        )
    return _history_difference(
        recording,
        plan_request(recorded).messages,
        plan_request(state).messages,
        stop.seq,
        f"the history where the session stopped (recorded seq {stop.seq})",
    )


def exhausted(recording: Recording, step: int, now: MessagesRequest) -> Divergence:
    """The re-drive asks for a model call the recording never made."""
    last = now.messages[-1] if now.messages else None
    return Divergence(
        seq=recording.final.last_seq,
        what=f"the recording has no reply left for step {step} (it ends at seq"
        f" {recording.final.last_seq})",
        recorded="(no model call)",
        now="a model call after: " + (_message_text(last) if last is not None else "nothing"),
    )


def _output_text(state: ExecutionContext) -> str:
    if not state.output_valid:
        return "(no valid output)"
    return json.dumps(state.output, indent=1, sort_keys=True, ensure_ascii=False)


def _ending(state: ExecutionContext) -> str:
    text = f"{state.status.value} after {state.step} step" + ("" if state.step == 1 else "s")
    return text + (f": {state.error}" if state.error else "")


def _tools_difference(
    recording: Recording,
    recorded: tuple[dict[str, Any], ...],
    now: tuple[dict[str, Any], ...],
    where: str,
) -> Divergence | None:
    before = {str(t.get("name")): t for t in recorded}
    after = {str(t.get("name")): t for t in now}
    for name in dict.fromkeys([*before, *after]):
        if before.get(name) == after.get(name):
            continue
        if name not in after:
            what = f"the tool {name} is not offered any more in {where}"
        elif name not in before:
            what = f"the tool {name} is offered now, not in the recording, in {where}"
        else:
            what = f"the tool {name} is described otherwise in {where}"
        return Divergence(
            seq=recording.first.seq,
            what=what,
            recorded=_pretty(before.get(name)),
            now=_pretty(after.get(name)),
            tool=name,
        )
    if [t.get("name") for t in recorded] != [t.get("name") for t in now]:
        return Divergence(
            seq=recording.first.seq,
            what=f"the tools are offered in another order in {where}",
            recorded="\n".join(str(t.get("name")) for t in recorded),
            now="\n".join(str(t.get("name")) for t in now),
        )
    return None


def _history_difference(
    recording: Recording,
    recorded: tuple[Message, ...],
    now: tuple[Message, ...],
    seq: int,
    where: str,
) -> Divergence | None:
    for index in range(max(len(recorded), len(now))):
        old = recorded[index] if index < len(recorded) else None
        new = now[index] if index < len(now) else None
        old_json = None if old is None else message_json(old, marked=False)
        new_json = None if new is None else message_json(new, marked=False)
        if old_json == new_json:
            continue
        if old_json is not None and new_json is not None:
            found = _result_difference(
                recording, recorded[:index], old_json, new_json, seen=seq, where=where
            )
            if found is not None:
                return found
        return Divergence(
            seq=seq,
            what=f"message {index + 1} of {where} differs",
            recorded=_pretty(old_json),
            now=_pretty(new_json),
        )
    return None


def _result_difference(
    recording: Recording,
    earlier: tuple[Message, ...],
    old: dict[str, Any],
    new: dict[str, Any],
    *,
    seen: int,
    where: str,
) -> Divergence | None:
    """A tool result that differs, named by its call and tool (found in the turn before) and
    the seq of its tool_call_finished (the last one before `seen`)."""
    pairs = zip(old["content"], new["content"], strict=False)
    for before, after in pairs:
        if before == after:
            continue
        if before.get("type") != "tool_result" or after.get("tool_use_id") != before.get(
            "tool_use_id"
        ):
            return None
        call_id = str(before["tool_use_id"])
        tool = _tool_of(earlier, call_id)
        seqs = [seq for seq in recording.finished_calls.get(call_id, ()) if seq < seen]
        return Divergence(
            seq=seqs[-1] if seqs else seen,
            what=f"the result of {call_id} ({tool}) differs, seen in {where}",
            recorded=_result_text(before),
            now=_result_text(after),
            call_id=call_id,
            tool=tool,
        )
    return None


def _tool_of(messages: tuple[Message, ...], call_id: str) -> str:
    for message in reversed(messages):
        for block in message.content:
            if isinstance(block, ToolUseBlock) and block.id == call_id:
                return block.name
    return "?"


def _result_text(block: dict[str, Any]) -> str:
    text = str(block.get("content", ""))
    return f"(error) {text}" if block.get("is_error") else text


def _message_text(message: Message) -> str:
    return json.dumps(message_json(message, marked=False), ensure_ascii=False)[:200]


def _pretty(value: Any) -> str:
    if value is None:
        return "(none)"
    return json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
