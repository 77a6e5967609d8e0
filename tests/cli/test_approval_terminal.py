"""Approval at a real terminal: the CLI runs with a pseudo-terminal as its controlling
terminal and its stdin, stdout and stderr, as in a person's shell. The test reads what it
shows and types answers; Ctrl-C is the byte ^C, which the terminal turns into SIGINT."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruizn.effects.runlog.reader import replay_file
from tests.cli.approval_helpers import events, of_type, tool_results, turns_model, write
from tests.cli.conftest import cli_env, only_log, run_cli
from tests.cli.terminals import PROMPT, Terminal
from tests.fakeapi import ToolUse


def _start(args: list[str], workspace: Path, server: Any) -> Terminal:
    return Terminal(args, workspace, cli_env(server.base_url, COLUMNS="200"))


def test_y_approves_after_showing_the_diff_and_a_bad_answer_asks_again(
    workspace: Path, server_factory: Any
) -> None:
    edit = ToolUse(
        "toolu_e1", "edit_file", {"path": "README.md", "old_text": "small", "new_text": "tiny"}
    )
    server = server_factory(turns_model([[edit]]))
    term = _start(["run", "--goal", "edit"], workspace, server)
    shown = term.expect(PROMPT)
    # the unified diff of what would change, then the question
    assert "[approval] edit_file · toolu_e1\n--- a/README.md\n+++ b/README.md\n" in shown
    assert "\n-A small demo project.\n+A tiny demo project.\n" in shown
    assert (workspace / "README.md").read_text() == "# Demo\n\nA small demo project.\n"
    term.type(b"maybe\n")
    term.expect("please answer y, n (or n REASON) or a")
    term.type(b"y\n")
    assert term.finish() == 0, term.text
    assert (workspace / "README.md").read_text() == "# Demo\n\nA tiny demo project.\n"
    assert "[approval] approved · toolu_e1 · by user" in term.text
    (decided,) = of_type(only_log(workspace), "tool_approval_decided")
    assert (decided["approved"], decided["by"], decided["always"]) == (True, "user", False)


def test_n_denies_and_the_model_hears_the_reason(workspace: Path, server_factory: Any) -> None:
    server = server_factory(turns_model([[write("toolu_w1", "notes.txt", "hello\n")]]))
    term = _start(["run", "--goal", "write"], workspace, server)
    shown = term.expect(PROMPT)
    assert "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1 @@\n+hello\n" in shown
    term.type(b"n keep the tree clean\n")
    assert term.finish() == 0, term.text
    assert not (workspace / "notes.txt").exists()
    result = tool_results(server.requests[-1].body)["toolu_w1"]
    assert result["is_error"] is True
    assert result["content"].endswith("the user denied this call. Reason: keep the tree clean")
    assert "[approval] denied · toolu_w1 · by user: keep the tree clean" in term.text
    assert of_type(only_log(workspace), "tool_call_finished")[0]["result"]["error_type"] == "denied"


def test_a_approves_the_tool_for_the_rest_of_the_run_by_the_always_rule(
    workspace: Path, server_factory: Any
) -> None:
    turns = [
        [write("toolu_1", "one.txt", "1\n"), write("toolu_2", "two.txt", "2\n")],
        [write("toolu_3", "three.txt", "3\n")],
    ]
    server = server_factory(turns_model(turns))
    term = _start(["run", "--goal", "write three"], workspace, server)
    term.expect(PROMPT)
    term.type(b"a\n")
    assert term.finish() == 0, term.text
    assert term.text.count(PROMPT) == 1  # asked once, for the first call
    for name, text in (("one.txt", "1\n"), ("two.txt", "2\n"), ("three.txt", "3\n")):
        assert (workspace / name).read_text() == text
    decided = of_type(only_log(workspace), "tool_approval_decided")
    assert [(d["id"], d["by"], d["always"]) for d in decided] == [
        ("toolu_1", "user", True),
        ("toolu_2", "always-rule", False),
        ("toolu_3", "always-rule", False),
    ]


def test_ctrl_c_at_the_prompt_cancels_the_run_and_resume_asks_again(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(turns_model([[write("toolu_w1", "notes.txt", "hello\n")]]))
    term = _start(["run", "--goal", "write"], workspace, server)
    term.expect(PROMPT)
    term.type(b"\x03")  # ^C: the terminal sends SIGINT
    assert term.finish() == 130, term.text
    log = only_log(workspace)
    assert events(log)[-1]["status"] == "cancelled"
    state = replay_file(log).state  # the log is whole and valid
    assert [c.id for c in state.awaiting_approval] == ["toolu_w1"]
    assert not (workspace / "notes.txt").exists()
    run_id = log.parent.name
    shown = run_cli(["show", run_id], workspace=workspace)
    assert "toolu_w1  write_file" in shown.stdout

    again = _start(["resume", run_id], workspace, server)
    again.expect(PROMPT)
    again.type(b"y\n")
    assert again.finish() == 0, again.text
    assert (workspace / "notes.txt").read_text() == "hello\n"
    assert len(of_type(log, "tool_approval_requested")) == 1
    assert len(of_type(log, "tool_call_started")) == 1


def test_kill_9_at_the_prompt_then_resume_the_same_calls_wait_and_nothing_runs_twice(
    workspace: Path, server_factory: Any
) -> None:
    turns = [
        [
            write("toolu_a", "a.txt", "A\n"),
            ToolUse("toolu_r", "read_file", {"path": "README.md"}),
            write("toolu_b", "b.txt", "B\n"),
        ]
    ]
    server = server_factory(turns_model(turns))
    term = _start(["run", "--goal", "write two"], workspace, server)
    term.expect(PROMPT)
    term.type(b"y\n")  # toolu_a approved (fsynced), then killed while asking about toolu_b
    term.expect(PROMPT, count=2)
    term.proc.kill()
    term.finish()
    log = only_log(workspace)
    assert not any(e["type"] == "run_finished" for e in events(log))  # killed: no last word
    assert not (workspace / "a.txt").exists()  # nothing ran before every call was decided
    run_id = log.parent.name

    waiting = run_cli(["resume", run_id], workspace=workspace, base_url=server.base_url)
    assert waiting.code == 4, waiting.stderr
    assert "1 tool call awaits approval:" in waiting.stderr
    assert "toolu_b  write_file" in waiting.stderr
    assert [c.id for c in replay_file(log).state.awaiting_approval] == ["toolu_b"]

    done = run_cli(
        ["resume", run_id, "--approve", "all"], workspace=workspace, base_url=server.base_url
    )
    assert done.code == 0, done.stderr
    assert (workspace / "a.txt").read_text() == "A\n"
    assert (workspace / "b.txt").read_text() == "B\n"
    requested = [e["id"] for e in of_type(log, "tool_approval_requested")]
    assert requested == ["toolu_a", "toolu_b"]  # asked for once each, across three processes
    started = [e["id"] for e in of_type(log, "tool_call_started")]
    assert sorted(started) == ["toolu_a", "toolu_b", "toolu_r"]  # each ran exactly once
    decided = [(e["id"], e["by"]) for e in of_type(log, "tool_approval_decided")]
    assert decided == [("toolu_a", "user"), ("toolu_b", "user")]
