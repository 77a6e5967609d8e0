"""A run whose only changes are made by the real shell (bash in bubblewrap), one command a
step, and the hash of the workspace as each step's tools were about to run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import ruizn
from ruizn.effects.models.provider import ModelReply
from ruizn.state import ToolUseBlock, Usage
from tests.checkpoints.test_store import tree_hash

# Each step's command: a file written, appended, a symlink, an empty folder, an executable
# bit, a deletion, a binary file.
COMMANDS = (
    "printf 'one\\n' > a.txt; printf 'keep\\n' > k.txt",
    "printf 'two\\n' >> a.txt; mkdir -p e/f; ln -s a.txt link",
    "rm a.txt; printf '#!/bin/sh\\n' > x.sh; chmod +x x.sh; rmdir e/f",
    "head -c 300 /dev/zero > z.bin; chmod -x x.sh; mkdir -p deep/er && printf d > deep/er/d",
)


@pytest.fixture
def shell_run(tmp_path: Path) -> Callable[..., tuple[ruizn.Agent, str, dict[int, str], Path]]:
    def run(
        commands: Sequence[str] = COMMANDS, tool: str = "bash", key: str = "command", **options: Any
    ) -> Any:
        ws = tmp_path / "ws"
        ws.mkdir(exist_ok=True)
        seen: dict[int, str] = {}

        def model(request: dict[str, Any]) -> ModelReply | str:
            step = 1 + sum(1 for m in request["messages"] if m["role"] == "assistant")
            seen[step] = tree_hash(ws)  # the files as this step's tools are about to run
            if step > len(commands):
                return "done"
            command = commands[step - 1]
            given = {key: command} if isinstance(command, str) else command
            call = ToolUseBlock(id=f"t{step}", name=tool, input=given)
            return ModelReply(content=(call,), stop_reason="tool_use", usage=Usage())

        shell = tool == "bash"
        agent = ruizn.Agent(model, workspace=ws, shell=shell, approval="always", **options)
        result = agent.run("change the files")
        assert result.status is ruizn.Status.SUCCESS, result.error
        return agent, result.run_id, seen, ws

    return run
