"""A run's tools: MCP toolsets and their watch, tools made from what a caller passes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from attrs import evolve

from ruizn.effects.mcp.config import MCPServer
from ruizn.effects.tools.base import BaseTool, ToolRegistry
from ruizn.settings import (
    JsonObject,
    RunSettings,
)
from ruizn.shell.toolchange import ToolChange, ToolWatch
from ruizn.state import ErrorType, ToolResult
from ruizn.terminal import Notice
from ruizn.toolsource import SourceKind, ToolSource

if TYPE_CHECKING:
    from ruizn.effects.mcp.toolset import McpToolset


ToolLike = BaseTool | Callable[..., Any] | type[BaseTool]


@contextlib.asynccontextmanager
async def mcp_toolset(
    servers: tuple[MCPServer, ...],
    workspace: Path,
    stderr_dir: Path | None,
    notice: Notice,
    environ: Mapping[str, str],
) -> AsyncIterator[tuple[tuple[BaseTool, ...], tuple[JsonObject, ...], ToolWatch | None]]:
    """The servers' tools, held open around the whole run (the SDK's sessions must be closed
    by the task that opened them), and the watch that follows their tool lists; nothing is
    imported without servers."""
    if not servers:
        yield (), (), None
        return
    from ruizn.effects.mcp.toolset import McpToolset

    toolset = McpToolset(
        servers, cwd=workspace, stderr_dir=stderr_dir, on_notice=notice, environ=environ
    )
    async with toolset as tools:
        yield tuple(tools), toolset.describe(), McpWatch(toolset, notice)


class McpWatch:
    """The runner's ToolWatch over MCP servers: a server that says its tool list changed is
    listed again, checked as at start, and its tools take the place of the ones the run
    recorded for it."""

    def __init__(self, toolset: McpToolset, notice: Notice) -> None:
        self._toolset = toolset
        self._notice = notice

    def pending(self) -> bool:
        return self._toolset.list_changed

    async def refresh(self, settings: RunSettings) -> ToolChange | None:
        from ruizn.effects.mcp.names import McpStartupError

        try:
            relisted = await self._toolset.relist()
        except McpStartupError as exc:
            self._notice(f"{exc}; the run goes on with the tools it had")
            return None
        if relisted is None:
            return None
        servers = set(relisted.servers)
        return ToolChange(
            servers=relisted.servers,
            tools=relisted.tools,
            sources=tuple(tool.source() for tool in relisted.tools),
            replaces=frozenset(
                source.tool
                for source in settings.tool_sources
                if source.kind is SourceKind.MCP and source.ref.partition("/")[0] in servers
            ),
        )

    def refused(self, reason: str) -> None:
        self._notice(f"a changed tool list was not taken ({reason}); the run goes on as it was")


def mcp_source(tool: BaseTool) -> ToolSource:
    source: ToolSource = tool.source()  # type: ignore[attr-defined]  # an McpTool's
    return source


class ChangedTool(BaseTool):
    """An MCP tool whose server now lists it otherwise than the run recorded (another
    schema, another read-only flag, another tool behind the name, or gone): its calls are
    answered with the change, never run, whatever was approved."""

    read_only = False
    reason = ""

    @classmethod
    def of(cls, name: str, schema: JsonObject, reason: str) -> ChangedTool:
        # A tool's name, description and schema are class attributes: one class per tool.
        made = type(
            f"ChangedTool[{name}]",
            (cls,),
            {
                "name": name,
                "description": str(schema.get("description", "")),
                "input_schema": dict(schema.get("input_schema") or {"type": "object"}),
                "reason": reason,
            },
        )
        return cast(type[ChangedTool], made)()

    def approval_required(self, input: JsonObject) -> bool:
        return False  # it runs nothing: nobody is asked about it

    async def invoke(self, input: JsonObject) -> ToolResult:
        return ToolResult.error(ErrorType.RUNTIME_ERROR, f"not run: {self.reason}")


def with_flags(sources: Iterable[ToolSource], registry: ToolRegistry) -> tuple[ToolSource, ...]:
    """Each source with what its tool says of itself now (recorded for resume)."""
    flagged = []
    for source in sources:
        tool = registry.get(source.tool)
        # `read_only` in the log means "may run again after a crash" (a tool that resumes
        # what it started may too).
        again = tool is not None and (tool.read_only or tool.resumes)
        flagged.append(evolve(source, read_only=bool(again)))
    return tuple(flagged)


def tool_from(item: ToolLike, as_tool: Callable[[Any], BaseTool]) -> BaseTool:
    if isinstance(item, BaseTool):
        return item
    if isinstance(item, type) and issubclass(item, BaseTool):
        return item()
    return as_tool(item)


def source_of(made: BaseTool) -> ToolSource:
    """Where a library tool came from, so `ruizn resume` can import it again (if it can)."""
    origin = getattr(made, "origin", None)
    ref = (
        origin if isinstance(origin, str) else f"{type(made).__module__}:{type(made).__qualname__}"
    )
    return ToolSource(tool=made.name, kind=SourceKind.SPEC, ref=ref)
