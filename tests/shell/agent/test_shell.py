"""`Agent(shell=True)`: the library gets the same shell as `ruizn run --shell`, through the
one builder; its background processes end with the run."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import ruizn
from ruizn.effects.models.provider import ModelReply
from ruizn.state import ToolUseBlock, Usage


def _shell_model(request: dict[str, Any]) -> ModelReply | str:
    """Starts a background sleeper, runs a foreground command, then reports the results."""
    last = request["messages"][-1]["content"]
    results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
    if results:
        return "\n---\n".join(str(b["content"]) for b in results)
    calls = (
        ToolUseBlock(
            id="toolu_bg", name="bash", input={"command": "sleep 9183", "background": True}
        ),
        ToolUseBlock(id="toolu_fg", name="bash", input={"command": "echo $((6 * 7)) > n.txt"}),
    )
    return ModelReply(content=calls, stop_reason="tool_use", usage=Usage())


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_an_agent_with_the_shell_runs_commands_and_ends_their_processes(tmp_path: Path) -> None:
    asked: list[str] = []

    def approve(call: ruizn.ToolCall) -> bool:
        asked.append(str(call.input["command"]))
        return True

    agent = ruizn.Agent(_shell_model, workspace=tmp_path, shell=True, approve=approve)
    result = agent.run("count")
    assert result.status is ruizn.Status.SUCCESS, result.error
    assert asked == ["sleep 9183", "echo $((6 * 7)) > n.txt"]
    assert (tmp_path / "n.txt").read_text() == "42\n"
    assert result.state.settings.shell is True
    pid = int(re.findall(r"pid (\d+)", result.output)[0])
    assert not _alive(pid)  # the background command's sandbox ended with the run
    assert os.getpid() != pid
    assert not [
        entry
        for entry in Path("/proc").iterdir()
        if entry.name.isdigit() and _alive(int(entry.name)) and _holds(entry, b"sleep\x009183")
    ]


def _holds(entry: Path, marker: bytes) -> bool:
    try:
        return marker in (entry / "cmdline").read_bytes()
    except OSError:
        return False
