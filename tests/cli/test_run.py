"""`ruizn run` end to end: the real CLI, the real SDK, a local Messages API server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli.conftest import normalise_log, normalise_stdout, run_cli
from tests.fakeapi import Stream, Text, ToolUse, Usage, tool_loop
from tests.golden.compare import check_golden
from tests.paths import TESTS


def _golden_run(name: str, result: Any, update: bool) -> None:
    folder = TESTS / "golden" / "cli" / name
    check_golden(folder / "stdout.txt", normalise_stdout(result.stdout), update=update)
    log = normalise_log(result.log_path.read_text(encoding="utf-8"), result.workspace)
    check_golden(folder / "events.jsonl", log, update=update)


def test_plain_answer_matches_goldens(
    workspace: Path, server_factory: Any, update_goldens: bool
) -> None:
    server = server_factory(
        [
            Stream(
                (Text("你好! ruizn streams this answer token by token."),),
                usage=Usage(input_tokens=120, output_tokens=14),
            )
        ]
    )
    result = run_cli(["run", "--goal", "say hello"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    assert result.stdout.startswith("你好! ruizn streams this answer token by token.\n")
    assert "[run] success · 1 step · " in result.stdout
    assert "log: .ruizn/runs/" in result.stderr or "log: " in result.stderr
    _golden_run("plain_answer", result, update_goldens)


def test_short_form_goal_is_run(workspace: Path, server_factory: Any) -> None:
    server = server_factory([Stream((Text("ok"),))])
    result = run_cli(["--goal", "say ok"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    assert result.stdout.startswith("ok\n[run] success")


def test_one_tool_call_then_answer(
    workspace: Path, server_factory: Any, update_goldens: bool
) -> None:
    server = server_factory(
        [
            Stream(
                (
                    Text("I'll read the file."),
                    ToolUse("toolu_01", "read_file", {"path": "README.md"}),
                ),
                stop_reason="tool_use",
                usage=Usage(input_tokens=300, output_tokens=40, cache_creation_input_tokens=1000),
            ),
            Stream(
                (Text("The README describes a small demo project."),),
                usage=Usage(
                    input_tokens=10,
                    output_tokens=12,
                    cache_read_input_tokens=1000,
                    cache_creation_input_tokens=100,
                ),
            ),
        ]
    )
    result = run_cli(
        ["run", "--goal", "读取当前目录下的 README.md"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "I'll read the file."
    assert lines[1] == '[tool] read_file {"path": "README.md"}'
    assert lines[2] == "[tool] read_file ok · 30 B"
    assert lines[3] == "The README describes a small demo project."
    # usage totals are the server's figures, summed over both steps
    assert "· in 2,410 tok (cache read 1,000) · out 52 tok" in lines[4]
    second = server.requests[1].body["messages"]
    assert second[-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",
                "content": "# Demo\n\nA small demo project.\n",
                "cache_control": {"type": "ephemeral"},
            }
        ],
    }
    _golden_run("one_tool_call", result, update_goldens)


def test_two_tool_calls_one_failing_share_one_user_message(
    workspace: Path, server_factory: Any, update_goldens: bool
) -> None:
    server = server_factory(
        [
            Stream(
                (
                    Text("Reading both."),
                    ToolUse("toolu_a", "read_file", {"path": "missing.txt"}),
                    ToolUse("toolu_b", "read_file", {"path": "README.md"}),
                ),
                stop_reason="tool_use",
                usage=Usage(input_tokens=50, output_tokens=30),
            ),
            Stream((Text("One file is missing."),), usage=Usage(input_tokens=80, output_tokens=5)),
        ]
    )
    result = run_cli(
        ["run", "--goal", "read both", "--tool-concurrency", "1"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    # The turn calls read_file twice: each line names the call by its id too.
    assert "[tool] read_file (toolu_a) error · not_found · " in result.stdout
    assert "[tool] read_file (toolu_b) ok · 30 B" in result.stdout
    messages = server.requests[1].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    results = messages[2]["content"]
    assert [r["tool_use_id"] for r in results] == ["toolu_a", "toolu_b"]
    assert results[0]["is_error"] is True
    assert "is_error" not in results[1]
    _golden_run("two_tools_one_failing", result, update_goldens)


def test_requests_carry_cache_breakpoints(workspace: Path, server_factory: Any) -> None:
    server = server_factory(tool_loop(3))
    result = run_cli(["run", "--goal", "loop"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    assert len(server.requests) == 4
    for recorded in server.requests:
        body = recorded.body
        assert body["stream"] is True
        assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        marks = json.dumps(body).count('"cache_control"')
        assert marks <= 4
    # the rolling breakpoint lets every step from the second on read the history
    log = result.events()
    usages = [e["usage"] for e in log if e["type"] == "llm_response"]
    assert all(u["cache_read_input_tokens"] > 0 for u in usages[1:])
    final = log[-1]
    total_in = sum(
        u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
        for u in usages
    )
    assert final["usage"]["cache_read_input_tokens"] == sum(
        u["cache_read_input_tokens"] for u in usages
    )
    assert f"in {total_in:,} tok" in result.stdout


def test_max_steps_reached_exits_3(workspace: Path, server_factory: Any) -> None:
    server = server_factory(tool_loop(10))
    result = run_cli(
        ["run", "--goal", "loop", "--max-steps", "2"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 3, result.stderr
    events = result.events()
    assert events[-1]["type"] == "run_finished"
    assert events[-1]["status"] == "max_steps"
    assert len(server.requests) == 2
    # the tools of the last step were still answered, so the log can be resumed
    assert events[-2]["type"] == "tool_call_finished"


def test_model_test_runs_offline(workspace: Path) -> None:
    result = run_cli(
        ["run", "--model", "test", "--goal", "读取当前目录下的 README.md"],
        workspace=workspace,
        base_url="http://127.0.0.1:9",  # nothing listens there: the test model must not call out
        env=None,
    )
    assert result.code == 0, result.stderr
    assert '[tool] read_file {"path": "README.md"}' in result.stdout
    assert "README.md: 30 bytes, 3 lines; it begins with '# Demo'." in result.stdout
    assert "[run] success · 2 steps" in result.stdout


def test_no_api_key_is_a_one_line_usage_error(workspace: Path) -> None:
    from tests.cli.conftest import cli_env

    env = cli_env(None)
    del env["ANTHROPIC_API_KEY"]
    result = run_cli(["run", "--goal", "hi"], workspace=workspace, env=env)
    assert result.code == 2
    assert result.stderr.strip().count("\n") == 0
    assert "ANTHROPIC_API_KEY" in result.stderr
    assert "--model test" in result.stderr
    assert not (workspace / ".ruizn").exists()


def test_log_dir_overrides_the_root(workspace: Path, tmp_path: Path) -> None:
    logs = tmp_path / "elsewhere"
    result = run_cli(
        ["run", "--model", "test", "--goal", "nothing", "--log-dir", str(logs)],
        workspace=workspace,
    )
    assert result.code == 0, result.stderr
    assert len(list(logs.glob("*/events.jsonl"))) == 1
    assert not (workspace / ".ruizn").exists()


def test_version_and_help(workspace: Path) -> None:
    version = run_cli(["--version"], workspace=workspace)
    assert version.code == 0
    assert "ruizn" in version.stdout
    help_ = run_cli(["run", "--help"], workspace=workspace)
    assert help_.code == 0
    for option in (
        "--goal",
        "--model",
        "--max-steps",
        "--max-tokens",
        "--system",
        "--workspace",
        "--log-dir",
    ):
        assert option in help_.stdout
