"""The Observe→Act loop: ask the core what to do, do it, publish what happened.

Every change of state goes through `_emit`: the event is stamped (seq, ts), written to the
log, shown, and only then reduced. So the log is never behind the state, and replaying it
gives exactly the state this loop ended with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import anyio

from ruizn import __version__
from ruizn.decide import CallModel, Finish, Finished, RefuseTools, RunTools, next_action
from ruizn.effects.bus import EventBus, Subscriber
from ruizn.effects.provider import ModelReply, Provider, ProviderError, RetryNotice
from ruizn.effects.tools import ToolRegistry, invoke_tool
from ruizn.effects.writer import EventWriter
from ruizn.events import (
    Event,
    LlmCallFailed,
    LlmCallStarted,
    LlmResponse,
    LlmToken,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from ruizn.reducers import add_tokens, reduce, start
from ruizn.request import build_request
from ruizn.state import ErrorType, ExecutionContext, Status, ToolCall, ToolResult

E = TypeVar("E", bound=Event)


class AgentRunner:
    def __init__(
        self,
        *,
        provider: Provider,
        registry: ToolRegistry,
        writer: EventWriter,
        subscribers: Iterable[Subscriber] = (),
        clock: Callable[[], float],
        timer: Callable[[], float],
        max_attempts: int = 5,
        retry_base_delay: float = 0.5,
        state: ExecutionContext | None = None,
        redact: Callable[[Event], Event] | None = None,  # WIRING(terminal)
    ) -> None:
        self._provider = provider
        # WIRING(terminal): every event passes here before it is logged, shown or reduced.
        self._redact = redact if redact is not None else _unchanged
        self._registry = registry
        self._writer = writer
        # The writer first: a line is on disk before anyone shows or reduces it.
        self._bus = EventBus(writer, *subscribers)
        self._clock = clock
        self._timer = timer
        self._max_attempts = max_attempts
        self._retry_base_delay = retry_base_delay
        self._state = state
        # Tokens written and shown but not yet reduced: they are applied in one update
        # (reducers.add_tokens, equal to reducing them one by one) the moment anything reads
        # the state, so a long answer does not copy the state once per token. The log is
        # never behind the state.
        self._tokens = 0
        self._started_at = timer()

    @property
    def state(self) -> ExecutionContext:
        assert self._state is not None, "begin() or a replayed state first"
        if self._tokens:
            self._state = add_tokens(self._state, self._tokens)
            self._tokens = 0
        return self._state

    def begin(
        self,
        *,
        run_id: str,
        goal: str,
        model: str,
        max_steps: int,
        max_tokens: int,
        system: str,
        workspace: str,
    ) -> None:
        event = RunStarted(
            seq=1,
            ts=self._clock(),
            run_id=run_id,
            goal=goal,
            model=model,
            max_steps=max_steps,
            max_tokens=max_tokens,
            system=system,
            tools=self._registry.tool_schemas(),
            workspace=workspace,
            ruizn_version=__version__,
        )
        self._bus.publish(event)
        self._state = start(event)

    def resume(self, *, max_steps: int, torn_bytes: int = 0) -> None:
        """Continue a replayed run. A tool call the stop interrupted is run again only if
        the tool says that is safe (read-only); otherwise the model is told it was cut off,
        so every tool_use is answered and the next request is valid."""
        interrupted = [
            call for call in self.state.pending_tool_calls if call.id in self.state.tools_in_flight
        ]
        self._emit(RunResumed, max_steps=max_steps, torn_bytes=torn_bytes)
        for call in interrupted:
            tool = self._registry.get(call.name)
            if tool is not None and tool.read_only:
                continue
            result = ToolResult.error(
                ErrorType.INTERRUPTED,
                f"{call.name} was interrupted when the run stopped and was not run again:"
                " it may or may not have taken effect",
            )
            self._emit(ToolCallFinished, id=call.id, result=result)

    def notify_retry(self, notice: RetryNotice) -> None:
        """The SDK is retrying a request that failed before its stream began."""
        self._emit(
            LlmCallFailed,
            error_type=f"http_{notice.status_code}" if notice.status_code else "connection_error",
            message=notice.reason,
            attempt=notice.attempt - 1,
            will_retry=True,
            status_code=notice.status_code,
            request_id=notice.request_id,
        )

    async def drive(self) -> ExecutionContext:
        """Run until the core says finish. Always ends the log with RunFinished."""
        self._started_at = self._timer()
        try:
            await self._loop()
        except anyio.get_cancelled_exc_class():
            self._finish(Status.CANCELLED, None)
            self._writer.close()
            raise
        except KeyboardInterrupt:
            self._finish(Status.CANCELLED, None)
            self._writer.close()
            raise
        except _RunFailed as failed:
            self._finish(Status.ERROR, failed.message)
        except Exception as exc:  # a bug in ruizn or a tool: end the run, keep the log whole
            self._finish(Status.ERROR, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            self._writer.close()
        return self.state

    async def _loop(self) -> None:
        while True:
            match next_action(self.state):
                case CallModel(step=step):
                    await self._call_model(step)
                case RunTools(calls=calls):
                    for call in calls:
                        await self._run_tool(call)
                case RefuseTools(calls=calls, reason=reason):
                    for call in calls:
                        refusal = ToolResult.error(ErrorType.INVALID_INPUT, reason)
                        self._emit(ToolCallFinished, id=call.id, result=refusal)
                case Finish(status=status, error=error):
                    self._finish(status, error)
                    return
                case Finished():
                    return

    async def _call_model(self, step: int) -> None:
        request = build_request(self.state)
        attempt = 1
        while True:
            self._emit(LlmCallStarted, step=step, attempt=attempt)
            try:
                reply = await self._stream(request)
            except ProviderError as exc:
                will_retry = exc.retryable and attempt < self._max_attempts
                delay = self._retry_base_delay * 2 ** (attempt - 1) if will_retry else 0.0
                self._emit(
                    LlmCallFailed,
                    error_type=exc.error_type,
                    message=exc.message,
                    attempt=attempt,
                    will_retry=will_retry,
                    retry_in=delay,
                    status_code=exc.status_code,
                    request_id=exc.request_id,
                )
                if not will_retry:
                    raise _RunFailed(_with_attempts(exc.message, attempt)) from None
                await anyio.sleep(delay)
                attempt += 1
                continue
            self._emit(
                LlmResponse,
                content=reply.content,
                stop_reason=reply.stop_reason,
                usage=reply.usage,
                request_id=reply.request_id,
            )
            return

    async def _stream(self, request: dict[str, Any]) -> ModelReply:
        reply: ModelReply | None = None
        publish, clock = self._bus.publish, self._clock
        async for item in self._provider.stream(request):
            if isinstance(item, str):
                assert self._state is not None
                seq = self._state.last_seq + self._tokens + 1
                publish(self._redact(LlmToken(seq=seq, ts=clock(), text=item)))  # WIRING(terminal)
                self._tokens += 1
            else:
                reply = item
        if reply is None:
            raise ProviderError("the model stream ended without a message", error_type="api_error")
        return reply

    async def _run_tool(self, call: ToolCall) -> None:
        # One at a time, in the order the model asked: the transcript and the log then read
        # in a fixed order, and a tool never races another over the workspace.
        self._emit(ToolCallStarted, id=call.id, name=call.name, input=call.input)
        began = self._timer()
        result = await invoke_tool(self._registry, call)
        self._emit(ToolCallFinished, id=call.id, result=result, duration=self._timer() - began)

    def _finish(self, status: Status, error: str | None) -> None:
        if self._state is None or self._state.status is not Status.RUNNING:
            return
        self._emit(
            RunFinished,
            status=status,
            steps=self.state.step,
            elapsed=round(self._timer() - self._started_at, 3),
            error=error,
            usage=self.state.usage,
        )

    def _emit(self, cls: type[E], **fields: Any) -> None:
        state = self.state
        event = self._redact(
            cls(seq=state.last_seq + 1, ts=self._clock(), **fields)
        )  # WIRING(terminal)
        self._bus.publish(event)
        self._state = reduce(state, event)


def _unchanged(event: Event) -> Event:  # WIRING(terminal)
    return event


class _RunFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _with_attempts(message: str, attempts: int) -> str:
    return message if attempts == 1 else f"{message} (after {attempts} attempts)"
