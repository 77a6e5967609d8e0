"""`ruizn.Agent`: the library's front door.

    agent = ruizn.Agent(model="claude-sonnet-4-5", tools=[add], workspace=".")
    result = agent.run("What is 2 + 3?")

An Agent is a `RunConfig` plus tools and a model. Each `run` writes its own log exactly as
`ruizn run` does (so `ruizn replay/show/resume` work on it), drives the same runner, and
returns a `RunResult`. Errors are typed exceptions; nothing here exits the process.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio
from attrs import evolve, frozen

from ruizn.config import TEST_MODEL, RunConfig
from ruizn.effects.approval import ApproveFunction, CallbackApprover
from ruizn.effects.function_model import FunctionModel, ReplyFunction
from ruizn.effects.mcp_config import MCPServer
from ruizn.effects.provider import Provider
from ruizn.effects.sandbox import workspace_sandbox
from ruizn.effects.sink import EventSink, MemorySink
from ruizn.effects.tools import BaseTool, ToolRegistry
from ruizn.effects.writer import EventWriter
from ruizn.events import Event
from ruizn.redact import Redactor
from ruizn.runner import AgentRunner
from ruizn.state import ExecutionContext, JsonObject, Status, TextBlock, Usage
from ruizn.store import default_root, new_run_id
from ruizn.toolsource import SourceKind, ToolSource

ToolLike = BaseTool | Callable[..., Any] | type[BaseTool]


@frozen(kw_only=True)
class RunResult:
    status: Status
    """success, max_steps, error, cancelled or awaiting_approval (a call needs a decision
    and nobody could be asked: `ruizn resume RUN --approve/--deny` goes on)."""
    output: str
    """The text of the model's last answer."""
    run_id: str
    log_path: Path | None
    """The run's events.jsonl (None when the agent keeps no log)."""
    usage: Usage
    error: str | None
    state: ExecutionContext
    """The final state; `ruizn.replay(log_path)` rebuilds exactly this."""


class Agent:
    def __init__(
        self,
        model: str | ReplyFunction | Provider = "claude-sonnet-4-5",
        *,
        tools: Iterable[ToolLike] = (),
        builtins: bool = True,
        log: bool = True,
        config: RunConfig | None = None,
        approve: ApproveFunction | None = None,
        mcp: Iterable[MCPServer] = (),
        **options: Any,
    ) -> None:
        """`options` are RunConfig's fields (system, workspace, max_steps, max_tokens, log_dir,
        max_retries, retry_base_delay, read_timeout, tool_timeout, tool_concurrency,
        allow_secret_files, plugins, approval); `config` gives them all at once. `model` is a
        model id, `"test"`, a function (request -> reply, see FunctionModel) or a Provider.

        `approve` decides the tool calls that need approval in `approval="ask"` mode (the
        default): a function, sync or async, of the `ToolCall`, returning True/False,
        `(approved, reason)` or an `Answer`. Without it such a call stops the run with status
        awaiting_approval.

        `mcp` is MCP servers (`ruizn.MCPServer.stdio(...)` / `.http(...)`): started before each
        run and stopped after it, their tools offered as `mcp__NAME__TOOL`."""
        base = config if config is not None else RunConfig(plugins=False)
        name = model if isinstance(model, str) else "function"
        self.config = evolve(base, model=name, **options)
        self._model = model
        self._tools = tuple(tools)
        self._builtins = builtins
        self._log = log
        self._approve = approve
        self._mcp = tuple(mcp)

    def run(self, goal: str) -> RunResult:
        """Run to the end (blocking). Inside an event loop, use `await run_async(goal)`."""
        return anyio.run(self.run_async, goal)

    async def run_async(self, goal: str) -> RunResult:
        result: RunResult | None = None
        async for item in self._drive(goal):
            if isinstance(item, RunResult):
                result = item
        assert result is not None
        return result

    async def stream(self, goal: str) -> AsyncIterator[Event]:
        """The run's events as they happen (the objects the log holds), in order."""
        async for item in self._drive(goal):
            if not isinstance(item, RunResult):
                yield item

    def _prepare(self, goal: str) -> tuple[Path, Path]:
        if not goal.strip():
            raise ValueError("the goal must not be empty")
        workspace = Path(self.config.workspace).resolve()
        if not workspace.is_dir():
            raise FileNotFoundError(f"the workspace {self.config.workspace} is not a folder")
        return workspace, default_root(workspace, self.config.log_dir)

    async def _drive(self, goal: str) -> AsyncIterator[Event | RunResult]:
        workspace, root = self._prepare(goal)
        run_id = new_run_id()
        async with _mcp_toolset(self._mcp, workspace, root / ".mcp" / run_id) as (mcp, records):
            async for item in self._run(goal, run_id, workspace, root, mcp, records):
                yield item

    async def _run(  # noqa: PLR0917 - private, called once
        self,
        goal: str,
        run_id: str,
        workspace: Path,
        root: Path,
        mcp_tools: tuple[BaseTool, ...],
        mcp_records: tuple[JsonObject, ...],
    ) -> AsyncIterator[Event | RunResult]:
        config = self.config
        registry, sources = self._registry(workspace, root)
        registry = ToolRegistry([*registry, *mcp_tools])
        log_path = root / run_id / "events.jsonl" if self._log else None
        sink: EventSink = EventWriter.new(log_path) if log_path is not None else MemorySink()
        send, receive = anyio.create_memory_object_stream[Event](max_buffer_size=1 << 16)
        redactor = Redactor.from_env(os.environ)
        runner = AgentRunner(
            provider=self._provider(workspace),
            registry=registry,
            sink=sink,
            subscribers=[send.send_nowait],
            clock=time.time,
            timer=time.monotonic,
            tool_concurrency=config.tool_concurrency,
            redact=redactor.redact_event if redactor else None,
            approver=CallbackApprover(self._approve) if self._approve is not None else None,
        )
        runner.begin(
            run_id=run_id,
            goal=goal,
            config=config,
            workspace=str(workspace),
            tool_sources=sources,
            mcp_servers=mcp_records,
        )
        states: list[ExecutionContext] = []

        async def drive() -> None:
            try:
                states.append(await runner.drive())
            finally:
                send.close()

        async with anyio.create_task_group() as group:
            group.start_soon(drive)
            async with receive:
                async for event in receive:
                    yield event
        state = states[0]
        yield RunResult(
            status=state.status,
            output=_output(state),
            run_id=run_id,
            log_path=log_path,
            usage=state.usage,
            error=state.error,
            state=state,
        )

    def _provider(self, workspace: Path) -> Provider:
        model = self._model
        if isinstance(model, str):
            if model == TEST_MODEL:
                from ruizn.effects.test_model import TestModelProvider

                return TestModelProvider(workspace)
            from ruizn.effects.anthropic_provider import AnthropicProvider

            return AnthropicProvider(read_timeout=self.config.read_timeout)
        if hasattr(model, "stream") and not inspect.isfunction(model):
            return model
        return FunctionModel(model)

    def _registry(self, workspace: Path, root: Path) -> tuple[ToolRegistry, tuple[ToolSource, ...]]:
        from ruizn.effects.function_tool import tool as as_tool
        from ruizn.effects.tool_loader import collect_tools

        tools: list[BaseTool] = []
        sources: list[ToolSource] = []
        if self._builtins or self.config.plugins:
            sandbox = workspace_sandbox(
                workspace, root, allow_secret_files=self.config.allow_secret_files
            )
            box = collect_tools(
                sandbox,
                self.config.tools,
                plugins=self.config.plugins,
                builtins=None if self._builtins else (),
                timeout=self.config.tool_timeout,
            )
            tools.extend(loaded.tool for loaded in box.tools)
            sources.extend(box.sources)
        for item in self._tools:
            made = _as_tool(item, as_tool)
            tools.append(made)
            sources.append(_source(made))
        return ToolRegistry(tools), tuple(sources)


@contextlib.asynccontextmanager
async def _mcp_toolset(
    servers: tuple[MCPServer, ...], workspace: Path, stderr_dir: Path
) -> AsyncIterator[tuple[tuple[BaseTool, ...], tuple[JsonObject, ...]]]:
    """The servers' tools, held open around the whole run (the SDK's sessions must be closed
    by the task that opened them); nothing is imported without servers."""
    if not servers:
        yield (), ()
        return
    from ruizn.effects.mcp_tools import McpToolset

    toolset = McpToolset(servers, cwd=workspace, stderr_dir=stderr_dir)
    async with toolset as tools:
        yield tuple(tools), toolset.describe()


def _as_tool(item: ToolLike, as_tool: Callable[[Any], BaseTool]) -> BaseTool:
    if isinstance(item, BaseTool):
        return item
    if isinstance(item, type) and issubclass(item, BaseTool):
        return item()
    return as_tool(item)


def _source(made: BaseTool) -> ToolSource:
    """Where a library tool came from, so `ruizn resume` can import it again (if it can)."""
    origin = getattr(made, "origin", None)
    ref = (
        origin if isinstance(origin, str) else f"{type(made).__module__}:{type(made).__qualname__}"
    )
    return ToolSource(tool=made.name, kind=SourceKind.SPEC, ref=ref)


def _output(state: ExecutionContext) -> str:
    for message in reversed(state.messages):
        if message.role == "assistant":
            return "".join(b.text for b in message.content if isinstance(b, TextBlock))
    return ""


def run(goal: str, **options: Any) -> RunResult:
    """`Agent(**options).run(goal)`, for one-off runs."""
    return Agent(**options).run(goal)


__all__: Sequence[str] = ("Agent", "RunResult", "run")
