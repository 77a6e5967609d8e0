"""The log is the truth when an MCP server's tool list changes mid-run: the real runner with a
server whose tool list hypothesis redraws between any two actions (a `ToolWatch`, as the
runner gets it from ruizn.Agent), and a model that calls tools old and new.

Laws: replay of the log is the runner's state; each request offers exactly the tools the
log says the run had then; a call whose tool went away or changed after the model made it
is never run and is answered unknown_tool; every other call of an offered tool runs."""

from __future__ import annotations

from typing import Any

import anyio
from hypothesis import event as label
from hypothesis import given
from hypothesis import strategies as st

from ruizn.effects.models.function import FunctionModel
from ruizn.effects.models.provider import ModelReply
from ruizn.effects.runlog.sink import MemorySink
from ruizn.effects.tools.base import BaseTool, ToolRegistry
from ruizn.events import (
    LlmCallStarted,
    LlmResponse,
    ToolCallFinished,
    ToolCallStarted,
    ToolsChanged,
)
from ruizn.reducers import rebuild
from ruizn.settings import RunSettings
from ruizn.shell.runner import AgentRunner
from ruizn.shell.toolchange import ToolChange
from ruizn.state import ErrorType, JsonObject, ToolResult, ToolUseBlock, Usage
from ruizn.toolsource import SourceKind, ToolSource
from tests.properties.runs import runs_settings

# The server's possible tools: a name, and the version of its schema (a new version is a
# changed tool: a call made of the old one must not run as the new one).
POOL = ("a", "b", "c")
SERVER: JsonObject = {"name": "m", "transport": "stdio", "command": "m"}


class _ServerTool(BaseTool):
    description = "a tool of server m"
    read_only = True

    def __init__(self, tool: str, version: int, ran: list[str]) -> None:
        super().__init__()
        self.name = f"mcp__m__{tool}"  # type: ignore[misc]
        self.input_schema = {  # type: ignore[misc]
            "type": "object",
            "properties": {f"v{version}": {"type": "string"}},
        }
        self._ran = ran

    def source(self) -> ToolSource:
        return ToolSource(
            tool=self.name, kind=SourceKind.MCP, ref=f"m/{self.name[8:]}", read_only=True
        )

    async def invoke(self, input: JsonObject) -> ToolResult:
        self._ran.append(self.name)
        return ToolResult.ok(f"{self.name} ran")


class _DrawnServer:
    """A ToolWatch whose list changes when hypothesis says so, to a drawn list."""

    def __init__(self, data: st.DataObject, ran: list[str]) -> None:
        self._data = data
        self._ran = ran

    def tools(self, listing: dict[str, int]) -> tuple[_ServerTool, ...]:
        return tuple(_ServerTool(name, version, self._ran) for name, version in listing.items())

    def pending(self) -> bool:
        return self._data.draw(st.integers(0, 3), label="changed?") == 0

    async def refresh(self, settings: RunSettings) -> ToolChange | None:
        listing = self._data.draw(
            st.dictionaries(st.sampled_from(POOL), st.integers(1, 2)), label="new list"
        )
        tools = self.tools(dict(sorted(listing.items())))
        return ToolChange(
            servers=("m",),
            tools=tools,
            sources=tuple(tool.source() for tool in tools),
            replaces=frozenset(s.tool for s in settings.tool_sources if s.kind is SourceKind.MCP),
        )

    def refused(self, reason: str) -> None:
        raise AssertionError(f"a drawn change was refused: {reason}")


@runs_settings(40)
@given(st.data())
def test_replay_and_requests_follow_a_changing_tool_list(data: st.DataObject) -> None:
    ran: list[str] = []
    server = _DrawnServer(data, ran)
    offered: list[list[str]] = []
    steps = data.draw(st.integers(1, 4), label="steps")

    def model(request: dict[str, Any]) -> ModelReply | str:
        offered.append([tool["name"] for tool in request.get("tools", [])])
        if len(offered) > steps:
            return "done"
        # The model calls what it is offered (the change comes after it answered).
        mcp_tools = [name for name in offered[-1] if name.startswith("mcp__m__")]
        if not mcp_tools:
            return "nothing to call"
        names = data.draw(
            st.lists(st.sampled_from(mcp_tools), min_size=1, max_size=3), label="calls"
        )
        calls = tuple(
            ToolUseBlock(id=f"toolu_{len(offered)}_{i}", name=name, input={})
            for i, name in enumerate(names)
        )
        return ModelReply(content=calls, stop_reason="tool_use", usage=Usage(output_tokens=1))

    first = server.tools({"a": 1, "b": 1})
    sink = MemorySink()
    runner = AgentRunner(
        provider=FunctionModel(model),
        registry=ToolRegistry(first),
        sink=sink,
        clock=lambda: 0.0,
        timer=lambda: 0.0,
        watch=server,
    )
    settings = RunSettings(
        max_steps=10,
        tool_concurrency=data.draw(st.integers(1, 3), label="concurrency"),
        mcp_servers=(SERVER,),
        tool_sources=tuple(tool.source() for tool in first),
    )

    async def go() -> None:
        runner.begin(run_id="20260101-000000-a1b2c3", goal="g", settings=settings)
        await runner.drive()

    anyio.run(go)
    events = list(sink.events)
    assert rebuild(events) == runner.state
    # Each request offered the tools the log says the run had when it was made.
    starts = [i for i, e in enumerate(events) if isinstance(e, LlmCallStarted)]
    assert len(starts) == len(offered)
    for at, names in zip(starts, offered, strict=True):
        assert names == [tool["name"] for tool in rebuild(events[: at + 1]).settings.tools]
    # A call runs only against the tool the model was offered; a stale one is answered why.
    started = {e.id for e in events if isinstance(e, ToolCallStarted)}
    calls = {
        block.id
        for e in events
        if isinstance(e, LlmResponse)
        for block in e.content
        if isinstance(block, ToolUseBlock)
    }
    stale = set()
    for index, event in enumerate(events):
        if not isinstance(event, ToolCallFinished) or event.id in started:
            continue
        assert event.result.is_error
        assert event.result.error_type == ErrorType.UNKNOWN_TOOL
        assert "not run: the tool" in str(event.result.content)
        assert event.id in rebuild(events[:index]).turn_stale
        stale.add(event.id)
    # What the examples hold (pytest --hypothesis-show-statistics): most change the list,
    # about half leave a call stale.
    changes = any(isinstance(e, ToolsChanged) for e in events)
    label(f"stale calls: {bool(stale)}; tool list changed: {changes}")
    assert started | stale == calls
    assert len(ran) == len(started)
    assert runner.state.status.value == "success"
