"""--tool-timeout over the real CLI: recorded in run_started, and a --tool function without
a timeout of its own is answered `timeout` after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cli.conftest import run_cli
from tests.fakeapi import Reply, Stream, Text, ToolUse

SLOW = '''
import time

import ruizn


@ruizn.tool
def slow() -> str:
    """Take two seconds."""
    time.sleep(2)
    return "done"
'''


def test_tool_timeout_reaches_a_tool_module_and_is_recorded(
    workspace: Path, server_factory: Any
) -> None:
    (workspace / "slow_tools.py").write_text(SLOW, encoding="utf-8")

    def reply(body: dict[str, Any], index: int) -> Reply:
        if index == 0:
            return Stream((ToolUse("toolu_1", "slow", {}),), stop_reason="tool_use")
        return Stream((Text("ok"),))

    server = server_factory(reply)
    result = run_cli(
        ["run", "--tool", "slow_tools.py:slow", "--tool-timeout", "0.2", "go"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    assert result.events()[0]["settings"]["tool_timeout"] == 0.2
    finished = next(e for e in result.events() if e["type"] == "tool_call_finished")
    assert finished["result"]["error_type"] == "timeout"
    assert "timed out after 0.2s" in str(finished["result"]["content"])
