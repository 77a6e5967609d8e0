"""The runner's tool calls: a turn's calls run (up to `tool_concurrency` at once, a
`sequential` tool alone), each started and finished in the log, its result fitted (images),
given a subfolder's instructions and its PostToolUse hooks' notes."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

import anyio
from attrs import evolve

from ruizn.decide import stale_result
from ruizn.effects.runlog.sink import EventSink, SinkError
from ruizn.effects.tools.base import invoke_tool
from ruizn.events import SubagentFinished, SubagentStarted, ToolCallFinished, ToolCallStarted
from ruizn.hooks import matching, post_notes
from ruizn.media import fit as fit_media
from ruizn.media import text_of
from ruizn.shell.hookcalls import HookCalls
from ruizn.shell.recorder import Recorder
from ruizn.shell.toolchange import ToolChanges
from ruizn.state import ErrorType, ExecutionContext, Status, TextBlock, ToolCall, ToolResult
from ruizn.toolsource import SourceKind


class PathInstructions(Protocol):
    """Project instructions for a path a file tool touched (effects.project.instructions)."""

    def given_in(self, messages: Iterable[Any], root: Iterable[Any]) -> None: ...

    def for_path(self, raw: str) -> str | None: ...


class ChildHost(Protocol):
    """What a subagent's call needs of the run it runs under (shell/children.py): its
    state, and its log, where the child's start and end are recorded."""

    @property
    def state(self) -> ExecutionContext: ...

    def child_started(self, call_id: str, run_id: str, agent: str, description: str) -> int: ...

    def child_finished(self, call_id: str, run_id: str, child: ExecutionContext) -> None: ...

    async def child_hooks(self, event: str, call: ToolCall, agent: str, run_id: str) -> None: ...


class ChildAwaits(Exception):
    """A subagent stopped for a decision nobody could give: its call stays open (unanswered)
    and the run stops awaiting_approval with it (decide)."""


# A tool whose call runs under the run itself (the `agent` tool): given the call and the run.
RunsChild = Callable[[ToolCall, ChildHost], Awaitable[ToolResult]]


class ToolCalls:
    """The runner's part that runs a turn's tool calls: the tools as `changes` holds them now,
    their PostToolUse hooks through `hooks`, a subfolder's instructions from `instructions`.
    It is the `ChildHost` of the subagents its calls start."""

    def __init__(
        self,
        run: Recorder,
        *,
        sink: EventSink,
        timer: Callable[[], float],
        changes: ToolChanges,
        hooks: HookCalls,
        instructions: PathInstructions | None = None,
    ) -> None:
        self._run = run
        self._sink = sink
        self._timer = timer
        self.changes = changes
        self.hooks = hooks
        # A subfolder's AGENTS.md, appended to the result of the first built-in file tool
        # call there (logged with the result, so a replay is exact). Told lazily which the
        # run gave already (its root's, its results').
        self._instructions = instructions
        self._instructions_ready = False

    @property
    def state(self) -> ExecutionContext:
        return self._run.state

    async def run(self, calls: Sequence[ToolCall]) -> None:
        """Run a turn's calls, up to `tool_concurrency` at once. A tool marked `sequential`
        runs alone, as a barrier, in the order the model asked. Events are logged in the
        order things happen; the reducer merges the results in tool_use order."""
        batch: list[ToolCall] = []
        for call in calls:
            tool = self.changes.registry.get(call.name)
            if tool is not None and getattr(tool, "sequential", False):
                await self._run_batch(batch)
                batch = []
                await self._run_tool(call)
            else:
                batch.append(call)
        await self._run_batch(batch)

    async def _run_batch(self, calls: Sequence[ToolCall]) -> None:
        concurrency = self._run.state.settings.tool_concurrency
        if len(calls) <= 1 or concurrency == 1:
            for call in calls:
                await self.changes.take()  # one call may change the next one's tool
                await self._run_tool(call)
            return
        limiter = anyio.CapacityLimiter(concurrency)

        async def one(call: ToolCall) -> None:
            async with limiter:
                await self._run_tool(call)

        try:
            async with anyio.create_task_group() as group:
                for call in calls:
                    group.start_soon(one, call)
        except BaseExceptionGroup as failed:
            # invoke_tool never raises, so this is the log failing (or a bug): the first such
            # error ends the run as it would in the sequential path, not wrapped in a group.
            raise first_error(failed) from None

    def runs_again(self, name: str) -> bool:
        """A call of `name` may run again after a crash (read-only, or it resumes)."""
        tool = self.changes.registry.get(name)
        return tool is not None and (tool.read_only or tool.resumes)

    def read_only(self, name: str) -> bool:
        tool = self.changes.registry.get(name)
        return tool is not None and tool.read_only

    async def _run_tool(self, call: ToolCall) -> None:
        if call.id in self._run.state.turn_stale:  # its tool changed since this batch was planned
            self._run.emit(ToolCallFinished, id=call.id, result=stale_result(self._run.state, call))
            return
        self._run.emit(ToolCallStarted, id=call.id, name=call.name, input=call.input)
        if not self.read_only(call.name):
            # On disk before the tool acts: after a power cut, resume must find the call
            # started and answer it `interrupted`, never run it a second time.
            self._sink.sync()  # a SinkError ends the run as a failed write does
        began = self._timer()
        try:
            result = await self._invoke(call)
        except ChildAwaits:
            return  # logged (subagent_finished awaiting_approval); the call stays open
        except anyio.get_cancelled_exc_class():
            # A tool that ends its work when cancelled (bash kills the command's process
            # group) says so in the log, so resume need not answer "effects unknown".
            stopped = getattr(self.changes.registry.get(call.name), "stopped_on_cancel", None)
            if isinstance(stopped, str):
                result = ToolResult.error(ErrorType.INTERRUPTED, stopped)
                with contextlib.suppress(SinkError):
                    self._run.emit(
                        ToolCallFinished, id=call.id, result=result, duration=self._timer() - began
                    )
            raise
        if not isinstance(result.content, str):
            # Its images, checked against what the run's requests hold already: an image the
            # API would refuse becomes a line saying why (ruizn.media). No await between
            # this and the emit, so calls finishing in parallel are counted one by one.
            content, _ = fit_media(result.content, self._run.state.media)
            result = evolve(result, content=content)
        result = self._with_instructions(call, result)
        post = matching(self._run.state.settings, "PostToolUse", call.name)
        if post:
            response = {"content": text_of(result.content), "is_error": result.is_error}
            runs = await self.hooks.run("PostToolUse", post, call, tool_response=response)
            notes = post_notes(runs)
            if notes:
                content = result.content
                result = evolve(
                    result,
                    content=f"{content}\n\n{notes}"
                    if isinstance(content, str)
                    else (*content, TextBlock(text=notes)),
                )
        self._run.emit(ToolCallFinished, id=call.id, result=result, duration=self._timer() - began)

    async def _invoke(self, call: ToolCall) -> ToolResult:
        runs: RunsChild | None = getattr(self.changes.registry.get(call.name), "runs", None)
        if runs is None:
            return await invoke_tool(self.changes.registry, call)
        problem = self.changes.registry.validation_error(call.name, call.input)
        if problem is not None:
            return ToolResult.error(ErrorType.INVALID_INPUT, problem)
        # No tool timeout: a child run has its own limits (steps, budget).
        return await runs(call, self)

    def child_started(self, call_id: str, run_id: str, agent: str, description: str) -> int:
        """Log a child's start, on disk before the child writes (a resume finds it by this);
        its seq."""
        self._run.emit(
            SubagentStarted, id=call_id, run_id=run_id, agent=agent, description=description
        )
        self._sink.sync()
        return self._run.state.last_seq

    def child_finished(self, call_id: str, run_id: str, child: ExecutionContext) -> None:
        self._run.emit(
            SubagentFinished,
            id=call_id,
            run_id=run_id,
            status=child.status,
            steps=child.step,
            usage=child.usage,
            cost=child.total_cost,
            error=child.error,
            awaiting=child.awaiting_approval if child.status is Status.AWAITING_APPROVAL else (),
        )

    async def child_hooks(self, event: str, call: ToolCall, agent: str, run_id: str) -> None:
        """The run's SubagentStart or SubagentStop hooks for its child `run_id` (whose matcher
        takes the agent's name), logged as hook_ran for the call."""
        specs = matching(self._run.state.settings, event, agent)
        if specs:
            await self.hooks.run(event, specs, call, agent_id=run_id, agent_type=agent)

    def _with_instructions(self, call: ToolCall, result: ToolResult) -> ToolResult:
        """The result with the nearest subfolder instructions file not given yet, if the
        call is a built-in file tool's on a path."""
        finder = self._instructions
        path = call.input.get("path")
        if finder is None or result.is_error or not isinstance(path, str):
            return result
        state = self._run.state
        if not any(
            s.tool == call.name and s.kind is SourceKind.BUILTIN
            for s in state.settings.tool_sources
        ):
            return result
        if not self._instructions_ready:
            finder.given_in(state.messages, state.settings.instructions)
            self._instructions_ready = True
        block = finder.for_path(path)
        if block is None:
            return result
        content = result.content
        if isinstance(content, str):
            return evolve(result, content=f"{content}\n\n{block}")
        return evolve(result, content=(*content, TextBlock(text=block)))


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The error a task group's failure stands for: the first sink error, else the first."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return first_error(exc)
        if isinstance(exc, SinkError):
            return exc
    first = group.exceptions[0]
    return first_error(first) if isinstance(first, BaseExceptionGroup) else first


__all__ = ("ChildAwaits", "ChildHost", "PathInstructions", "RunsChild", "ToolCalls", "first_error")
