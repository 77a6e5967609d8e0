"""A workspace with traps around it, shared by the sandbox and file-tool tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio

from ruizn.effects.tools.base import BaseTool, ToolRegistry, invoke_tool
from ruizn.effects.tools.read import ReadFileTool
from ruizn.effects.tools.search import GlobTool, GrepTool, ListDirTool
from ruizn.effects.tools.workspace import PathJail
from ruizn.effects.tools.write import EditFileTool, WriteFileTool
from ruizn.state import ToolCall, ToolResult

SECRET = "top secret, outside the workspace"
LOG_SECRET = "a tool result from a past run"
KEY = "sk-ant-api03-not-a-real-key"


def build(tmp_path: Path) -> Path:
    """tmp/{outside.txt, outside_dir/}, and ws/ with symlinks out, a loop, a FIFO, logs, secrets."""
    (tmp_path / "outside.txt").write_text(SECRET)
    (tmp_path / "outside_dir").mkdir()
    (tmp_path / "outside_dir" / "inner.txt").write_text(SECRET)
    (tmp_path / "outside_dir" / "only_outside.txt").write_text(SECRET)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("# Demo\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "note.txt").write_text("a note\n")
    (ws / "out").symlink_to("../outside_dir")
    (ws / "outabs").symlink_to(tmp_path / "outside_dir")
    (ws / "outfile").symlink_to(tmp_path / "outside.txt")
    (ws / "hop").symlink_to("outfile")
    (ws / "chain").symlink_to(ws / "hop")  # absolute, inside, then relative, then out
    (ws / "hopdir").symlink_to("out")
    (ws / "chaindir").symlink_to("hopdir")
    (ws / "loop").symlink_to("loop")
    os.mkfifo(ws / "pipe")
    (ws / ".ruizn" / "runs" / "r1").mkdir(parents=True)
    (ws / ".ruizn" / "runs" / "r1" / "events.jsonl").write_text(LOG_SECRET)
    (ws / "logs").symlink_to(".ruizn/runs")
    (ws / ".env").write_text(f"ANTHROPIC_API_KEY={KEY}\n")
    (ws / "keys").mkdir()
    (ws / "keys" / "server.pem").write_text(KEY)
    (ws / "innocent.txt").symlink_to(".env")
    return ws


def outside_snapshot(tmp_path: Path) -> dict[str, bytes]:
    """Every file outside the workspace with its bytes: a write that escaped changes this."""
    found = {}
    for path in sorted(tmp_path.rglob("*")):
        if path.is_relative_to(tmp_path / "ws") or not path.is_file():
            continue
        found[str(path.relative_to(tmp_path))] = path.read_bytes()
    return found


def all_tools(where: PathJail | Path) -> dict[str, BaseTool]:
    sandbox = where if isinstance(where, PathJail) else PathJail(where)
    tools: list[BaseTool] = [
        ReadFileTool(sandbox),
        ListDirTool(sandbox),
        GlobTool(sandbox),
        GrepTool(sandbox),
        WriteFileTool(sandbox),
        EditFileTool(sandbox),
    ]
    return {tool.name: tool for tool in tools}


def input_for(tool: str, file_path: str, dir_path: str) -> dict[str, Any]:
    """The input that points `tool` at a path: a file for most, a folder for list_dir/glob."""
    match tool:
        case "read_file":
            return {"path": file_path}
        case "list_dir":
            return {"path": dir_path}
        case "glob":
            return {"pattern": dir_path.rstrip("/") + "/*"}
        case "grep":
            return {"pattern": "secret|past run|sk-ant", "path": file_path}
        case "write_file":
            return {"path": file_path, "content": "written by the model"}
        case "edit_file":
            return {"path": file_path, "old_text": "top", "new_text": "bottom"}
    raise AssertionError(tool)


async def call(tool: BaseTool, tool_input: Any) -> ToolResult:
    with anyio.fail_after(10):  # nothing here may hang
        return await invoke_tool(
            ToolRegistry([tool]), ToolCall(id="t", name=tool.name, input=tool_input)
        )


def leaks(result: ToolResult) -> bool:
    return any(text in result.content for text in (SECRET, LOG_SECRET, KEY))
