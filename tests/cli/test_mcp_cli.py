"""`ruizn run --mcp ...` end to end: the real CLI and SDK, the local Messages API, and a real
MCP server over stdio (tests/mcp_servers/demo.py)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.cli.conftest import cli_env, ruizn_command, run_cli
from tests.fakeapi import Stream, Text, ToolUse

DEMO = Path(__file__).resolve().parents[1] / "mcp_servers" / "demo.py"
DEMO_SPEC = "demo=" + shlex.join([sys.executable, str(DEMO)])


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _server_pids(run_folder: Path) -> list[int]:
    # A server's stderr is kept under the log root's hidden .mcp/<run_id>/: the servers start
    # before the run's folder exists (it appears only with its first line).
    stderr = run_folder.parent / ".mcp" / run_folder.name / "mcp-demo.stderr"
    text = stderr.read_text(encoding="utf-8")
    return [int(p) for p in re.findall(r"demo server pid (\d+)", text)]


def test_the_model_calls_an_mcp_tool(workspace: Path, server_factory: Any) -> None:
    server = server_factory(
        [
            Stream(
                (
                    Text("Asking the server."),
                    ToolUse("toolu_01", "mcp__demo__echo", {"text": "hello from mcp"}),
                ),
                stop_reason="tool_use",
            ),
            Stream((Text("It said hello."),)),
        ]
    )
    result = run_cli(
        ["run", "--goal", "echo via mcp", "--mcp", DEMO_SPEC],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == '[tool] mcp__demo__echo {"text": "hello from mcp"}'
    assert "It said hello." in result.stdout
    events = result.events()
    tools = {tool["name"]: tool for tool in events[0]["settings"]["tools"]}
    assert tools["mcp__demo__echo"]["description"] == "Echo the text back, unchanged."
    assert "read_file" in tools
    [finished] = [e for e in events if e["type"] == "tool_call_finished"]
    assert finished["result"] == {
        "content": "hello from mcp",
        "is_error": False,
        "error_type": None,
    }
    # The model got the server's answer, and the tool's schema, on the wire.
    sent = server.requests[1].body
    [answer] = [b for b in sent["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert answer["content"] == "hello from mcp"
    assert "mcp__demo__echo" in {t["name"] for t in sent["tools"]}
    # The server ran once and is gone; its stderr is kept beside the log.
    [pid] = _server_pids(result.log_path.parent)
    assert _gone(pid)


def test_a_server_that_cannot_start_is_exit_2_before_any_model_call(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("never asked"),))])
    result = run_cli(
        ["run", "--goal", "x", "--mcp", DEMO_SPEC, "--mcp", "ghost=ruizn-no-such-mcp-server -v"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 2
    assert result.stderr == (
        "ruizn: error: MCP server ghost: command not found: ruizn-no-such-mcp-server\n"
    )
    assert result.stdout == ""
    assert server.requests == []
    assert result.new_logs == ()
    runs = workspace / ".ruizn" / "runs"
    started = list((runs / ".mcp").iterdir())
    assert started  # the servers did start, and left their stderr there
    for folder in started:
        for pid in _server_pids(runs / folder.name):
            assert _gone(pid)


def test_bad_mcp_options_are_usage_errors(workspace: Path) -> None:
    result = run_cli(["run", "--goal", "x", "--mcp", "nocommand"], workspace=workspace)
    assert (result.code, result.stderr) == (
        2,
        "ruizn: error: --mcp 'nocommand': expected NAME=COMMAND or NAME=URL\n",
    )
    result = run_cli(
        ["run", "--goal", "x", "--mcp", DEMO_SPEC, "--mcp-header", "demo:Auth=sk-secret"],
        workspace=workspace,
    )
    assert (result.code, result.stderr) == (
        2,
        "ruizn: error: --mcp-header demo:Auth: 'demo' is a stdio server\n",
    )


def test_ctrl_c_during_an_mcp_call_stops_the_server(workspace: Path, server_factory: Any) -> None:
    server = server_factory(
        [
            Stream(
                (ToolUse("toolu_01", "mcp__demo__slow", {"seconds": 60}),),
                stop_reason="tool_use",
            ),
        ]
    )
    proc = subprocess.Popen(
        [*ruizn_command(), "run", "--goal", "wait", "--mcp", DEMO_SPEC],
        cwd=workspace,
        env=cli_env(server.base_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = _wait_for_event(workspace / ".ruizn" / "runs", "tool_call_started", proc)
    proc.send_signal(signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    events = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert events[-1]["type"] == "run_finished"
    assert events[-1]["status"] == "cancelled"
    [pid] = _server_pids(log.parent)
    assert _gone(pid)


def _wait_for_event(root: Path, kind: str, proc: subprocess.Popen[str]) -> Path:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        for log in root.glob("*/events.jsonl"):
            if f'"type":"{kind}"' in log.read_text(encoding="utf-8"):
                return log
        time.sleep(0.05)
    raise AssertionError(f"no {kind} in time")


def test_resume_reconnects_the_runs_mcp_servers(workspace: Path, server_factory: Any) -> None:
    echo = ("mcp__demo__echo", {"text": "again"})
    server = server_factory(
        [
            Stream((ToolUse("toolu_01", echo[0], {"text": "first"}),), stop_reason="tool_use"),
            Stream((ToolUse("toolu_02", *echo),), stop_reason="tool_use"),
            Stream((Text("done"),)),
        ]
    )
    first = run_cli(
        ["run", "--goal", "echo twice", "--max-steps", "1", "--mcp", DEMO_SPEC],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert first.code == 3, first.stderr  # max_steps, after the first echo
    assert first.events()[0]["settings"]["mcp_servers"][0]["name"] == "demo"
    resumed = run_cli(
        ["resume", "last", "--max-steps", "5"], workspace=workspace, base_url=server.base_url
    )
    assert resumed.code == 0, resumed.stderr
    results = [e["result"] for e in first.events() if e["type"] == "tool_call_finished"]
    assert [r["content"] for r in results] == ["first", "again"]
