"""Images in tool results, end to end: the real CLI and SDK, the local Messages API, and real
MCP servers (tests/mcp_servers/media.py over stdio; the npm `server-everything`). What the
model is sent is read in the request body the local API received."""

from __future__ import annotations

import base64
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from ruizn.effects.runlog.store import replay
from ruizn.serde import state_from_json
from tests.cli.conftest import run_cli
from tests.fakeapi import Stream, Text, ToolUse, free_port
from tests.mcp_servers import start_http_demo, stop_http_demo
from tests.mcp_servers.media import png
from tests.paths import REPO, TESTS

MEDIA = TESTS / "mcp_servers" / "media.py"
# Where .ci/run installs the npm server (outside the package; ignored by git).
EVERYTHING = (REPO / ".ci" / "node" / "node_modules" / ".bin") / "mcp-server-everything"


def media_spec(state: Path, name: str = "m") -> str:
    return f"{name}=" + shlex.join([sys.executable, str(MEDIA), str(state)])


def tool_results(request: Any) -> dict[str, Any]:
    """The tool_result blocks of a request's last message, by call id."""
    last = request.body["messages"][-1]["content"]
    return {block["tool_use_id"]: block for block in last if block["type"] == "tool_result"}


def transcript(stdout: str) -> list[str]:
    """The lines of a transcript that a run and its replay both print: tools and images."""
    return [line for line in stdout.splitlines() if line.startswith(("[tool]", "[image]"))]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def test_an_mcp_image_reaches_the_model_as_an_image_block(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(
        [
            Stream(
                (ToolUse("toolu_01", "mcp__m__screenshot", {"width": 64, "height": 48}),),
                stop_reason="tool_use",
            ),
            Stream((Text("A gradient."),)),
        ]
    )
    result = run_cli(
        ["run", "--goal", "look", "--mcp", media_spec(tmp_path / "m")],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    picture = png(64, 48)
    # On the wire: the caption, then the server's PNG bytes as the API's image block.
    answer = tool_results(server.requests[1])["toolu_01"]
    assert answer["content"] == [
        {"type": "text", "text": "a 64x48 screenshot:"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": b64(picture)},
        },
    ]
    assert "is_error" not in answer
    # The transcript names the call and describes the image, never its bytes.
    size = f"{len(picture)} B"
    assert transcript(result.stdout) == [
        '[tool] mcp__m__screenshot {"width": 64, "height": 48}',
        "[tool] mcp__m__screenshot ok · 19 B",
        f"[image] image/png · {size} · 64x48 px",
    ]
    assert b64(picture) not in result.stdout + result.stderr
    # The log holds the image once, as sent (base64: 4/3 of its bytes, the README says).
    log = result.log_path.read_text(encoding="utf-8")
    assert log.count(b64(picture)) == 1
    [line] = [line for line in log.splitlines() if '"tool_call_finished"' in line]
    assert len(line) < len(b64(picture)) + 300
    run_id = result.log_path.parent.name

    # Replay prints the same lines and rebuilds the state the run ended with.
    replayed = run_cli(["replay", run_id], workspace=workspace)
    assert replayed.code == 0, replayed.stderr
    assert transcript(replayed.stdout) == transcript(result.stdout)
    as_json = run_cli(["replay", run_id, "--json"], workspace=workspace)
    state = state_from_json(json.loads(as_json.stdout))
    assert state == replay(result.log_path)
    assert state.messages[2].content[0].content[1].source.data == b64(picture)

    shown = run_cli(["show", run_id], workspace=workspace)
    assert shown.code == 0, shown.stderr
    assert f"images:    1 image, {len(b64(picture))} B of base64 in the log\n" in shown.stdout
    assert f"           toolu_01 mcp__m__screenshot · image/png · {size} · 64x48 px\n" in (
        shown.stdout
    )
    assert b64(picture) not in shown.stdout


def test_images_the_api_would_refuse_and_audio_are_lines_that_say_why(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(
        [
            Stream(
                (
                    # 9000 px wide: over the API's 8000 px a side (a few hundred bytes of PNG).
                    ToolUse("toolu_01", "mcp__m__screenshot", {"width": 9000, "height": 1}),
                    ToolUse("toolu_02", "mcp__m__bitmap", {}),
                    ToolUse("toolu_03", "mcp__m__sound", {}),
                ),
                stop_reason="tool_use",
            ),
            Stream((Text("Nothing to see."),)),
        ]
    )
    result = run_cli(
        ["run", "--goal", "look", "--mcp", media_spec(tmp_path / "m")],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    answers = tool_results(server.requests[1])
    wide = len(png(9000, 1))
    # Text alone, so the request is one the API takes; each line names the image and why.
    assert answers["toolu_01"]["content"] == (
        "a 9000x1 screenshot:\n"
        f"[image not shown: image/png, {wide} B, 9000x1 px: it is over the 8000 px a side the"
        " API takes]"
    )
    assert answers["toolu_02"]["content"] == (
        "[image not shown: image/bmp, about 66 B: its bytes are not a JPEG, PNG, GIF or WebP"
        " image, the types the model takes]"
    )
    assert answers["toolu_03"]["content"] == (
        "a beep:\n[audio: audio/wav, 44 B: not shown, the model hears none]"
    )
    assert all(not answer.get("is_error") for answer in answers.values())
    # The log holds exactly what was sent.
    finished = {e["id"]: e for e in result.events() if e["type"] == "tool_call_finished"}
    assert {i: e["result"]["content"] for i, e in finished.items()} == {
        i: a["content"] for i, a in answers.items()
    }


def test_a_function_tool_returning_ruizn_image(workspace: Path, server_factory: Any) -> None:
    (workspace / "shots.py").write_text(
        "import ruizn\n"
        "from tests.mcp_servers.media import png\n\n\n"
        "@ruizn.tool(read_only=True)\n"
        "def shot(width: int) -> list[object]:\n"
        '    """A screenshot."""\n'
        '    return ["here:", ruizn.Image(png(width, 2), "image/png")]\n',
        encoding="utf-8",
    )
    server = server_factory(
        [
            Stream((ToolUse("toolu_01", "shot", {"width": 5}),), stop_reason="tool_use"),
            Stream((Text("Seen."),)),
        ]
    )
    env_path = os.pathsep.join([str(REPO)])
    from tests.cli.conftest import cli_env

    result = run_cli(
        ["run", "--goal", "look", "--tool", "shots.py:shot", "--no-plugins"],
        workspace=workspace,
        env=cli_env(server.base_url, PYTHONPATH=env_path),
    )
    assert result.code == 0, result.stderr
    assert tool_results(server.requests[1])["toolu_01"]["content"] == [
        {"type": "text", "text": "here:"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": b64(png(5, 2))},
        },
    ]
    assert f"[image] image/png · {len(png(5, 2))} B · 5x2 px" in result.stdout


def need_everything() -> str:
    """The npm server, or a skip outside CI; in CI (.ci/run installs it) its absence fails."""
    if EVERYTHING.exists():
        return str(EVERYTHING)
    if os.environ.get("CI"):
        pytest.fail(f"{EVERYTHING} is missing, and CI must run the npm server's tests (.ci/run)")
    pytest.skip("npm install --prefix .ci/node @modelcontextprotocol/server-everything; CI runs it")


def test_the_npm_everything_servers_tiny_image_reaches_the_model(
    workspace: Path, server_factory: Any
) -> None:
    everything = need_everything()
    server = server_factory(
        [
            Stream((ToolUse("toolu_01", "mcp__ev__get-tiny-image", {}),), stop_reason="tool_use"),
            Stream((Text("The MCP logo."),)),
        ]
    )
    result = run_cli(
        ["run", "--goal", "look", "--mcp", f"ev={shlex.join([everything, 'stdio'])}"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    content = tool_results(server.requests[1])["toolu_01"]["content"]
    images = [block for block in content if block["type"] == "image"]
    assert len(images) == 1
    source = images[0]["source"]
    assert (source["type"], source["media_type"]) == ("base64", "image/png")
    assert base64.b64decode(source["data"]).startswith(b"\x89PNG\r\n\x1a\n")
    assert any(block["type"] == "text" for block in content)  # its caption
    lines = transcript(result.stdout)
    assert lines[1] == "[tool] mcp__ev__get-tiny-image ok · " + lines[1].rsplit("· ", 1)[1]
    assert lines[2].startswith("[image] image/png · ")
    assert lines[2].endswith(" px")


# -- result lines name their call ----------------------------------------------------------


def test_parallel_result_lines_name_their_call_live_and_in_replay_alike(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(
        [
            Stream(
                (
                    ToolUse("toolu_a", "mcp__m__screenshot", {"width": 3, "height": 2}),
                    ToolUse("toolu_b", "mcp__m__screenshot", {"width": 4, "height": 4}),
                    ToolUse("toolu_c", "mcp__m__old_tool", {"text": "x"}),
                ),
                stop_reason="tool_use",
            ),
            Stream((Text("Done."),)),
        ]
    )
    result = run_cli(
        ["run", "--goal", "look twice", "--mcp", media_spec(tmp_path / "m")],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    live = transcript(result.stdout)
    # The calls run in parallel, so their results come in any order: each line says whose
    # it is (the id too where the turn calls that tool twice).
    assert sorted(line for line in live if " ok · " in line) == [
        "[tool] mcp__m__old_tool ok · 6 B",
        "[tool] mcp__m__screenshot (toolu_a) ok · 17 B",
        "[tool] mcp__m__screenshot (toolu_b) ok · 17 B",
    ]
    assert '[tool] mcp__m__screenshot (toolu_a) {"width": 3, "height": 2}' in live
    assert '[tool] mcp__m__old_tool {"text": "x"}' in live
    assert len([line for line in live if line.startswith("[image]")]) == 2
    replayed = run_cli(["replay", result.log_path.parent.name], workspace=workspace)
    assert replayed.code == 0, replayed.stderr
    assert transcript(replayed.stdout) == live  # byte for byte, in the same order


# -- a server whose tool list changes ---------------------------------------------------------


def tool_names(request: Any) -> list[str]:
    return [tool["name"] for tool in request.body["tools"]]


def test_a_changed_tool_list_is_logged_offered_and_a_gone_tool_answered_with_why(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(
        [
            Stream(
                (
                    ToolUse("toolu_1", "mcp__m__switch", {}),
                    ToolUse("toolu_2", "mcp__m__old_tool", {"text": "late"}),
                ),
                stop_reason="tool_use",
            ),
            Stream(
                (ToolUse("toolu_3", "mcp__m__new_tool", {"text": "hi", "times": 2}),),
                stop_reason="tool_use",
            ),
            Stream((Text("Done."),)),
        ]
    )
    result = run_cli(
        # One call at a time: the switch's notification comes before old_tool would run.
        ["run", "--goal", "switch", "--tool-concurrency", "1", "--mcp", media_spec(tmp_path)],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    first, second, third = server.requests
    assert "mcp__m__old_tool" in tool_names(first)
    assert "mcp__m__new_tool" not in tool_names(first)
    # The next request offers the server's new list, in the place of its old one.
    assert tool_names(second) == [
        *(n for n in tool_names(first) if n != "mcp__m__old_tool"),
        "mcp__m__new_tool",
    ]
    answers = tool_results(second)
    assert answers["toolu_1"]["content"] == "switched"
    gone = answers["toolu_2"]
    assert gone["is_error"] is True
    assert gone["content"].startswith(
        "not run: the tool mcp__m__old_tool is no longer offered: its MCP server changed its"
        " tool list"
    )
    assert tool_results(third)["toolu_3"]["content"] == "new: hihi"
    # The change is an event in the log, with the whole list the next request sent.
    events = result.events()
    [changed] = [e for e in events if e["type"] == "tool_changed" or e["type"] == "tools_changed"]
    assert changed["servers"] == ["m"]
    assert [tool["name"] for tool in changed["tools"]] == tool_names(second)
    assert {s["tool"]: s["ref"] for s in changed["tool_sources"]}["mcp__m__new_tool"] == (
        "m/new_tool"
    )
    assert "[tools] MCP server m changed its tools: added mcp__m__new_tool; removed" in (
        result.stdout
    )
    # Replay rebuilds the tools the run ended with.
    state = replay(result.log_path)
    assert [tool["name"] for tool in state.settings.tools] == tool_names(third)
    replayed = run_cli(["replay", result.log_path.parent.name], workspace=workspace)
    assert transcript(replayed.stdout) == transcript(result.stdout)


def test_resume_goes_on_with_the_changed_tool_list(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(
        [
            Stream((ToolUse("toolu_1", "mcp__m__switch", {}),), stop_reason="tool_use"),
            Stream(
                (ToolUse("toolu_2", "mcp__m__new_tool", {"text": "again"}),),
                stop_reason="tool_use",
            ),
            Stream((Text("Done."),)),
        ]
    )
    spec = media_spec(tmp_path / "m")
    first = run_cli(
        ["run", "--goal", "switch", "--max-steps", "1", "--mcp", spec],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert first.code == 3, first.stderr  # max_steps, after the switch
    log = first.log_path
    assert [e["type"] for e in first.events()].count("tools_changed") == 1
    changed = replay(log).settings.tools
    resumed = run_cli(
        ["resume", "last", "--max-steps", "5"], workspace=workspace, base_url=server.base_url
    )
    assert resumed.code == 0, resumed.stderr
    # The server started again (it keeps its switch), and the resumed run's requests offer
    # the list the log recorded last: new_tool runs.
    assert len((tmp_path / "m" / "pids").read_text().split()) == 2
    assert [t["name"] for t in server.requests[1].body["tools"]] == [
        tool["name"] for tool in changed
    ]
    assert tool_results(server.requests[2])["toolu_2"]["content"] == "new: again"
    assert replay(log).status.value == "success"


def test_a_changed_list_whose_names_collide_is_refused_and_the_run_goes_on(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(
        [
            Stream(
                (ToolUse("toolu_1", "mcp__m__switch", {"clash": True}),), stop_reason="tool_use"
            ),
            Stream((Text("Done."),)),
        ]
    )
    result = run_cli(
        ["run", "--goal", "clash", "--mcp", media_spec(tmp_path / "m")],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    # `x.y` and `x_y` would both be mcp__m__x_y: the new list is not taken, and said why.
    assert "mcp__m__x_y" in result.stderr
    assert "the run goes on with the tools it had" in result.stderr
    assert "tools_changed" not in [e["type"] for e in result.events()]
    first, second = server.requests
    assert tool_names(second) == tool_names(first)


# -- ruizn tools --mcp -----------------------------------------------------------------------


def test_tools_lists_an_mcp_servers_tools_and_stops_it(workspace: Path, tmp_path: Path) -> None:
    state = tmp_path / "m"
    listed = run_cli(
        ["tools", "--no-plugins", "--json", "--mcp", media_spec(state)], workspace=workspace
    )
    assert listed.code == 0, listed.stderr
    tools = {tool["name"]: tool for tool in json.loads(listed.stdout)}
    assert tools["mcp__m__screenshot"] == {
        "name": "mcp__m__screenshot",
        "source": {"kind": "mcp", "ref": "m/screenshot"},
        "read_only": True,
        "description": "A screenshot of the given size.",
        "input_schema": {
            "type": "object",
            "properties": {
                "width": {"title": "Width", "type": "integer"},
                "height": {"title": "Height", "type": "integer"},
            },
            "required": ["width", "height"],
            "title": "screenshotArguments",
        },
    }
    assert tools["read_file"]["source"] == {"kind": "builtin", "ref": "read_file"}
    text = run_cli(["tools", "--no-plugins", "--mcp", media_spec(state)], workspace=workspace)
    assert text.code == 0, text.stderr
    lines = text.stdout.splitlines()
    at = lines.index("mcp__m__screenshot  (mcp m/screenshot · read-only)")
    assert lines[at + 1 : at + 3] == [
        "  A screenshot of the given size.",
        '  input schema: {"type":"object","properties":{"width":{"title":"Width","type":'
        '"integer"},"height":{"title":"Height","type":"integer"}},"required":["width",'
        '"height"],"title":"screenshotArguments"}',
    ]
    # Each listing started the server once, and stopped it: no process is left.
    pids = [int(pid) for pid in (state / "pids").read_text().split()]
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    # No run was made.
    assert not (workspace / ".ruizn" / "runs").exists() or not list(
        (workspace / ".ruizn" / "runs").glob("*/events.jsonl")
    )


def test_tools_with_a_server_that_cannot_start_is_one_line_and_exit_2(workspace: Path) -> None:
    result = run_cli(
        ["tools", "--no-plugins", "--mcp", "ghost=ruizn-no-such-mcp-server -v"],
        workspace=workspace,
    )
    assert (result.code, result.stderr, result.stdout) == (
        2,
        "ruizn: error: MCP server ghost: command not found: ruizn-no-such-mcp-server\n",
        "",
    )
    header = run_cli(
        ["tools", "--mcp", "ghost=http://127.0.0.1:9/mcp", "--mcp-header", "ghost:Bad Name=x"],
        workspace=workspace,
    )
    assert header.code == 2
    assert header.stderr.startswith("ruizn: error: ")
    assert len(header.stderr.splitlines()) == 1


def test_tools_lists_an_http_servers_tools_with_its_headers(workspace: Path) -> None:
    port = free_port()
    demo = start_http_demo(port)
    try:
        result = run_cli(
            [
                "tools",
                "--no-plugins",
                "--json",
                "--mcp",
                f"web=http://127.0.0.1:{port}/mcp",
                "--mcp-header",
                "web:X-Demo-Token=s3cret",
            ],
            workspace=workspace,
        )
    finally:
        stop_http_demo(demo)
    assert result.code == 0, result.stderr
    listed = {tool["name"]: tool for tool in json.loads(result.stdout)}
    assert listed["mcp__web__echo"]["source"] == {"kind": "mcp", "ref": "web/echo"}
    assert listed["mcp__web__echo"]["read_only"] is True
    assert listed["mcp__web__add"]["read_only"] is False
    assert "s3cret" not in result.stdout + result.stderr
