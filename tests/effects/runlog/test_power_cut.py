"""What a power cut keeps: the real runner writing a real log, with an fdatasync that records
the bytes it made durable (what the disk would hold if the machine went down right then).

The laws (README, *The log is the truth*):
- a step's lines are on disk before the next step's response is kept, so a power cut loses
  at most the last step whose response was kept and the call in flight;
- a tool that is not read-only runs only once its `tool_call_started` is on disk, so a
  resume after a power cut answers it `interrupted` instead of running it twice;
- run_started, run_finished and a person's decision are on disk when the writer returns.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import anyio

from ruizn.effects.models.function import FunctionModel
from ruizn.effects.models.provider import ModelReply
from ruizn.effects.runlog.sink import MemorySink
from ruizn.effects.runlog.writer import EventWriter
from ruizn.effects.tools.base import BaseTool, ToolRegistry
from ruizn.events import (
    Event,
    LlmCallStarted,
    LlmResponse,
    RunFinished,
    RunStarted,
    ToolCallStarted,
)
from ruizn.limits import Limits
from ruizn.reducers import rebuild
from ruizn.resuming import ResumePlan, plan_resume
from ruizn.serde import decode
from ruizn.settings import RunSettings
from ruizn.shell.runner import AgentRunner
from ruizn.state import (
    ExecutionContext,
    JsonObject,
    Status,
    TextBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)


class Disk:
    """An fdatasync that keeps a copy of what it made durable."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._durable = b""
        self.syncs = 0

    def __call__(self, fd: int) -> None:
        size = os.fstat(fd).st_size
        data = os.pread(fd, size, 0)  # everything written before the sync began
        os.fdatasync(fd)
        with self._lock:
            self._durable = data
            self.syncs += 1

    def lines(self) -> list[bytes]:
        with self._lock:
            return self._durable.splitlines(keepends=True)


class Peek(BaseTool):
    name = "peek"
    description = "Reads; safe to run again."
    input_schema: ClassVar[JsonObject] = {"type": "object"}
    read_only = True

    async def invoke(self, input: JsonObject) -> ToolResult | str:
        await anyio.sleep(0.01)  # long enough for a sync behind the loop to finish
        return "seen"


class Poke(BaseTool):
    """Changes the world: it must never run twice. Notes what was on disk as it ran."""

    name = "poke"
    description = "Writes."
    input_schema: ClassVar[JsonObject] = {"type": "object"}

    def __init__(self, disk: Disk) -> None:
        super().__init__()
        self.disk = disk
        self.durable_when_run: list[list[bytes]] = []

    async def invoke(self, input: JsonObject) -> ToolResult | str:
        self.durable_when_run.append(self.disk.lines())
        return "done"


def _script(request: Any) -> ModelReply:
    """Step 1: peek and poke; step 2: poke; step 3: the answer."""
    step = sum(1 for m in request["messages"] if m["role"] == "assistant") + 1
    calls = {1: [("a", "peek"), ("b", "poke")], 2: [("c", "poke")]}.get(step, [])
    if not calls:
        return ModelReply(content=(TextBlock(text="fin"),), stop_reason="end_turn", usage=Usage())
    blocks = tuple(ToolUseBlock(id=f"toolu_{i}", name=n, input={}) for i, n in calls)
    return ModelReply(
        content=(TextBlock(text="on it"), *blocks), stop_reason="tool_use", usage=Usage()
    )


def _run(tmp_path: Path) -> tuple[list[tuple[Event, list[bytes]]], Poke, Path]:
    disk = Disk()
    poke = Poke(disk)
    log = tmp_path / "run" / "events.jsonl"
    seen: list[tuple[Event, list[bytes]]] = []  # each event, with the disk as it was kept
    runner = AgentRunner(
        provider=FunctionModel(_script),
        registry=ToolRegistry([Peek(), poke]),
        sink=EventWriter.new(log, datasync=disk),
        subscribers=[lambda event: seen.append((event, disk.lines()))],
        clock=time.time,
        timer=time.monotonic,
    )
    runner.begin(run_id="r", goal="g", settings=RunSettings(max_steps=5, workspace=str(tmp_path)))
    state = anyio.run(runner.drive)
    assert state.status is Status.SUCCESS
    return seen, poke, log


def _line_of(event: Event, lines: list[bytes]) -> bool:
    return any(decode(line).seq == event.seq for line in lines if line.endswith(b"\n"))


def test_a_step_is_on_disk_before_the_next_response_is_kept(tmp_path: Path) -> None:
    seen, _, _ = _run(tmp_path)
    starts = [event.seq for event, _ in seen if isinstance(event, LlmCallStarted)]
    responses = [(event, disk) for event, disk in seen if isinstance(event, LlmResponse)]
    assert len(responses) == 3
    for step, (_, disk) in enumerate(responses):
        # Every line before this step's llm_call_started: the previous step entire.
        durable = {decode(line).seq for line in disk}
        assert set(range(1, starts[step])) <= durable, f"step {step + 1}"


def test_a_tool_that_is_not_read_only_runs_only_once_its_start_is_on_disk(
    tmp_path: Path,
) -> None:
    seen, poke, _ = _run(tmp_path)
    started = [event for event, _ in seen if isinstance(event, ToolCallStarted)]
    pokes = [event for event in started if event.name == "poke"]
    assert len(poke.durable_when_run) == len(pokes) == 2
    for event, durable in zip(pokes, poke.durable_when_run, strict=True):
        assert _line_of(event, durable)


def test_first_and_last_lines_are_on_disk_when_the_writer_returns(tmp_path: Path) -> None:
    seen, _, log = _run(tmp_path)
    for event, disk in seen:
        if isinstance(event, RunStarted | RunFinished):
            assert _line_of(event, disk), event.TAG
    # And at the end, everything: the disk holds the whole log.
    assert seen[-1][1] == log.read_bytes().splitlines(keepends=True)


def test_after_a_power_cut_at_any_moment_resume_never_runs_poke_twice(tmp_path: Path) -> None:
    """For each moment an event was kept, cut the power there: replay what the disk held
    and resume. The calls the resume would run must not include a poke that already ran."""
    seen, _, _ = _run(tmp_path)
    ran_before: set[str] = set()
    cuts = 0
    for event, disk in seen:
        state = rebuild(decode(line) for line in disk)
        plan = plan_resume(state, Limits(max_steps=5))
        if plan is not None:
            cuts += 1
            _check_resume(state, plan, ran_before, event)
        if isinstance(event, ToolCallStarted) and event.name == "poke":
            ran_before.add(event.id)  # it runs right after this moment
    assert cuts >= 10


def _check_resume(
    state: ExecutionContext, plan: ResumePlan, ran_before: set[str], event: Event
) -> None:
    resumer = AgentRunner(
        provider=FunctionModel(_script),
        registry=ToolRegistry([Peek(), Poke(Disk())]),
        sink=(sink := MemorySink()),
        clock=time.time,
        timer=time.monotonic,
        state=state,
    )
    resumer.resume(plan)
    after = resumer.state
    # Every poke that ran is in the log the resume starts from, and answered: by its own
    # result, or `interrupted` now. None is left to run, or to be asked for, again.
    answered = {
        block.tool_use_id
        for message in after.messages
        for block in message.content
        if isinstance(block, ToolResultBlock)
    } | {
        call.id
        for call, result in zip(after.turn_calls, after.turn_results, strict=True)
        if result is not None
    }
    assert ran_before <= answered, f"cut after seq {event.seq}"
    assert sink.events  # run_resumed at least
