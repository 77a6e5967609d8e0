"""The log is the truth: replaying what a run wrote gives exactly the state it ended with."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from ruizn.effects.models.anthropic import AnthropicProvider
from ruizn.effects.runlog.reader import replay_file
from ruizn.effects.runlog.writer import EventWriter
from ruizn.effects.tools.base import ToolRegistry
from ruizn.effects.tools.read import ReadFileTool
from ruizn.settings import RunSettings
from ruizn.shell.runner import AgentRunner
from ruizn.state import Status
from tests.cli.conftest import API_KEY
from tests.fakeapi import Stream, Text, Thinking, ToolUse, tool_loop

pytestmark = pytest.mark.anyio


async def _run(server: Any, workspace: Path, tmp_path: Path, max_steps: int = 20) -> Any:
    log = tmp_path / "20260101-000000-abcdef" / "events.jsonl"
    runner = AgentRunner(
        provider=AnthropicProvider(api_key=API_KEY, base_url=server.base_url, max_retries=0),
        registry=ToolRegistry([ReadFileTool(workspace)]),
        sink=EventWriter.new(log),
        clock=time.time,
        timer=time.monotonic,
    )
    settings = RunSettings(
        max_steps=max_steps, max_tokens=1024, system="Be brief.", workspace=str(workspace)
    )
    runner.begin(run_id="20260101-000000-abcdef", goal="read README.md", settings=settings)
    state = await runner.drive()
    return state, log


@pytest.mark.parametrize(
    "script",
    [
        pytest.param(lambda: tool_loop(3), id="three-tool-turns"),
        pytest.param(lambda: [Stream((Text("plain"),))], id="plain"),
        pytest.param(
            lambda: [
                Stream(
                    (
                        Thinking("let me think", "sig=="),
                        ToolUse("t1", "read_file", {"path": "nope"}),
                        ToolUse("t2", "read_file", {"path": "README.md"}),
                    ),
                    stop_reason="tool_use",
                ),
                Stream((Text("done"),)),
            ],
            id="thinking-and-two-tools",
        ),
    ],
)
async def test_replay_of_written_log_equals_final_state(
    script: Any, workspace: Path, tmp_path: Path, server_factory: Any
) -> None:
    server = server_factory(script())
    state, log = await _run(server, workspace, tmp_path)
    assert state.status is Status.SUCCESS
    replayed = replay_file(log)
    assert replayed.torn is None
    assert replayed.state == state


async def test_replay_after_max_steps_equals_final_state(
    workspace: Path, tmp_path: Path, server_factory: Any
) -> None:
    server = server_factory(tool_loop(50))
    state, log = await _run(server, workspace, tmp_path, max_steps=4)
    assert state.status is Status.MAX_STEPS
    assert replay_file(log).state == state
