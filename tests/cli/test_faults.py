"""The fault suite: every fault named, through the real CLI against the local SSE server.

Under each fault ruizn keeps working or stops with a one-line reason and the right exit
code, nothing logged is lost, and the API key appears nowhere.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import API_KEY, Result, cli_env, run_cli
from tests.fakeapi import FakeAnthropic, HttpError, Stream, Text, ToolUse, free_port


def _scan_for_key(result: Result) -> None:
    """The key must not be in stdout, stderr, or any file the run wrote."""
    assert API_KEY not in result.stdout
    assert API_KEY not in result.stderr
    for path in (result.workspace / ".ruizn").rglob("*"):
        if path.is_file():
            assert API_KEY not in path.read_text(encoding="utf-8", errors="replace")


def _run(workspace: Path, url: str, *extra: str) -> Result:
    result = run_cli(["run", "--goal", "go", *extra], workspace=workspace, base_url=url)
    _scan_for_key(result)
    assert "Traceback" not in result.stderr
    return result


OK = Stream((Text("Recovered answer."),))


# --- the model API -------------------------------------------------------------------------


@pytest.mark.parametrize("header", [{"retry-after": "0"}, {"retry-after-ms": "10"}])
def test_fault_429_is_retried_visibly_honouring_retry_after(
    header: dict[str, str], workspace: Path, server_factory: Any
) -> None:
    server = server_factory([HttpError(429, "rate_limit_error", "slow down", header), OK])
    result = _run(workspace, server.base_url)
    assert result.code == 0, result.stderr
    assert len(server.requests) == 2
    assert "[retry] attempt 1 failed: HTTP 429" in result.stdout
    retry = next(line for line in result.stdout.splitlines() if line.startswith("[retry]"))
    assert retry.count("request-id") == 1, retry  # said once, not twice
    failed = [e for e in result.events() if e["type"] == "llm_call_failed"]
    assert failed[0]["status_code"] == 429
    assert failed[0]["will_retry"] is True
    assert failed[0]["request_id"].startswith("req_fake_")


@pytest.mark.parametrize("status", [500, 502, 503, 529])
def test_fault_5xx_retried_then_fails_naming_status_and_request_id(
    status: int, workspace: Path, server_factory: Any
) -> None:
    error = HttpError(
        status, "overloaded_error" if status == 529 else "api_error", "boom", {"retry-after": "0"}
    )
    server = server_factory([error] * 3)
    result = _run(workspace, server.base_url, "--max-retries", "2")
    assert result.code == 1
    assert len(server.requests) == 3
    events = result.events()
    final = events[-1]
    assert final["status"] == "error"
    assert f"HTTP {status}" in final["error"]
    assert "request-id req_fake_" in final["error"]
    assert result.stdout.count("[retry]") == 2
    assert f"[run] error: HTTP {status}" in result.stdout


def test_fault_connection_refused_is_retried_then_fails(workspace: Path) -> None:
    result = _run(workspace, f"http://127.0.0.1:{free_port()}", "--max-retries", "1")
    assert result.code == 1
    final = result.events()[-1]
    assert final["status"] == "error"
    assert "connection" in final["error"]
    assert "[retry] attempt 1 failed: connection error" in result.stdout


def test_fault_overloaded_error_inside_a_200_stream_retries_the_call(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("partial words here"),), error_after=4), OK])
    result = _run(workspace, server.base_url)
    assert result.code == 0, result.stderr
    events = result.events()
    failed = [e for e in events if e["type"] == "llm_call_failed"]
    assert failed[0]["error_type"] == "overloaded_error"
    # the failed attempt's tokens are in the log ...
    first_attempt = events[: events.index(failed[0])]
    assert any(e["type"] == "llm_token" for e in first_attempt)
    # ... but not in the state's messages
    state = json.loads(
        run_cli(["replay", "--json", str(result.log_path)], workspace=workspace).stdout
    )
    assert state["messages"][1]["content"] == [{"type": "text", "text": "Recovered answer."}]
    assert "[retry] attempt 1 failed: overloaded_error mid-stream" in result.stdout
    assert [e["attempt"] for e in events if e["type"] == "llm_call_started"] == [1, 2]


def test_fault_connection_dropped_mid_stream_retries_the_call(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("half an answer"),), drop_after=4), OK])
    result = _run(workspace, server.base_url)
    assert result.code == 0, result.stderr
    failed = [e for e in result.events() if e["type"] == "llm_call_failed"]
    assert failed[0]["error_type"] == "connection_error"
    assert "broke mid-stream" in failed[0]["message"]


def test_fault_stalled_stream_past_the_read_timeout_retries_the_call(
    workspace: Path, server_factory: Any
) -> None:
    stall = Stream((Text("stalling"),), stall_after=3, stall_seconds=5)
    server = server_factory([stall, OK])
    result = _run(workspace, server.base_url, "--read-timeout", "0.5")
    assert result.code == 0, result.stderr
    failed = [e for e in result.events() if e["type"] == "llm_call_failed"]
    assert failed[0]["error_type"] == "stream_timeout"


def test_fault_mid_stream_errors_beyond_the_limit_end_the_run(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("x"),), error_after=2)] * 3)
    result = _run(workspace, server.base_url, "--max-retries", "2")
    assert result.code == 1
    assert "(after 3 attempts)" in result.events()[-1]["error"]


@pytest.mark.parametrize("status", [401, 403])
def test_fault_auth_failure_is_not_retried(
    status: int, workspace: Path, server_factory: Any
) -> None:
    server = server_factory(
        [
            HttpError(
                status, "authentication_error", "invalid x-api-key", {"x-should-retry": "false"}
            )
        ]
    )
    result = _run(workspace, server.base_url)
    assert result.code == 1
    assert len(server.requests) == 1
    assert "authentication failed: check ANTHROPIC_API_KEY" in result.stdout
    assert result.events()[-1]["error"].startswith("authentication failed")


def test_fault_400_reports_the_apis_own_message(workspace: Path, server_factory: Any) -> None:
    server = server_factory([HttpError(400, "invalid_request_error", "max_tokens: too large")])
    result = _run(workspace, server.base_url)
    assert result.code == 1
    assert "invalid request: max_tokens: too large" in result.events()[-1]["error"]


def test_fault_unknown_model_404_names_the_model(workspace: Path) -> None:
    # Behind an endpoint without the Models API (a bare proxy) the model is not checked
    # first: the Messages API's 404 ends the run and names it.
    script = [HttpError(404, "not_found_error", "model: claude-nope", {"x-should-retry": "false"})]
    server = FakeAnthropic(script, models=None).start()
    try:
        result = _run(workspace, server.base_url, "--model", "claude-nope")
    finally:
        server.stop()
    assert result.code == 1
    assert "model not found: 'claude-nope'" in result.events()[-1]["error"]


def test_fault_max_tokens_inside_a_tool_use_is_not_run(
    workspace: Path, server_factory: Any
) -> None:
    cut = Stream(
        (Text("Reading."), ToolUse("toolu_cut", "read_file", {"path": "README.md" * 5})),
        stop_reason="max_tokens",
        incomplete_last_tool=True,
    )
    server = server_factory([cut, Stream((Text("I'll keep it short."),))])
    result = _run(workspace, server.base_url)
    assert result.code == 0, result.stderr
    events = result.events()
    assert not any(e["type"] == "tool_call_started" for e in events)  # never run
    answer = server.requests[1].body["messages"][-1]["content"][0]
    assert answer["tool_use_id"] == "toolu_cut"
    assert answer["is_error"] is True
    assert "max_tokens" in answer["content"]


def test_fault_max_tokens_in_a_text_answer_is_an_error(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("cut off mid"),), stop_reason="max_tokens")])
    result = _run(workspace, server.base_url, "--max-tokens", "5")
    assert result.code == 1
    assert "max_tokens (5)" in result.events()[-1]["error"]


# --- the tools -------------------------------------------------------------------------------


def test_fault_tool_input_against_the_schema_names_the_field(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(
        [
            Stream(
                (ToolUse("t1", "read_file", {"path": 5}), ToolUse("t2", "read_file", {})),
                stop_reason="tool_use",
            ),
            OK,
        ]
    )
    result = _run(workspace, server.base_url)
    assert result.code == 0, result.stderr
    results = server.requests[1].body["messages"][-1]["content"]
    assert results[0]["content"] == "invalid input for read_file at path: 5 is not of type 'string'"
    assert results[1]["content"] == "invalid input for read_file: 'path' is a required property"


def test_fault_read_file_attacks_get_error_results_and_the_run_goes_on(
    workspace: Path, server_factory: Any
) -> None:
    os.mkfifo(workspace / "fifo")
    (workspace / "escape").symlink_to("/etc/passwd")
    attacks = ["../x", "a/../../x", "/etc/passwd", "escape", "fifo", "nope\u0000.md", "."]
    calls = tuple(ToolUse(f"t{i}", "read_file", {"path": p}) for i, p in enumerate(attacks))
    server = server_factory([Stream(calls, stop_reason="tool_use"), OK])
    result = _run(workspace, server.base_url)
    assert result.code == 0, result.stderr
    results = server.requests[1].body["messages"][-1]["content"]
    assert all(r.get("is_error") for r in results)
    assert "root:" not in json.dumps(results)
    # The calls run side by side and finish in any order: read the answers by id.
    kind = {
        e["id"]: e["result"]["error_type"]
        for e in result.events()
        if e["type"] == "tool_call_finished"
    }
    assert [kind[f"t{i}"] for i in range(len(attacks))] == ["permission_error"] * 4 + [
        "invalid_input"
    ] * 3


def test_fault_unknown_tool_is_told_to_the_model(workspace: Path, server_factory: Any) -> None:
    server = server_factory([Stream((ToolUse("t1", "rm_rf", {}),), stop_reason="tool_use"), OK])
    result = _run(workspace, server.base_url)
    assert result.code == 0
    answer = server.requests[1].body["messages"][-1]["content"][0]["content"]
    tools = "read_file, list_dir, glob, grep, write_file, edit_file"
    assert answer == f"unknown tool 'rm_rf'; the tools are: {tools}"


# --- the CLI -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["run", "--goal", "  "], "--goal must not be empty"),
        (["run", "--goal", "x", "--max-steps", "0"], "--max-steps"),
        (["run", "--goal", "x", "--max-steps", "-3"], "--max-steps"),
        (["run", "--goal", "x", "--workspace", "/no/such/dir"], "--workspace"),
        (["run"], "--goal"),
        (["run", "--goal", "x", "--bogus"], "--bogus"),
        (["replay"], "RUN"),
    ],
)
def test_fault_bad_cli_input_is_a_one_line_usage_error(
    args: list[str], says: str, workspace: Path
) -> None:
    result = run_cli(args, workspace=workspace)
    assert result.code == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert says in result.stderr
    assert "Traceback" not in result.stderr
    assert not (workspace / ".ruizn").exists()


def test_fault_unwritable_log_dir_is_a_one_line_error(workspace: Path) -> None:
    blocker = workspace / "a-file"
    blocker.write_text("not a dir")
    result = run_cli(
        ["run", "--model", "test", "--goal", "x", "--log-dir", str(blocker)], workspace=workspace
    )
    assert result.code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "--log-dir" in result.stderr


# --- bad logs --------------------------------------------------------------------------------


def _good_log(workspace: Path) -> list[str]:
    result = run_cli(["run", "--model", "test", "--goal", "read README.md"], workspace=workspace)
    assert result.code == 0
    return result.log_path.read_text(encoding="utf-8").splitlines()


def _bad_logs(lines: list[str]) -> dict[str, tuple[str, str]]:
    first = json.loads(lines[0])
    other = dict(first, run_id="20990101-000000-ffffff")
    future = dict(json.loads(lines[1]), v=99)
    unknown = dict(json.loads(lines[1]), type="llm_telepathy")
    swapped = [lines[0], lines[2], lines[1], *lines[3:]]
    return {
        "empty file": ("", "empty"),
        "non-JSON line": ("\n".join([lines[0], "{not json", *lines[1:]]) + "\n", "line 2"),
        "unknown event type": (
            "\n".join([lines[0], json.dumps(unknown), *lines[2:]]) + "\n",
            "line 2: unknown event type 'llm_telepathy'",
        ),
        "future schema version": (
            "\n".join([lines[0], json.dumps(future), *lines[2:]]) + "\n",
            "line 2: schema version 99 is newer",
        ),
        "events out of seq order": ("\n".join(swapped) + "\n", "line 2: seq 3 does not follow 1"),
        "another run appended": (
            "\n".join([*lines, json.dumps(dict(other, seq=len(lines) + 1))]) + "\n",
            f"line {len(lines) + 1}: a second run_started",
        ),
        "not a ruizn log": ("hello world\nthis is a README\n", "line 1"),
    }


@pytest.mark.parametrize("command", ["replay", "resume"])
@pytest.mark.parametrize(
    "fault",
    [
        "empty file",
        "non-JSON line",
        "unknown event type",
        "future schema version",
        "events out of seq order",
        "another run appended",
        "not a ruizn log",
    ],
)
def test_fault_bad_log_is_a_one_line_error_naming_the_line(
    command: str, fault: str, workspace: Path
) -> None:
    text, says = _bad_logs(_good_log(workspace))[fault]
    bad = workspace / "bad.jsonl"
    bad.write_text(text, encoding="utf-8")
    result = run_cli([command, str(bad)], workspace=workspace, env=cli_env(None))
    assert result.code == 2, result.stdout
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert says in result.stderr
    assert bad.read_text(encoding="utf-8") == text  # nothing written
    if command == "resume":
        assert result.stdout == ""  # refused before anything ran
    # replay streams the transcript as it reads, like cat: lines before the bad one may show
