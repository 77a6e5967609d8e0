"""A recorded run as a model: `ruizn.Cassette(path)`.

    cassette = ruizn.Cassette("tests/runs/readme/events.jsonl")
    agent = ruizn.Agent(model=cassette, tools=[my_tool], workspace=tmp_path)
    result = agent.run(cassette.goal)  # raises ruizn.ReplayDiverged where the run leaves it

The cassette serves the recording's model calls in order, each attempt as it happened (its
streamed text, then its reply, or its failure, so retries happen again as they did). Before
serving one it compares the request it was sent (the system prompt, the tools, the messages)
with the one the recording's state sent (`ruizn.recording`): the first that differs raises
`ReplayDiverged`, naming the recording's seq and, when a tool's result changed, the call and
the tool. No network, no key. The tools are the caller's, run for real.

A recording whose run started subagents holds only the parent's conversation: each child
(`subagent_started` names its run) is served by a cassette of the child's own log, found
beside the parent's, with the child's approvals and hooks (`Cassette.recorded_child`, which
`ruizn.Agent` asks when it builds a child). A child's divergence names the child.

`RecordedApprover` answers for a re-drive what the person answered at the prompt in the
recording, and nothing else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

from attrs import evolve

from ruizn.cassette.hooks import RecordedHooks
from ruizn.effects.hooks.command import HookExecutor
from ruizn.effects.models.provider import ModelReply, ProviderError, ReplayDiverged
from ruizn.effects.person.approval import Answer
from ruizn.effects.runlog.reader import LogError, iter_events
from ruizn.effects.tools.base import BaseTool
from ruizn.events import ContextCompacted, Event, LlmCallFailed, LlmResponse
from ruizn.recording import (
    Divergence,
    Recording,
    RecordingError,
    SessionEnd,
    compare_requests,
    exhausted,
    recording_of,
)
from ruizn.reducers import InvalidTransition
from ruizn.request import MessagesRequest
from ruizn.settings import RunSettings
from ruizn.state import ContentBlock, TextBlock, ToolCall

__all__ = ["Absent", "Cassette", "RecordedApprover", "beside"]

_SEP = " \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} "  # a child's run after its parent's


def beside(log: Path) -> Callable[[str], Path]:
    """Where the runs of a store hold the log of run `run_id`: beside `log`'s run folder."""
    return lambda run_id: log.parent.parent / run_id / "events.jsonl"


class Cassette:
    """A model that replays a recorded run (an events.jsonl, or its events).

    `logs`: where a child run's log is, by its run id (default: beside `path`); `child`: the
    recorded child run this one is (for its divergences), None for the run re-driven;
    `answers`: a child's calls are answered as the person answered them at the prompt in its
    recording (a rerun's, once the recording is trusted), else put to the parent's approver."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        events: Iterable[Event] = (),
        logs: Callable[[str], Path] | None = None,
        child: str | None = None,
        answers: bool = False,
    ) -> None:
        where = "the recording" if path is None else str(path)
        self._logs = logs if logs is not None or path is None else beside(Path(path))
        self._child = child
        self._answers = answers
        self._children: list[Cassette] = []
        self._stops_given: set[int] = set()  # the recording's stops a re-drive resumed past
        # By `agent` call: the child's replay, the same again when the call goes on (a resume).
        self._by_call: dict[
            str, tuple[Cassette | Absent, RecordedApprover | None, RecordedHooks]
        ] = {}
        try:
            source = iter_events(Path(path)) if path is not None else iter(events)
            self.recording: Recording = recording_of(source)
        except InvalidTransition as exc:
            raise LogError(f"{where}: {exc}") from None
        except OSError as exc:
            raise LogError(f"{where}: {exc.strerror or exc}") from None
        if not self.recording.replies:
            raise RecordingError(
                f"run {self.recording.first.run_id} has no model reply to serve:"
                " nothing to re-drive"
            )
        self._next = 0
        self._responses = 0
        self.divergence: Divergence | None = None

    @property
    def goal(self) -> str:
        """The recorded run's goal."""
        return self.recording.first.goal

    @property
    def settings(self) -> RunSettings:
        """The recorded run's settings, as it started."""
        return self.recording.first.settings

    @property
    def model_id(self) -> str:
        """The model the recording talked to (what a run on this cassette records)."""
        return self.recording.first.settings.model

    @property
    def served(self) -> int:
        """The recorded attempts served so far."""
        return self._next

    @property
    def served_in_tree(self) -> int:
        """The recorded attempts served so far, by this cassette and its children's."""
        return self._next + sum(child.served_in_tree for child in self._children)

    def recorded_child(
        self, call_id: str, agent: str
    ) -> tuple[Cassette | Absent, RecordedApprover | None, HookExecutor]:
        """For the `agent` call `call_id` of the re-drive: the model, approver (None: the
        parent's) and hooks of the child run the recording started for it (its own log).
        When there is none, a model whose first request diverges, saying why."""
        if call_id not in self._by_call:
            self._by_call[call_id] = self._replay_of(call_id, agent)
        return self._by_call[call_id]

    def child_stop(self, call_id: str, awaiting: frozenset[str]) -> SessionEnd | None:
        """The recorded stop of the child re-driven for `call_id` that waited on the calls
        `awaiting` and was resumed with decisions (a parent's `resume --approve`), once
        each; None: the recording holds none."""
        replay = self._by_call.get(call_id)
        child = None if replay is None else replay[0]
        if not isinstance(child, Cassette):
            return None
        for index, stop in enumerate(child.recording.stops):
            waited = frozenset(call.id for call in stop.state.awaiting_approval)
            if index not in child._stops_given and stop.resumed is not None and waited == awaiting:
                child._stops_given.add(index)
                return stop
        return None

    def _replay_of(
        self, call_id: str, agent: str
    ) -> tuple[Cassette | Absent, RecordedApprover | None, RecordedHooks]:
        recorded = next((c for c in self.recording.final.children if c.id == call_id), None)
        problem = f"the recording started no agent for call {call_id}"
        if recorded is not None and self._logs is None:
            problem = (
                f"the recording's agent for call {call_id} has a log of its own, and this"
                " cassette was given no way to find it (give the recording's path)"
            )
        elif recorded is not None and self._logs is not None:
            name = f"agent {recorded.agent} (run {recorded.run_id})"
            name = name if self._child is None else f"{self._child}{_SEP}{name}"
            path = self._logs(recorded.run_id)
            try:
                child = Cassette(path, logs=self._logs, child=name, answers=self._answers)
            except (LogError, RecordingError) as exc:
                problem = f"the log of its {name} cannot be re-driven: {exc}"
            else:
                self._children.append(child)
                hooks = RecordedHooks(iter_events(path))
                answers = RecordedApprover(child.recording) if self._answers else None
                return child, answers, hooks
        absent = Divergence(
            seq=self.recording.final.last_seq,
            what=problem,
            recorded="(no child run)",
            now=f"agent {agent}, call {call_id}",
            call_id=call_id,
            tool="agent",
            child=self._child,
        )
        return Absent(absent), None, RecordedHooks(())

    async def aclose(self) -> None:
        """Nothing to release; the place in the recording is kept (a re-drive that resumes
        its run goes on with the same cassette)."""

    async def stream(self, request: MessagesRequest) -> AsyncIterator[str | ModelReply]:
        if self.divergence is not None:  # once left, a recording serves nothing more
            raise ReplayDiverged(self.divergence)
        exchanges = self.recording.exchanges
        if self._next >= len(exchanges):
            self._diverge(exhausted(self.recording, self._responses + 1, request))
        exchange = exchanges[self._next]
        difference = compare_requests(self.recording, exchange, request)
        if difference is not None:
            self._diverge(difference)
        self._next += 1
        for token in exchange.tokens:
            yield token
        reply = exchange.reply
        if isinstance(reply, LlmCallFailed):
            raise ProviderError(
                reply.message,
                error_type=reply.error_type,
                retryable=reply.will_retry,
                status_code=reply.status_code,
                request_id=reply.request_id,
                retry_after=reply.retry_after,
            )
        if isinstance(reply, ContextCompacted):
            yield _compaction_reply(reply)
            return
        assert isinstance(reply, LlmResponse)
        self._responses += 1
        yield ModelReply(
            content=reply.content,
            stop_reason=reply.stop_reason,
            usage=reply.usage,
            request_id=reply.request_id,
        )

    def _diverge(self, divergence: Divergence) -> None:
        self.divergence = evolve(divergence, child=self._child)
        raise ReplayDiverged(self.divergence)


class Absent:
    """The model of a child the recording does not hold: its first request diverges."""

    def __init__(self, divergence: Divergence) -> None:
        self.divergence = divergence

    async def stream(self, request: MessagesRequest) -> AsyncIterator[str | ModelReply]:
        raise ReplayDiverged(self.divergence)
        yield ""  # pragma: no cover (a generator, as the Provider protocol's stream is)

    async def aclose(self) -> None:
        """Nothing to release."""


def _compaction_reply(recorded: ContextCompacted) -> ModelReply:
    """The reply a recorded compaction came from: the API's block, or ruizn's summary text."""
    block = recorded.block
    if recorded.source == "server":
        content: tuple[ContentBlock, ...] = (block,)
        stop = "compaction"
    else:
        content, stop = (TextBlock(text=block.content or ""),), "end_turn"
    return ModelReply(
        content=content, stop_reason=stop, usage=recorded.usage, request_id=recorded.request_id
    )


class RecordedApprover:
    """For a re-drive: the answer the person gave at the prompt for this call in the
    recording; None for any other (the re-drive then stops awaiting_approval where the
    recording did, and a resume gives the decisions the recording's resume gave)."""

    def __init__(self, recording: Recording) -> None:
        self._recording = recording

    async def __call__(self, call: ToolCall, tool: BaseTool | None) -> Answer | None:
        decided = self._recording.prompted.get(call.id)
        if decided is None:
            return None
        return Answer(approved=decided.approved, reason=decided.reason, always=decided.always)
