"""ruizn: a small, exact agent core for Claude.

    import ruizn

    @ruizn.tool
    def add(a: int, b: int) -> int:
        "Add two integers."
        return a + b

    result = ruizn.Agent(model="test", tools=[add]).run("What is 2 + 3?")

Every name below is imported on first use, so `ruizn --help` (which imports this package
for `__version__`) pays for none of anyio, anthropic or pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that holds it
_PUBLIC: dict[str, str] = {
    "Agent": "ruizn.agent",
    "RunResult": "ruizn.agent",
    "run": "ruizn.agent",
    "RunConfig": "ruizn.config",
    "ConfigError": "ruizn.config",
    "tool": "ruizn.effects.function_tool",
    "FunctionTool": "ruizn.effects.function_tool",
    "BaseTool": "ruizn.effects.tools",
    "BlockingTool": "ruizn.effects.tools",
    "ToolInputError": "ruizn.effects.tools",
    "FunctionModel": "ruizn.effects.function_model",
    "ModelReply": "ruizn.effects.provider",
    "ProviderError": "ruizn.effects.provider",
    "RunLocked": "ruizn.effects.writer",
    "MCPServer": "ruizn.effects.mcp_config",
    "Answer": "ruizn.effects.approval",
    "ToolCall": "ruizn.state",
    "ToolResult": "ruizn.state",
    "ErrorType": "ruizn.state",
    "ExecutionContext": "ruizn.state",
    "Status": "ruizn.state",
    "replay": "ruizn.store",
    "replay_events": "ruizn.store",
    "iter_runs": "ruizn.store",
    "RunInfo": "ruizn.store",
    "RunNotFound": "ruizn.store",
    "LogError": "ruizn.store",
}

__all__ = [
    "Agent",
    "Answer",
    "BaseTool",
    "BlockingTool",
    "ConfigError",
    "ErrorType",
    "ExecutionContext",
    "FunctionModel",
    "FunctionTool",
    "LogError",
    "MCPServer",
    "ModelReply",
    "ProviderError",
    "RunConfig",
    "RunInfo",
    "RunLocked",
    "RunNotFound",
    "RunResult",
    "Status",
    "ToolCall",
    "ToolInputError",
    "ToolResult",
    "__version__",
    "iter_runs",
    "replay",
    "replay_events",
    "run",
    "tool",
]

if TYPE_CHECKING:
    from ruizn.agent import Agent, RunResult, run
    from ruizn.config import ConfigError, RunConfig
    from ruizn.effects.approval import Answer
    from ruizn.effects.function_model import FunctionModel
    from ruizn.effects.function_tool import FunctionTool, tool
    from ruizn.effects.mcp_config import MCPServer
    from ruizn.effects.provider import ModelReply, ProviderError
    from ruizn.effects.tools import BaseTool, BlockingTool, ToolInputError
    from ruizn.effects.writer import RunLocked
    from ruizn.state import ErrorType, ExecutionContext, Status, ToolCall, ToolResult
    from ruizn.store import LogError, RunInfo, RunNotFound, iter_runs, replay, replay_events


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'ruizn' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
