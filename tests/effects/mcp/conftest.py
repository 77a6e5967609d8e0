"""What the MCP tests share: an open toolset of real servers (tests/mcp_servers) and how to
tell that a server process is gone. The `http_demo` fixture is in tests/conftest.py."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

from ruizn.effects.mcp.config import MCPServer
from ruizn.effects.mcp.connection import McpTool
from ruizn.effects.mcp.toolset import McpToolset
from ruizn.effects.tools.base import ToolRegistry, invoke_tool
from ruizn.state import ToolCall, ToolResult
from tests.mcp_servers import DEMO

__all__ = ["Run", "demo", "gone", "pids_in", "toolset", "wait_until"]


def demo(name: str = "demo", **kw: float) -> MCPServer:
    return MCPServer.stdio(name, sys.executable, [str(DEMO)], **kw)


class Run:
    """An open toolset, with its registry and the notices it gave."""

    def __init__(self, toolset: McpToolset, tools: tuple[McpTool, ...], notices: list[str]):
        self.toolset = toolset
        self.tools = tools
        self.registry = ToolRegistry(tools)
        self.notices = notices

    async def call(self, tool: str, /, **arguments: object) -> ToolResult:
        return await invoke_tool(self.registry, ToolCall(id="toolu_1", name=tool, input=arguments))

    async def pid(self, server: str = "demo") -> int:
        result = await self.call(f"mcp__{server}__pid")
        return int(result.content.splitlines()[-1])


@asynccontextmanager
async def toolset(*servers: MCPServer, **kw: object) -> AsyncIterator[Run]:
    notices: list[str] = []
    ts = McpToolset(servers, on_notice=notices.append, **kw)  # type: ignore[arg-type]
    async with ts as tools:
        yield Run(ts, tools, notices)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # Still there, or a zombie nobody reaped: both are an orphan for our purpose.
    return False


async def wait_until(condition: object, what: str, limit: float = 10.0) -> None:
    assert callable(condition)
    with anyio.move_on_after(limit):
        # Polling is the point: the condition is another process's state or the toolset's.
        while not condition():  # noqa: ASYNC110
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"waited {limit}s for {what}")


def pids_in(stderr_file: Path) -> list[int]:
    return [int(p) for p in re.findall(r"pid (\d+)", stderr_file.read_text())]
