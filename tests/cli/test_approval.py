"""Approval without a terminal: the run stops awaiting_approval (exit 4) and waits in its log;
`ruizn resume --approve/--deny` decides from another shell. The real CLI, the real SDK, a
local Messages API server; stdin and stdout are pipes here, so nobody can be asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruizn.effects.runlog.reader import replay_file
from tests.cli.approval_helpers import events, of_type, tool_results, turns_model, write
from tests.cli.conftest import run_cli
from tests.fakeapi import ToolUse


def _stopped_run(workspace: Path, server_factory: Any, turns: Any) -> tuple[Any, Any]:
    server = server_factory(turns_model(turns))
    result = run_cli(["run", "--goal", "write it"], workspace=workspace, base_url=server.base_url)
    return server, result


def test_without_a_terminal_the_run_stops_awaiting_approval_and_the_file_is_untouched(
    workspace: Path, server_factory: Any
) -> None:
    server, result = _stopped_run(
        workspace, server_factory, [[write("toolu_w1", "notes.txt", "hello\n")]]
    )
    assert result.code == 4, result.stderr
    assert not (workspace / "notes.txt").exists()
    assert len(server.requests) == 1
    # stdout is the transcript; stderr names each waiting call by id and says what to do
    assert '[approval] needed · toolu_w1 · write_file {"path": "notes.txt"' in result.stdout
    assert "[run] awaiting_approval · 1 step" in result.stdout
    run_id = result.log_path.parent.name
    assert "1 tool call awaits approval:" in result.stderr
    assert '  toolu_w1  write_file {"path": "notes.txt", "content": "hello\\n"}' in result.stderr
    assert f"ruizn resume {run_id} --approve ID|all" in result.stderr
    # the log holds the request and a run_finished that says what it waits for
    log = events(result.log_path)
    assert log[0]["settings"]["approval"] == "ask"
    assert [e["type"] for e in log[-2:]] == ["tool_approval_requested", "run_finished"]
    assert log[-2] == {**log[-2], "id": "toolu_w1", "name": "write_file"}
    assert log[-1]["status"] == "awaiting_approval"
    assert not of_type(result.log_path, "tool_call_started")
    state = replay_file(result.log_path).state
    assert [c.id for c in state.awaiting_approval] == ["toolu_w1"]
    # replay prints what the live run printed, byte for byte
    replayed = run_cli(["replay", run_id], workspace=workspace)
    assert replayed.stdout == result.stdout
    # runs and show say so, and show lists the waiting call
    runs = run_cli(["runs"], workspace=workspace)
    assert any(run_id in line and "awaiting_approval" in line for line in runs.stdout.splitlines())
    shown = run_cli(["show", run_id], workspace=workspace)
    assert "status:    awaiting_approval" in shown.stdout
    assert "awaiting:  1 tool call" in shown.stdout
    assert "toolu_w1  write_file" in shown.stdout


def test_resume_approve_all_writes_the_file_and_logs_who_allowed_it(
    workspace: Path, server_factory: Any
) -> None:
    server, stopped = _stopped_run(
        workspace, server_factory, [[write("toolu_w1", "notes.txt", "hello\n")]]
    )
    assert stopped.code == 4, stopped.stderr
    run_id = stopped.log_path.parent.name
    resumed = run_cli(
        ["resume", run_id, "--approve", "all"], workspace=workspace, base_url=server.base_url
    )
    assert resumed.code == 0, resumed.stderr
    assert (workspace / "notes.txt").read_text() == "hello\n"
    decided = of_type(stopped.log_path, "tool_approval_decided")
    assert [(d["id"], d["approved"], d["by"], d["reason"]) for d in decided] == [
        ("toolu_w1", True, "user", None)
    ]
    assert "[approval] approved · toolu_w1 · by user" in resumed.stdout
    assert "[run] success" in resumed.stdout
    results = tool_results(server.requests[-1].body)
    assert results["toolu_w1"]["content"] == "created notes.txt (6 bytes)"
    assert len(of_type(stopped.log_path, "tool_call_started")) == 1


def test_resume_deny_all_with_a_reason_gives_the_model_a_denied_result(
    workspace: Path, server_factory: Any
) -> None:
    server, stopped = _stopped_run(
        workspace, server_factory, [[write("toolu_w1", "notes.txt", "hello\n")]]
    )
    run_id = stopped.log_path.parent.name
    resumed = run_cli(
        ["resume", run_id, "--deny", "all", "--reason", "not in this repo"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert resumed.code == 0, resumed.stderr
    assert not (workspace / "notes.txt").exists()
    result = tool_results(server.requests[-1].body)["toolu_w1"]
    assert result["is_error"] is True
    assert result["content"] == (
        "write_file was not run: the user denied this call. Reason: not in this repo"
    )
    (finished,) = of_type(stopped.log_path, "tool_call_finished")
    assert finished["result"]["error_type"] == "denied"
    (decided,) = of_type(stopped.log_path, "tool_approval_decided")
    assert (decided["approved"], decided["by"], decided["reason"]) == (
        False,
        "user",
        "not in this repo",
    )
    assert not of_type(stopped.log_path, "tool_call_started")


def test_deciding_a_call_that_is_not_pending_is_one_line_exit_2_and_writes_nothing(
    workspace: Path, server_factory: Any
) -> None:
    server, stopped = _stopped_run(
        workspace, server_factory, [[write("toolu_w1", "notes.txt", "hello\n")]]
    )
    before = stopped.log_path.read_bytes()
    run_id = stopped.log_path.parent.name
    for args, says in (
        (["--approve", "toolu_nope"], "'toolu_nope' is not a tool call awaiting approval"),
        (["--deny", "toolu_nope"], "'toolu_nope' is not a tool call awaiting approval"),
        (["--approve", "toolu_w1", "--deny", "toolu_w1"], "both --approve and --deny"),
        (["--reason", "why"], "--reason goes with --deny"),
    ):
        refused = run_cli(["resume", run_id, *args], workspace=workspace, base_url=server.base_url)
        assert refused.code == 2, (args, refused.stderr)
        assert refused.stderr.startswith("ruizn: error: ")
        assert refused.stderr.count("\n") == 1, refused.stderr
        assert says in refused.stderr
        assert "awaiting: toolu_w1" in refused.stderr or "not a tool call" not in says
        assert stopped.log_path.read_bytes() == before
    assert len(server.requests) == 1
    # once decided, the same id is no longer pending
    assert (
        run_cli(
            ["resume", run_id, "--approve", "toolu_w1"],
            workspace=workspace,
            base_url=server.base_url,
        ).code
        == 0
    )
    after = stopped.log_path.read_bytes()
    again = run_cli(
        ["resume", run_id, "--approve", "toolu_w1"], workspace=workspace, base_url=server.base_url
    )
    assert again.code == 2, again.stderr
    assert "finished with success: no call awaits approval" in again.stderr
    assert stopped.log_path.read_bytes() == after


def test_resume_without_a_decision_and_without_a_terminal_stops_again(
    workspace: Path, server_factory: Any
) -> None:
    server, stopped = _stopped_run(
        workspace, server_factory, [[write("toolu_w1", "notes.txt", "hello\n")]]
    )
    run_id = stopped.log_path.parent.name
    again = run_cli(["resume", run_id], workspace=workspace, base_url=server.base_url)
    assert again.code == 4, again.stderr
    assert "toolu_w1  write_file" in again.stderr
    assert len(of_type(stopped.log_path, "tool_approval_requested")) == 1  # not asked twice
    assert len(server.requests) == 1


def test_parallel_calls_are_decided_one_by_one_and_merge_in_tool_use_order(
    workspace: Path, server_factory: Any
) -> None:
    turn = [
        write("toolu_a", "a.txt", "A\n"),
        ToolUse("toolu_r", "read_file", {"path": "README.md"}),
        write("toolu_b", "b.txt", "B\n"),
        ToolUse("toolu_e", "edit_file", {"path": "README.md", "old_text": "Demo", "new_text": "X"}),
    ]
    server, stopped = _stopped_run(workspace, server_factory, [turn])
    assert stopped.code == 4, stopped.stderr
    requested = [e["id"] for e in of_type(stopped.log_path, "tool_approval_requested")]
    assert requested == ["toolu_a", "toolu_b", "toolu_e"]  # read_file needs none
    assert "3 tool calls await approval:" in stopped.stderr
    run_id = stopped.log_path.parent.name
    resumed = run_cli(
        ["resume", run_id, "--deny", "toolu_b", "--approve", "all", "--reason", "no b"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert resumed.code == 0, resumed.stderr
    assert (workspace / "a.txt").read_text() == "A\n"
    assert not (workspace / "b.txt").exists()
    assert (workspace / "README.md").read_text().startswith("# X")
    last = server.requests[-1].body["messages"][-1]["content"]
    assert [b["tool_use_id"] for b in last] == ["toolu_a", "toolu_r", "toolu_b", "toolu_e"]
    assert [b.get("is_error", False) for b in last] == [False, False, True, False]
    assert "Reason: no b" in last[2]["content"]
    started = [e["id"] for e in of_type(stopped.log_path, "tool_call_started")]
    assert sorted(started) == ["toolu_a", "toolu_e", "toolu_r"]


def test_approval_always_says_so_first_and_approves_by_policy(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(turns_model([[write("toolu_w1", "notes.txt", "hi\n")]]))
    result = run_cli(
        ["run", "--goal", "write", "--approval", "always"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first == "[run] approval: always · every tool call is approved without asking"
    assert (workspace / "notes.txt").read_text() == "hi\n"
    log = events(result.log_path)
    assert log[0]["settings"]["approval"] == "always"
    (decided,) = of_type(result.log_path, "tool_approval_decided")
    assert (decided["approved"], decided["by"]) == (True, "policy")


def test_approval_never_denies_by_policy_and_the_run_goes_on(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(turns_model([[write("toolu_w1", "notes.txt", "hi\n")]]))
    result = run_cli(
        ["run", "--goal", "write", "--approval", "never"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("[run] approval: never")
    assert not (workspace / "notes.txt").exists()
    (decided,) = of_type(result.log_path, "tool_approval_decided")
    assert (decided["approved"], decided["by"]) == (False, "policy")
    denied = tool_results(server.requests[-1].body)["toolu_w1"]
    assert denied["is_error"] is True
    assert "the approval policy denied this call" in denied["content"]


def test_a_bad_approval_mode_is_a_usage_error(workspace: Path) -> None:
    result = run_cli(
        ["run", "--model", "test", "--goal", "x", "--approval", "sometimes"], workspace=workspace
    )
    assert result.code == 2
    assert "--approval" in result.stderr
    assert not (workspace / ".ruizn").exists()


def test_an_approved_call_is_still_refused_by_the_sandbox(
    workspace: Path, server_factory: Any
) -> None:
    turn = [
        write("toolu_up", "../escape.txt", "x"),
        write("toolu_env", ".env", "KEY=1"),
        write("toolu_log", ".ruizn/runs/evil.txt", "x"),
    ]
    server = server_factory(turns_model([turn]))
    result = run_cli(
        ["run", "--goal", "escape", "--approval", "always"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    assert len(of_type(result.log_path, "tool_approval_decided")) == 3  # all approved...
    results = tool_results(server.requests[-1].body)
    for call_id in ("toolu_up", "toolu_env", "toolu_log"):
        assert results[call_id]["is_error"] is True, results[call_id]  # ...none written
    finished = {
        e["id"]: e["result"]["error_type"] for e in of_type(result.log_path, "tool_call_finished")
    }
    assert set(finished.values()) == {"permission_error"}
    assert not (workspace.parent / "escape.txt").exists()
    assert not (workspace / ".env").exists()
    assert not (workspace / ".ruizn" / "runs" / "evil.txt").exists()
