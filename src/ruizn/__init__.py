"""ruizn: a small, exact agent core for Claude.

    import ruizn

    @ruizn.tool
    def add(a: int, b: int) -> int:
        "Add two integers."
        return a + b

    result = ruizn.Agent(model="test", tools=[add]).run("What is 2 + 3?")

Each public name below is imported on first use, so `ruizn --help` pays for none of anyio,
anthropic or pydantic. `__init__.pyi` states the same names for type checkers; a test holds
the two equal.
"""

from __future__ import annotations

import importlib
from typing import Any

from ruizn.version import __version__ as __version__

# The face: each public name and the module that holds it.
_HOMES: dict[str, str] = {
    "ForkRefused": "ruizn.fork",
    "Cassette": "ruizn.cassette.model",
    "Divergence": "ruizn.recording",
    "RecordingError": "ruizn.recording",
    "ResumeRefused": "ruizn.resuming",
    "Limits": "ruizn.limits",
    "RewindRefused": "ruizn.shell.rewind",
    "MCPServer": "ruizn.effects.mcp.config",
    "FunctionModel": "ruizn.effects.models.function",
    "FixedPrices": "ruizn.effects.models.pricing",
    "GenaiPrices": "ruizn.effects.models.pricing",
    "Pricer": "ruizn.effects.models.pricing",
    "ModelReply": "ruizn.effects.models.provider",
    "Provider": "ruizn.effects.models.provider",
    "ProviderError": "ruizn.effects.models.provider",
    "ReplayDiverged": "ruizn.effects.models.provider",
    "Answer": "ruizn.effects.person.approval",
    "Approver": "ruizn.effects.person.approval",
    "FileStore": "ruizn.effects.runlog.store",
    "LogError": "ruizn.effects.runlog.store",
    "RunInfo": "ruizn.effects.runlog.store",
    "RunNotFound": "ruizn.effects.runlog.store",
    "RunStore": "ruizn.effects.runlog.store",
    "iter_runs": "ruizn.effects.runlog.store",
    "replay": "ruizn.effects.runlog.store",
    "replay_events": "ruizn.effects.runlog.store",
    "RunLocked": "ruizn.effects.runlog.writer",
    "BaseTool": "ruizn.effects.tools.base",
    "BlockingTool": "ruizn.effects.tools.base",
    "ToolInputError": "ruizn.effects.tools.base",
    "FunctionTool": "ruizn.effects.tools.function",
    "tool": "ruizn.effects.tools.function",
    "BudgetSpent": "ruizn.events",
    "Checkpointed": "ruizn.events",
    "ContextCleared": "ruizn.events",
    "ContextCompacted": "ruizn.events",
    "Event": "ruizn.events",
    "LlmCallFailed": "ruizn.events",
    "LlmCallStarted": "ruizn.events",
    "LlmResponse": "ruizn.events",
    "LlmToken": "ruizn.events",
    "HookRan": "ruizn.events",
    "OutputChecked": "ruizn.events",
    "RunFinished": "ruizn.events",
    "RunResumed": "ruizn.events",
    "RunStarted": "ruizn.events",
    "ToolApprovalDecided": "ruizn.events",
    "ToolApprovalRequested": "ruizn.events",
    "ToolCallFinished": "ruizn.events",
    "ToolCallStarted": "ruizn.events",
    "ToolsChanged": "ruizn.events",
    "UserMessage": "ruizn.events",
    "SubagentStarted": "ruizn.events",
    "SubagentFinished": "ruizn.events",
    "Subagent": "ruizn.agentdefs",
    "SettingsChanged": "ruizn.events",
    "EvalReport": "ruizn.evals.report",
    "eval": "ruizn.evals.api",
    "Image": "ruizn.media",
    "ConfigError": "ruizn.settings",
    "ProviderConfigError": "ruizn.effects.models.provider",
    "RunSettings": "ruizn.settings",
    "Agent": "ruizn.shell.agent",
    "NothingToResume": "ruizn.shell.outcome",
    "Resume": "ruizn.shell.outcome",
    "RunResult": "ruizn.shell.outcome",
    "Session": "ruizn.shell.outcome",
    "UntrustedRun": "ruizn.resuming",
    "run": "ruizn.shell.agent",
    "Subscriber": "ruizn.shell.runner",
    "ErrorType": "ruizn.state",
    "ExecutionContext": "ruizn.state",
    "Status": "ruizn.state",
    "TextBlock": "ruizn.state",
    "ToolCall": "ruizn.state",
    "ToolResult": "ruizn.state",
    "ToolUseBlock": "ruizn.state",
    "Usage": "ruizn.state",
}

__all__ = [
    "Agent",
    "Answer",
    "Approver",
    "BaseTool",
    "BlockingTool",
    "BudgetSpent",
    "Cassette",
    "Checkpointed",
    "ConfigError",
    "ContextCleared",
    "ContextCompacted",
    "Divergence",
    "ErrorType",
    "EvalReport",
    "Event",
    "ExecutionContext",
    "FileStore",
    "FixedPrices",
    "ForkRefused",
    "FunctionModel",
    "FunctionTool",
    "GenaiPrices",
    "HookRan",
    "Image",
    "Limits",
    "LlmCallFailed",
    "LlmCallStarted",
    "LlmResponse",
    "LlmToken",
    "LogError",
    "MCPServer",
    "ModelReply",
    "NothingToResume",
    "OutputChecked",
    "Pricer",
    "Provider",
    "ProviderConfigError",
    "ProviderError",
    "RecordingError",
    "ReplayDiverged",
    "Resume",
    "ResumeRefused",
    "RewindRefused",
    "RunFinished",
    "RunInfo",
    "RunLocked",
    "RunNotFound",
    "RunResult",
    "RunResumed",
    "RunSettings",
    "RunStarted",
    "RunStore",
    "Session",
    "SettingsChanged",
    "Status",
    "Subagent",
    "SubagentFinished",
    "SubagentStarted",
    "Subscriber",
    "TextBlock",
    "ToolApprovalDecided",
    "ToolApprovalRequested",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolInputError",
    "ToolResult",
    "ToolUseBlock",
    "ToolsChanged",
    "UntrustedRun",
    "Usage",
    "UserMessage",
    "__version__",
    "eval",
    "iter_runs",
    "replay",
    "replay_events",
    "run",
    "tool",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'ruizn' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)
