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

`RecordedApprover` answers for a re-drive what the person answered at the prompt in the
recording, and nothing else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from pathlib import Path

from ruizn.effects.models.provider import ModelReply, ProviderError, ReplayDiverged
from ruizn.effects.person.approval import Answer
from ruizn.effects.runlog.reader import LogError, iter_events
from ruizn.effects.tools.base import BaseTool
from ruizn.events import ContextCompacted, Event, LlmCallFailed, LlmResponse
from ruizn.recording import (
    Divergence,
    Recording,
    RecordingError,
    compare_requests,
    exhausted,
    recording_of,
)
from ruizn.reducers import InvalidTransition
from ruizn.request import MessagesRequest
from ruizn.settings import RunSettings
from ruizn.state import ContentBlock, TextBlock, ToolCall


class Cassette:
    """A model that replays a recorded run (an events.jsonl, or its events)."""

    def __init__(self, path: str | Path | None = None, *, events: Iterable[Event] = ()) -> None:
        where = "the recording" if path is None else str(path)
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
        self.divergence = divergence
        raise ReplayDiverged(divergence)


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
