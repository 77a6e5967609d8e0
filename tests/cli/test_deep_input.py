"""Deeply nested JSON through the real CLI: a reply holding a tool input past the depth limit
is one refused reply (`invalid_response`, retried) at every depth, and a planted log line
too deep is one error naming the line; never `internal error: RecursionError`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ruizn.bounds import MAX_DEPTH, MAX_LINE_DEPTH
from tests.cli.conftest import Result, run_cli
from tests.fakeapi import Raw, Stream, Text, ToolUse
from tests.fakeapi.sse import encode

REFUSAL = (
    "invalid response from the API: tool_use 'toolu_1' input is nested deeper than"
    f" {MAX_DEPTH} levels"
)
OK = Stream((Text("Recovered answer."),))


def _deep_tool_reply(depth: int) -> Raw:
    """One read_file call whose input is `depth` levels deep (the object is level 1),
    streamed in input_json_delta pieces as the API streams it: 1.2 KB at 600 levels."""
    text = '{"path": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    message = {
        "type": "message_start",
        "message": {
            "id": "msg_deep",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-5-5",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 10, "output_tokens": 0},
        },
    }
    block = {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}
    events = [
        ("message_start", message),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        ),
        *(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": text[i : i + 4096]},
                },
            )
            for i in range(0, len(text), 4096)
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 5},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return Raw(b"".join(encode(name, data) for name, data in events))


def _replay(result: Result) -> dict[str, Any]:
    replay = run_cli(["replay", "--json", str(result.log_path)], workspace=result.workspace)
    assert replay.code == 0, replay.stderr
    state: dict[str, Any] = json.loads(replay.stdout)
    return state


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 600, 3_000, 100_000])
def test_a_too_deep_tool_input_is_one_refused_reply_at_every_depth(
    depth: int, workspace: Path, server_factory: Any
) -> None:
    server = server_factory([_deep_tool_reply(depth), OK])
    result = run_cli(["run", "--goal", "go"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "RecursionError" not in result.stderr
    failed = [e for e in result.events() if e["type"] == "llm_call_failed"]
    assert [(e["error_type"], e["message"], e["will_retry"]) for e in failed] == [
        ("invalid_response", REFUSAL, True)
    ]
    assert not any(e["type"] == "tool_call_started" for e in result.events())
    assert result.events()[-1]["status"] == "success"
    assert _replay(result)["status"] == "success"


def test_a_tool_input_at_the_limit_reaches_the_tool(workspace: Path, server_factory: Any) -> None:
    server = server_factory([_deep_tool_reply(MAX_DEPTH), OK])
    result = run_cli(["run", "--goal", "go"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    events = result.events()
    assert not any(e["type"] == "llm_call_failed" for e in events)
    finished = next(e for e in events if e["type"] == "tool_call_finished")
    # read_file's schema wants a string path: the model is told, the run goes on.
    assert finished["result"]["error_type"] == "invalid_input"
    assert _replay(result)["status"] == "success"


def test_without_retries_left_the_run_ends_as_an_invalid_response(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([_deep_tool_reply(3_000)])
    result = run_cli(
        ["run", "--goal", "go", "--max-retries", "0"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code != 0
    assert "RecursionError" not in result.stderr
    assert "Traceback" not in result.stderr
    finished = result.events()[-1]
    assert finished["type"] == "run_finished"
    assert finished["status"] == "error"
    assert REFUSAL in finished["error"]


def _planted(workspace: Path, server_factory: Any, depth: int) -> Path:
    """A finished run of the user's whose tool call input an editor made `depth` deep."""
    server = server_factory(
        [Stream((ToolUse("toolu_1", "read_file", {"path": "README.md"}),), stop_reason="tool_use")]
    )
    result = run_cli(
        ["run", "--goal", "go", "--max-steps", "1"], workspace=workspace, base_url=server.base_url
    )
    lines = result.log_path.read_text().splitlines()
    deep = '{"path":' + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    edited = [line.replace('{"path":"README.md"}', deep) for line in lines]
    assert edited != lines
    result.log_path.write_text("\n".join(edited) + "\n")
    return result.log_path


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 600, 3_000, 100_000])
def test_a_planted_too_deep_line_is_one_error_naming_the_line(
    depth: int, workspace: Path, server_factory: Any
) -> None:
    log = _planted(workspace, server_factory, depth)
    before = log.read_bytes()
    expected = (
        f"line 3: llm_response refused: tool_use 'toolu_1' input is nested deeper than"
        f" {MAX_DEPTH} levels"
        if depth + 3 <= MAX_LINE_DEPTH
        else f"line 3: the line is nested deeper than {MAX_LINE_DEPTH} levels"
    )
    for args in (["replay", str(log)], ["show", "last"], ["resume", "last"]):
        result = run_cli(args, workspace=workspace)
        assert result.code == 2, (args, result.stderr)
        assert expected in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
        assert "RecursionError" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    listing = run_cli(["runs"], workspace=workspace)
    assert listing.code == 0
    assert "unreadable" in listing.stdout
    assert log.read_bytes() == before  # nothing cut, nothing appended
