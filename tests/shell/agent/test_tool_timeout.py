"""The run's tool_timeout (--tool-timeout, a goals file's `tool_timeout`) reaches every tool:
built-ins, @ruizn.tool functions and MCP tools; a tool's own @ruizn.tool(timeout=...) wins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

import ruizn
from ruizn.effects.models.provider import ModelReply
from ruizn.state import ToolUseBlock, Usage


def _asks(name: str) -> Any:
    def model(request: dict[str, Any]) -> ModelReply | str:
        last = request["messages"][-1]["content"]
        results = [b["content"] for b in last if b.get("type") == "tool_result"]
        if results:
            return "results: " + ", ".join(results)
        call = ToolUseBlock(id="toolu_1", name=name, input={})
        return ModelReply(content=(call,), stop_reason="tool_use", usage=Usage(output_tokens=3))

    return model


@ruizn.tool
async def slow() -> str:
    """Take half a second."""
    await anyio.sleep(0.5)
    return "done"


@ruizn.tool(timeout=5)
async def patient() -> str:
    """Take half a second, and say it may take five."""
    await anyio.sleep(0.5)
    return "done"


def test_the_runs_tool_timeout_reaches_a_decorated_function(tmp_path: Path) -> None:
    agent = ruizn.Agent(model=_asks("slow"), tools=[slow], workspace=tmp_path, tool_timeout=0.1)
    result = agent.run("go")
    assert result.output == "results: slow timed out after 0.1s"
    # And it is the default's 10 s without one: the same call finishes.
    assert (
        ruizn.Agent(model=_asks("slow"), tools=[slow], workspace=tmp_path).run("go").output
        == "results: done"
    )


def test_a_tools_own_timeout_wins(tmp_path: Path) -> None:
    agent = ruizn.Agent(
        model=_asks("patient"), tools=[patient], workspace=tmp_path, tool_timeout=0.1
    )
    assert agent.run("go").output == "results: done"
