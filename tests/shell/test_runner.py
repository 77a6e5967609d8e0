"""The runner's ways out, in-process: cancellation, a lost log, a failing sink, a stream with no
message, a retry that waits, a bug in a provider. Each leaves a log that replays to the state
the runner ended with."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from ruizn.effects.models.function import FunctionModel
from ruizn.effects.models.provider import ModelReply, ProviderError
from ruizn.effects.runlog.sink import LogLost, LogWriteError, MemorySink
from ruizn.effects.tools.base import ToolRegistry
from ruizn.events import Event, LlmCallFailed, RunFinished
from ruizn.reducers import rebuild
from ruizn.settings import RunSettings
from ruizn.shell.runner import AgentRunner
from ruizn.state import Status, TextBlock, Usage


def _runner(model: Any, sink: Any, **config: Any) -> AgentRunner:
    runner = AgentRunner(
        provider=FunctionModel(model),
        registry=ToolRegistry([]),
        sink=sink,
        clock=time.time,
        timer=time.monotonic,
    )
    runner.begin(run_id="r", goal="g", settings=RunSettings(workspace="/w", **config))
    return runner


def test_cancellation_finishes_the_run_cancelled_and_is_not_swallowed() -> None:
    async def slow(request: Any) -> AsyncIterator[str | ModelReply]:
        yield "thinking "
        await anyio.sleep(30)
        yield ModelReply(content=(), stop_reason="end_turn", usage=Usage())

    sink = MemorySink()
    runner = _runner(slow, sink)

    async def go() -> None:
        with anyio.move_on_after(0.2) as scope:
            await runner.drive()
        assert scope.cancelled_caught  # the cancellation went through the runner

    anyio.run(go)
    assert runner.state.status is Status.CANCELLED
    assert rebuild(sink.events) == runner.state
    assert sink.closed
    # The call's input was sent (and billed): its cost is unknown, never $0.00.
    finished = sink.events[-1]
    assert isinstance(finished, RunFinished)
    assert finished.cost is None


class _Losing(MemorySink):
    """A sink whose file vanished: it keeps each line, then says so at a step end."""

    def __call__(self, event: Event) -> None:
        super().__call__(event)
        if event.TAG == "llm_response":
            raise LogLost("the log was deleted", recovery="/w/events.recovered.jsonl")


def test_a_lost_log_finishes_the_run_with_an_error_and_raises() -> None:
    sink = _Losing()
    runner = _runner(lambda request: "hello", sink)
    with pytest.raises(LogLost):
        anyio.run(runner.drive)
    assert runner.lost is not None
    assert isinstance(sink.events[-1], RunFinished)
    assert sink.events[-1].status is Status.ERROR
    assert rebuild(sink.events) == runner.state


def test_a_sink_that_fails_stops_the_run_and_keeps_every_line_before() -> None:
    sink = MemorySink(fail_at=4)
    runner = _runner(lambda request: "a longer answer", sink)
    with pytest.raises(LogWriteError):
        anyio.run(runner.drive)
    assert len(sink.events) == 3
    assert rebuild(sink.events) == runner.state  # the state never got ahead of the log


def test_a_stream_without_a_message_is_an_invalid_response_retried() -> None:
    calls = []

    async def model(request: Any) -> AsyncIterator[str | ModelReply]:
        calls.append(1)
        yield "half"
        if len(calls) > 1:
            yield ModelReply(content=(TextBlock(text="ok"),), stop_reason="end_turn", usage=Usage())

    sink = MemorySink()
    runner = _runner(model, sink, retry_base_delay=0.05)
    began = time.monotonic()
    state = anyio.run(runner.drive)
    assert state.status is Status.SUCCESS
    failed = [e for e in sink.events if isinstance(e, LlmCallFailed)]
    assert [(f.error_type, f.will_retry, f.retry_in) for f in failed] == [
        ("invalid_response", True, 0.05)
    ]
    assert time.monotonic() - began >= 0.05  # the logged wait is the wait made
    assert rebuild(sink.events) == state


def test_a_server_retry_after_is_the_wait() -> None:
    calls = []

    def model(request: Any) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ProviderError(
                "slow down", error_type="rate_limit_error", retryable=True, retry_after=0.1
            )
        return "ok"

    sink = MemorySink()
    state = anyio.run(_runner(model, sink).drive)
    failed = next(e for e in sink.events if isinstance(e, LlmCallFailed))
    assert (failed.retry_after, failed.retry_in, failed.will_retry) == (0.1, 0.1, True)
    assert state.status is Status.SUCCESS


def test_a_bug_in_a_provider_ends_the_run_as_an_internal_error() -> None:
    def broken(request: Any) -> str:
        raise ZeroDivisionError("oops")

    sink = MemorySink()
    state = anyio.run(_runner(broken, sink).drive)
    assert state.status is Status.ERROR
    assert state.error == "internal error: ZeroDivisionError: oops"
    assert rebuild(sink.events) == state
