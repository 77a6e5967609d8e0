"""`ruizn run --mcp ...` end to end: the real CLI and SDK, the local Messages API, and a real
MCP server over stdio (tests/mcp_servers/demo.py)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import (
    API_KEY,
    cli_env,
    read_events,
    ruizn_command,
    run_cli,
    start_cli,
    wait_for_event,
)
from tests.fakeapi import Stream, Text, ToolUse, free_port
from tests.mcp_servers import DEMO, start_http_demo, stop_http_demo

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
        "ruizn: error: --mcp 'nocommand': expected NAME=COMMAND or NAME=URL"
        " (or NAME alone, with the URL in $RUIZN_MCP_URL_NOCOMMAND)\n",
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
    proc = start_cli(
        ["run", "--goal", "wait", "--mcp", DEMO_SPEC],
        workspace=workspace,
        base_url=server.base_url,
    )
    log = wait_for_event(workspace / ".ruizn" / "runs", "tool_call_started", proc)
    proc.send_signal(signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    events = read_events(log)
    assert events[-1]["type"] == "run_finished"
    assert events[-1]["status"] == "cancelled"
    [pid] = _server_pids(log.parent)
    assert _gone(pid)


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


# -- a hostile server (tests/mcp_servers/hostile.py) -------------------------------------------

HOSTILE = DEMO.with_name("hostile.py")
# What a terminal would act on: ESC (every escape sequence), BEL, and the C1 CSI/OSC/ST.
TERMINAL_CONTROLS = ("\x1b", "\x07", "\x9b", "\x9d", "\x9c")


def _hostile_spec(*flags: str) -> str:
    return "hostile=" + shlex.join([sys.executable, str(HOSTILE), *flags])


def _assert_inert_and_secret_free(*texts: str) -> None:
    for text in texts:
        assert API_KEY not in text
        for control in TERMINAL_CONTROLS:
            assert control not in text, repr(text)


def test_a_servers_stderr_reaches_the_terminal_inert_and_without_the_key(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    # The server knows the key (from a .env, say) and dies quoting it among terminal controls;
    # ruizn's restart notice quotes the last line of its stderr.
    key_file = tmp_path / "key.txt"
    key_file.write_text(API_KEY, encoding="utf-8")
    server = server_factory(
        [
            Stream((ToolUse("toolu_01", "mcp__hostile__die", {}),), stop_reason="tool_use"),
            Stream((Text("done"),)),
        ]
    )
    result = run_cli(
        ["run", "--goal", "x", "--mcp", _hostile_spec("--key-file", str(key_file))],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    [notice] = [line for line in result.stderr.splitlines() if "stopped (its stderr" in line]
    assert notice.startswith("ruizn: mcp: MCP server hostile stopped (its stderr ends: ␛]52;c;")
    assert "key=[redacted] the end)" in notice
    log = result.log_path.read_text(encoding="utf-8")
    _assert_inert_and_secret_free(result.stderr, result.stdout, log)


def test_a_server_that_dies_at_start_is_quoted_inert_and_without_the_key(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    key_file = tmp_path / "key.txt"
    key_file.write_text(API_KEY, encoding="utf-8")
    server = server_factory([Stream((Text("never asked"),))])
    result = run_cli(
        [
            "run",
            "--goal",
            "x",
            "--mcp",
            _hostile_spec("--key-file", str(key_file), "--die-at-start"),
        ],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 2
    assert result.stderr.startswith(
        "ruizn: error: MCP server hostile: exited during the MCP handshake (initialize)"
        " (its stderr ends: ␛]52;c;"
    )
    assert result.stderr.endswith("key=[redacted] the end)\n")
    _assert_inert_and_secret_free(result.stderr, result.stdout)
    assert server.requests == []


def test_tools_whose_names_collide_are_refused_at_start_in_either_order(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("never asked"),))])
    for flag in ("--collide", "--collide-reversed"):
        result = run_cli(
            ["run", "--goal", "x", "--mcp", _hostile_spec(flag)],
            workspace=workspace,
            base_url=server.base_url,
        )
        assert (result.code, result.stderr) == (
            2,
            "ruizn: error: MCP server hostile: its tools 'x.y' and 'x_y' both become"
            " mcp__hostile__x_y; rename one of them on the server\n",
        )
        assert result.new_logs == ()
    assert server.requests == []


def _as_a_plain_user() -> tuple[str, ...]:
    """A prefix that runs a command as root runs without the capabilities that let root read
    any process's environ, non-dumpable or not (CAP_SYS_PTRACE, CAP_PERFMON, CAP_SYS_ADMIN:
    measured; README: what remains), so ruizn and its server stand as a user's would (CI
    runs as root). Both run under it: the kernel also refuses a process that lacks
    capabilities its target holds, which would pass this test for the wrong reason."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) is needed to run this test as root"
    return (setpriv, "--bounding-set=-sys_ptrace,-perfmon,-sys_admin", "--inh-caps=-all")


@pytest.mark.skipif(sys.platform != "linux", reason="/proc/PID/environ and prctl are Linux's")
def test_a_server_cannot_read_the_api_key_from_ruizns_environment(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(
        [
            Stream((ToolUse("toolu_01", "mcp__hostile__environ_key", {}),), stop_reason="tool_use"),
            Stream((Text("done"),)),
        ]
    )
    done = run_cli(
        ["run", "--goal", "x", "--mcp", _hostile_spec()],
        workspace=workspace,
        base_url=server.base_url,
        command=[*_as_a_plain_user(), *ruizn_command()],
    )
    assert done.code == 0, done.stderr
    events = done.events()
    [finished] = [e for e in events if e["type"] == "tool_call_finished"]
    # Not "[redacted]": the redactor hides the key from the log, but the server had read it.
    assert finished["result"]["content"].startswith("DENIED: PermissionError"), finished


def test_a_url_token_is_never_logged_or_shown_and_resume_takes_it_again(
    workspace: Path, server_factory: Any
) -> None:
    port = free_port()
    demo = start_http_demo(port)
    token = "T0KEN-in-the-url-0123456789"
    url = f"http://127.0.0.1:{port}/mcp?token={token}"
    try:
        server = server_factory(
            [
                Stream(
                    (ToolUse("toolu_01", "mcp__web__echo", {"text": "1"}),), stop_reason="tool_use"
                ),
                Stream(
                    (ToolUse("toolu_02", "mcp__web__echo", {"text": "2"}),), stop_reason="tool_use"
                ),
                Stream((Text("done"),)),
            ]
        )
        first = run_cli(
            ["run", "--goal", "x", "--max-steps", "1", "--mcp", f"web={url}"],
            workspace=workspace,
            base_url=server.base_url,
        )
        assert first.code == 3, first.stderr
        [record] = first.events()[0]["settings"]["mcp_servers"]
        assert record["url"] == f"http://127.0.0.1:{port}/mcp?token=***"
        missing = run_cli(["resume", "last"], workspace=workspace, base_url=server.base_url)
        assert (missing.code, missing.stderr) == (
            2,
            f"ruizn: error: MCP server web: its URL http://127.0.0.1:{port}/mcp?token=***"
            " had secret parts: give it again as $RUIZN_MCP_URL_WEB\n",
        )
        resumed = run_cli(
            ["resume", "last", "--max-steps", "5"],
            workspace=workspace,
            env=cli_env(server.base_url, RUIZN_MCP_URL_WEB=url),
        )
        assert resumed.code == 0, resumed.stderr
        log = first.log_path.read_text(encoding="utf-8")
        results = [
            e["result"]["content"] for e in first.events() if e["type"] == "tool_call_finished"
        ]
        assert results == ["1", "2"]
        for text in (
            first.stdout,
            first.stderr,
            missing.stderr,
            resumed.stdout,
            resumed.stderr,
            log,
        ):
            assert token not in text
    finally:
        stop_http_demo(demo)


def test_an_unreachable_url_is_named_without_its_token(workspace: Path) -> None:
    token = "T0KEN-in-the-url-0123456789"
    url = f"http://127.0.0.1:{free_port()}/mcp?token={token}"
    result = run_cli(
        ["run", "--goal", "x", "--mcp", "web"],
        workspace=workspace,
        env=cli_env(None, RUIZN_MCP_URL_WEB=url),
    )
    assert result.code == 2
    assert result.stderr.startswith(
        f"ruizn: error: MCP server web: cannot connect to {url.replace(token, '***')}: "
    )
    assert token not in result.stderr + result.stdout


def test_resume_refuses_a_call_to_a_tool_its_server_now_lists_otherwise(
    workspace: Path, server_factory: Any
) -> None:
    """The run recorded `echo` as read-only with one input schema; on resume the server
    (upgraded in place) lists it otherwise: its calls are answered with the change, and the
    tool never runs, whatever was recorded or approved."""
    launcher = workspace / "server.py"

    def install(*flags: str) -> None:
        argv = [str(HOSTILE), *flags]
        launcher.write_text(
            f"import runpy, sys\nsys.argv = {argv!r}\nrunpy.run_path({str(HOSTILE)!r},"
            " run_name='__main__')\n"
        )

    install()
    server = server_factory(
        [
            Stream(
                (ToolUse("toolu_01", "mcp__h__echo", {"text": "first"}),), stop_reason="tool_use"
            ),
            Stream(
                (ToolUse("toolu_02", "mcp__h__echo", {"text": "again"}),), stop_reason="tool_use"
            ),
            Stream((Text("done"),)),
        ]
    )
    spec = "h=" + shlex.join([sys.executable, str(launcher)])
    first = run_cli(
        ["run", "--goal", "echo twice", "--max-steps", "1", "--mcp", spec],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert first.code == 3, first.stderr
    install("--changed")  # the server is upgraded between the run and its resume
    resumed = run_cli(
        ["resume", "last", "--max-steps", "5"], workspace=workspace, base_url=server.base_url
    )
    assert resumed.code == 0, resumed.stderr
    assert "mcp__h__echo" in resumed.stderr
    assert "its calls are refused, not run" in resumed.stderr
    results = {e["id"]: e["result"] for e in first.events() if e["type"] == "tool_call_finished"}
    assert results["toolu_01"]["content"] == "first"
    refused = results["toolu_02"]
    assert refused["is_error"]
    assert refused["content"].startswith("not run: mcp__h__echo")
    assert "input schema changed" in refused["content"]
