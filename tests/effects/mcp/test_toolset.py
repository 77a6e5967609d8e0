"""MCP tools against real MCP servers (the SDK's MCPServer in tests/mcp_servers), over stdio
and over Streamable HTTP on 127.0.0.1: what the model sees, and every way a server can fail."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from ruizn.effects.mcp.config import MCPServer
from ruizn.effects.mcp.names import McpStartupError
from ruizn.effects.mcp.toolset import McpToolset
from ruizn.state import (
    ErrorType,
    ImageBlock,
    ImageSource,
    JsonObject,
    TextBlock,
    ToolResult,
)
from tests.effects.mcp.conftest import demo, gone, pids_in, toolset, wait_until
from tests.fakeapi import free_port
from tests.mcp_servers import DEMO, SERVERS, start_http_demo, stop_http_demo

pytestmark = pytest.mark.anyio

# The 1x1 PNG tests/mcp_servers/demo.py's picture tool returns.
TINY_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)
RESTARTED = "[ruizn restarted MCP server demo, which had stopped]\n"


# -- stdio -----------------------------------------------------------------------------------


async def test_stdio_tools_are_listed_as_the_server_describes_them() -> None:
    async with toolset(demo()) as run:
        by_name = {tool.name: tool for tool in run.tools}
        assert {"mcp__demo__echo", "mcp__demo__add", "mcp__demo__picture"} <= set(by_name)
        echo, add = by_name["mcp__demo__echo"], by_name["mcp__demo__add"]
        assert echo.schema() == {
            "name": "mcp__demo__echo",
            "description": "Echo the text back, unchanged.",
            "input_schema": {
                "type": "object",
                "properties": {"text": {"title": "Text", "type": "string"}},
                "required": ["text"],
                "title": "echoArguments",
            },
        }
        # readOnlyHint decides both: echo says it only reads, add says nothing.
        assert (echo.read_only, echo.needs_approval) == (True, False)
        assert (add.read_only, add.needs_approval) == (False, True)
        assert (echo.server_name, echo.mcp_name) == ("demo", "echo")


async def test_stdio_results_text_images_other_content_and_errors() -> None:
    async with toolset(demo()) as run:
        assert await run.call("mcp__demo__echo", text="héllo\nworld") == ToolResult.ok(
            "héllo\nworld"
        )
        assert await run.call("mcp__demo__add", a=2, b=40) == ToolResult.ok("42")
        picture = await run.call("mcp__demo__picture")
        # The image goes on as the API's image block (base64 of the server's PNG bytes).
        assert picture == ToolResult.ok(
            (
                TextBlock(text="a tiny picture:"),
                ImageBlock(source=ImageSource(media_type="image/png", data=TINY_PNG)),
            )
        )
        assorted = await run.call("mcp__demo__assorted")
        assert assorted.content.splitlines() == [
            "first",
            "[audio: audio/wav, 12 B: not shown, the model hears none]",
            "[resource: file:///notes.txt (text/plain)]",
            "note text",
            "[resource: file:///data.bin, 2.0 KB binary, not shown]",
            "[resource link: report https://example.com/report.pdf (application/pdf)]",
            "last",
        ]
        failed = await run.call("mcp__demo__fail", message="the disk is full")
        assert failed.is_error
        assert failed.error_type == ErrorType.RUNTIME_ERROR
        assert "the disk is full" in failed.content
        # ruizn checks the server's own schema before anything is sent.
        bad = await run.call("mcp__demo__add", a="two", b=40)
        assert bad.error_type == ErrorType.INVALID_INPUT
        # Calls from parallel tasks share the connection and each gets its own answer.
        answers: dict[int, ToolResult] = {}

        async def slow(i: int) -> None:
            answers[i] = await run.call("mcp__demo__slow", seconds=0.2 * i)

        async with anyio.create_task_group() as group:
            for i in (3, 1, 2):
                group.start_soon(slow, i)
        assert answers == {i: ToolResult.ok(f"slept {0.2 * i}") for i in (1, 2, 3)}


async def test_a_slow_tool_times_out_and_the_server_still_answers() -> None:
    async with toolset(demo(timeout=1.0)) as run:
        slow = await run.call("mcp__demo__slow", seconds=60)
        assert slow == ToolResult.error(ErrorType.TIMEOUT, "mcp__demo__slow timed out after 1s")
        assert await run.call("mcp__demo__echo", text="still here") == ToolResult.ok("still here")
        assert run.toolset.alive("demo")


async def test_the_default_timeout_applies_where_the_server_sets_none() -> None:
    async with toolset(demo(), default_timeout=0.5) as run:
        assert {tool.timeout for tool in run.tools} == {0.5}
        slow = await run.call("mcp__demo__slow", seconds=60)
        assert slow.error_type == ErrorType.TIMEOUT


async def test_a_server_killed_between_calls_is_restarted_once(tmp_path: Path) -> None:
    async with toolset(demo(), stderr_dir=tmp_path) as run:
        first = await run.pid()
        os.kill(first, signal.SIGKILL)
        await wait_until(lambda: not run.toolset.alive("demo"), "the exit to be seen")
        after = await run.call("mcp__demo__echo", text="after the kill")
        assert after == ToolResult.ok(RESTARTED + "after the kill")
        assert any("demo stopped" in n and "restarting it" in n for n in run.notices)
        second = await run.pid()
        assert second != first
        assert gone(first)
        # The one restart is spent: a second crash leaves the tools unavailable, and says so.
        crashed = await run.call("mcp__demo__crash")
        assert crashed.error_type == ErrorType.RUNTIME_ERROR
        assert "closed the connection during the call" in crashed.content
        assert "its tools are now unavailable" in crashed.content
        later = await run.call("mcp__demo__echo", text="again")
        assert later.error_type == ErrorType.RUNTIME_ERROR
        assert "unavailable for the rest of the run" in later.content
        await wait_until(lambda: gone(second), "the crashed server to be reaped")
    assert pids_in(tmp_path / "mcp-demo.stderr") == [first, second]


async def test_a_server_that_crashes_during_a_call_answers_the_next_one() -> None:
    async with toolset(demo()) as run:
        first = await run.pid()
        crashed = await run.call("mcp__demo__crash")
        assert crashed.error_type == ErrorType.RUNTIME_ERROR
        assert crashed.content.startswith("MCP server demo closed the connection during the call")
        assert "may or may not have taken effect" in crashed.content
        assert "starting it again for the next call" in crashed.content
        echoed = await run.call("mcp__demo__echo", text="back")
        assert echoed == ToolResult.ok(RESTARTED + "back")
        assert gone(first)


async def test_output_that_is_not_json_rpc_is_reported_and_the_run_goes_on() -> None:
    noisy = MCPServer.stdio("noisy", sys.executable, [str(SERVERS / "noisy.py")], timeout=1.5)
    async with toolset(noisy) as run:
        assert any("not JSON-RPC" in n and "noise" in n for n in run.notices)
        # Its answer was replaced by garbage: the call ends at its timeout, not never.
        lost = await run.call("mcp__noisy__echo", text="SWALLOW_ME")
        assert lost.error_type == ErrorType.TIMEOUT
        assert any("broken json" in n or "not JSON-RPC" in n for n in run.notices[1:])
        assert await run.call("mcp__noisy__echo", text="fine") == ToolResult.ok("fine")


# -- start-up failures -----------------------------------------------------------------------


async def test_a_command_that_does_not_exist_fails_start_up_in_one_line() -> None:
    server = MCPServer.stdio("ghost", "ruizn-no-such-mcp-server", ["--flag"])
    with pytest.raises(McpStartupError) as caught:
        async with toolset(server):
            pytest.fail("a toolset with a missing command must not open")
    assert str(caught.value) == "MCP server ghost: command not found: ruizn-no-such-mcp-server"
    assert caught.value.server == "ghost"


async def test_a_server_that_exits_at_start_up_is_quoted(tmp_path: Path) -> None:
    server = MCPServer.stdio("exits", sys.executable, [str(SERVERS / "exits.py")])
    with pytest.raises(McpStartupError) as caught:
        async with toolset(server):
            pytest.fail("unreachable")
    assert str(caught.value) == (
        "MCP server exits: exited during the MCP handshake (initialize)"
        " (its stderr ends: exits: missing configuration file demo.toml)"
    )
    assert "\n" not in str(caught.value)


async def test_a_server_that_never_answers_initialize_is_stopped(tmp_path: Path) -> None:
    server = MCPServer.stdio("quiet", sys.executable, [str(SERVERS / "silent.py")])
    with pytest.raises(McpStartupError) as caught:
        async with toolset(server, startup_timeout=1.5, stderr_dir=tmp_path):
            pytest.fail("unreachable")
    assert str(caught.value).startswith(
        "MCP server quiet: did not complete the MCP handshake (initialize) within 1.5s"
        " (its stderr ends: silent server"
    )
    [pid] = pids_in(tmp_path / "mcp-quiet.stderr")
    assert gone(pid)


async def test_one_server_failing_to_start_stops_the_others(tmp_path: Path) -> None:
    ghost = MCPServer.stdio("ghost", "ruizn-no-such-mcp-server")
    with pytest.raises(McpStartupError, match="MCP server ghost: command not found"):
        async with toolset(demo(), ghost, stderr_dir=tmp_path):
            pytest.fail("unreachable")
    for pid in pids_in(tmp_path / "mcp-demo.stderr"):
        assert gone(pid)


async def test_an_http_server_that_is_not_there_fails_start_up() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    with pytest.raises(McpStartupError) as caught:
        async with toolset(MCPServer.http("web", url), startup_timeout=10):
            pytest.fail("unreachable")
    message = str(caught.value)
    assert message.startswith(f"MCP server web: cannot connect to {url}: ")
    assert "\n" not in message


# -- no orphans ------------------------------------------------------------------------------


async def test_servers_are_stopped_after_success(tmp_path: Path) -> None:
    async with toolset(demo(), demo("other"), stderr_dir=tmp_path) as run:
        pids = [await run.pid("demo"), await run.pid("other")]
    assert all(gone(pid) for pid in pids)


async def test_servers_are_stopped_after_an_error(tmp_path: Path) -> None:
    pids: list[int] = []

    async def failing_run() -> None:
        async with toolset(demo(), stderr_dir=tmp_path) as run:
            pids.append(await run.pid())
            raise RuntimeError("the run failed")

    # The caller gets its own exception back, not wrapped in an ExceptionGroup.
    with pytest.raises(RuntimeError, match="the run failed"):
        await failing_run()
    assert pids
    assert gone(pids[0])


async def test_servers_are_stopped_when_the_run_is_cancelled_mid_call(tmp_path: Path) -> None:
    pids: list[int] = []
    with anyio.CancelScope() as scope:
        async with toolset(demo(timeout=60), stderr_dir=tmp_path) as run:
            pids.append(await run.pid())

            async def cancel_soon() -> None:
                await anyio.sleep(0.3)
                scope.cancel()

            async with anyio.create_task_group() as group:
                group.start_soon(cancel_soon)
                await run.call("mcp__demo__slow", seconds=60)
            pytest.fail("the cancellation must not be turned into a result")
    assert scope.cancelled_caught
    assert gone(pids[0])


async def test_cancelled_during_start_up_leaves_no_process(tmp_path: Path) -> None:
    server = MCPServer.stdio("quiet", sys.executable, [str(SERVERS / "silent.py")])
    with anyio.move_on_after(1.0) as scope:
        async with toolset(server, startup_timeout=30, stderr_dir=tmp_path):
            pytest.fail("unreachable")
    assert scope.cancelled_caught
    [pid] = pids_in(tmp_path / "mcp-quiet.stderr")
    assert gone(pid)


# -- Streamable HTTP -------------------------------------------------------------------------


async def test_http_tools_calls_and_headers(http_demo: str) -> None:
    server = MCPServer.http("web", http_demo, headers={"X-Demo-Token": "s3cret"}, timeout=5)
    async with toolset(server) as run:
        names = {tool.name for tool in run.tools}
        assert {"mcp__web__echo", "mcp__web__header", "mcp__web__picture"} <= names
        assert await run.call("mcp__web__echo", text="over http") == ToolResult.ok("over http")
        header = await run.call("mcp__web__header", name="X-Demo-Token")
        assert header == ToolResult.ok("s3cret")
        picture = await run.call("mcp__web__picture")
        assert picture.content[-1] == ImageBlock(
            source=ImageSource(media_type="image/png", data=TINY_PNG)
        )
        failed = await run.call("mcp__web__fail", message="nope")
        assert (failed.error_type, "nope" in failed.content) == (ErrorType.RUNTIME_ERROR, True)


async def test_http_slow_tool_times_out(http_demo: str) -> None:
    async with toolset(MCPServer.http("web", http_demo, timeout=1)) as run:
        slow = await run.call("mcp__web__slow", seconds=60)
        assert slow == ToolResult.error(ErrorType.TIMEOUT, "mcp__web__slow timed out after 1s")
        assert await run.call("mcp__web__echo", text="ok") == ToolResult.ok("ok")


async def test_http_server_gone_then_back_is_reconnected_once() -> None:
    port = free_port()
    proc = start_http_demo(port)
    try:
        server = MCPServer.http("web", f"http://127.0.0.1:{port}/mcp", timeout=5)
        async with toolset(server) as run:
            assert await run.call("mcp__web__echo", text="1") == ToolResult.ok("1")
            proc.kill()
            proc.wait()
            lost = await run.call("mcp__web__echo", text="2")
            assert lost.error_type == ErrorType.RUNTIME_ERROR
            assert lost.content.startswith("MCP server web ")
            assert "will reconnect before the next call" in lost.content
            proc = start_http_demo(port)
            back = await run.call("mcp__web__echo", text="3")
            assert back == ToolResult.ok("[ruizn reconnected to MCP server web]\n3")
            assert any("web went away" in n for n in run.notices)
    finally:
        stop_http_demo(proc)


# -- recording -------------------------------------------------------------------------------


async def test_describe_records_no_secret_and_resume_can_reconnect(http_demo: str) -> None:
    server = MCPServer.http("web", http_demo, headers={"X-Demo-Token": "s3cret"})
    ts = McpToolset([server, demo()])
    records: tuple[JsonObject, ...] = ts.describe()
    assert records == (
        {"name": "web", "transport": "http", "url": http_demo, "headers": ["X-Demo-Token"]},
        {
            "name": "demo",
            "transport": "stdio",
            "command": sys.executable,
            "args": [str(DEMO)],
            "env": [],
        },
    )
    assert "s3cret" not in repr(records) + repr(server)
    again = MCPServer.from_record(records[0], environ={"RUIZN_MCP_HEADER_WEB_X_DEMO_TOKEN": "new"})
    async with toolset(again) as run:
        header = await run.call("mcp__web__header", name="X-Demo-Token")
        assert header == ToolResult.ok("new")
