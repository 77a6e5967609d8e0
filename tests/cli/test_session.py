"""`ruizn chat` at a real pseudo-terminal: a person types messages and slash commands, the
session is one run whose log replays to its final state, Ctrl-C cancels only the turn, and
the input history survives a restart without a secret in it. The screen is read through
pyte, a terminal emulator, since prompt_toolkit draws its line with escape sequences."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyte

from ruizn.effects.runlog.reader import replay_file
from ruizn.state import Status
from tests.cli.conftest import cli_env, only_log, read_events
from tests.cli.terminals import Terminal
from tests.fakeapi import Reply, Stream, Text, ToolUse

KEY = "sk-ant-session-test-secret-0123456789"


def _screen(term: Terminal, columns: int = 200, rows: int = 60) -> str:
    screen = pyte.Screen(columns, rows)
    stream = pyte.ByteStream(screen)
    stream.feed(bytes(term.seen))
    return "\n".join(line.rstrip() for line in screen.display)


def _wait(term: Terminal, text: str, count: int = 1, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while _screen(term).count(text) < count:
        assert time.monotonic() < deadline, f"{text!r} not shown in time:\n{_screen(term)}"
        if not term._read(0.2):
            raise AssertionError(f"the CLI ended before showing {text!r}:\n{_screen(term)}")


def _prompt(term: Terminal, count: int = 1) -> None:
    """Wait for the count-th empty input line (prompt_toolkit's `> `)."""
    deadline = time.monotonic() + 90  # generous: a loaded machine starts a process slowly
    while sum(line == ">" for line in _screen(term).splitlines()) < count:
        assert time.monotonic() < deadline, f"no prompt in time:\n{_screen(term)}"
        if not term._read(0.2):
            raise AssertionError(f"the CLI ended before its prompt:\n{_screen(term)}")


def _echo(body: dict[str, Any], _index: int) -> Reply:
    """The answer names the person's last words; a message asking to sleep runs a command."""
    last = body["messages"][-1]["content"]
    texts = (
        [b["text"] for b in last if b.get("type") == "text"] if isinstance(last, list) else [last]
    )
    said = texts[-1] if texts else "(results)"
    if said.startswith("sleep") and not any(b.get("type") == "tool_result" for b in last):
        return Stream(
            (ToolUse("toolu_s1", "bash", {"command": "sleep 30"}),), stop_reason="tool_use"
        )
    return Stream((Text(f"Answer to: {said} ({body['model']})"),))


def _env(server: Any, home: Path) -> dict[str, str]:
    return cli_env(
        server.base_url,
        COLUMNS="200",
        LINES="60",
        XDG_STATE_HOME=str(home),
        SESSION_KEY=KEY,
        # the test's terminal answers no cursor position request (a person's does)
        PROMPT_TOOLKIT_NO_CPR="1",
    )


def test_a_three_message_session_is_one_run_that_replays_and_model_changes_are_logged(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(_echo)
    term = Terminal([], workspace, _env(server, tmp_path / "state"))  # `ruizn` alone
    try:
        _prompt(term)
        term.type(b"first question\r")
        _wait(term, "Answer to: first question")
        term.type(b"/model claude-opus-4-6\r")
        _wait(term, "from the next message on")
        term.type(b"second question\r")
        _wait(term, "Answer to: second question (claude-opus-4-6)")
        term.type(b"third question\r")
        _wait(term, "Answer to: third question (claude-opus-4-6)")
        term.type(b"\x04")  # Ctrl-D ends the session
        assert term.finish() == 0, _screen(term)
    finally:
        term.close()
    log = only_log(workspace)
    kinds = [e["type"] for e in read_events(log)]
    assert kinds.count("run_started") == 1
    assert kinds.count("user_message") == 2
    (changed,) = [e for e in read_events(log) if e["type"] == "settings_changed"]
    assert changed["model"] == "claude-opus-4-6"
    models = [r.body["model"] for r in server.requests]
    assert models[0] != "claude-opus-4-6"
    assert models[1:] == ["claude-opus-4-6", "claude-opus-4-6"]
    state = replay_file(log).state
    assert state.status is Status.SUCCESS
    assert state.settings.model == "claude-opus-4-6"
    assert len([m for m in state.messages if m.role == "user"]) == 3


def test_ctrl_c_during_a_command_cancels_only_the_turn(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(_echo)
    term = Terminal(
        ["chat", "--shell", "--approval", "always", "--sandbox", "off"],
        workspace,
        _env(server, tmp_path / "state"),
    )
    try:
        _prompt(term)
        term.type(b"sleep a while\r")
        _wait(term, "[tool] bash")
        time.sleep(0.5)
        term.type(b"\x03")  # Ctrl-C: the turn ends, the session stays
        _wait(term, "turn cancelled")
        term.type(b"and now?\r")
        _wait(term, "Answer to: and now?")
        term.type(b"/exit\r")
        assert term.finish() == 0, _screen(term)
    finally:
        term.close()
    events = read_events(only_log(workspace))
    finished = [e for e in events if e["type"] == "tool_call_finished"]
    assert [f["result"]["error_type"] for f in finished] == ["interrupted"]
    assert [e["status"] for e in events if e["type"] == "run_finished"] == [
        "cancelled",
        "success",
    ]
    assert replay_file(only_log(workspace)).state.status is Status.SUCCESS


def test_history_survives_a_restart_and_holds_no_secret(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(_echo)
    state = tmp_path / "state"
    term = Terminal(["chat"], workspace, _env(server, state))
    try:
        _prompt(term)
        term.type(f"use {KEY} and API_TOKEN=hunter2hunter2 please\r".encode())
        _wait(term, "Answer to:")
        term.type(b"\x04")
        assert term.finish() == 0
    finally:
        term.close()
    files = [p for p in state.rglob("*") if p.is_file() and "history" in p.name]
    assert files, list(state.rglob("*"))
    kept = files[0].read_text()
    assert KEY not in kept
    assert "hunter2hunter2" not in kept
    assert "API_TOKEN=[redacted]" in kept
    # a new session on the same run (`last`) finds the line again with the up arrow
    run_id = only_log(workspace).parent.name
    term = Terminal(["chat", "last"], workspace, _env(server, state))
    try:
        _prompt(term)
        assert f"session on run {run_id}" in _screen(term)
        term.type(b"\x1b[A")
        _wait(term, "API_TOKEN=[redacted] please")
        term.type(b"\x03\x04")  # Ctrl-C clears the line, Ctrl-D leaves
        term.finish()
    finally:
        term.close()


def test_chat_needs_a_terminal_and_says_so(workspace: Path) -> None:
    from tests.cli.conftest import run_cli

    done = run_cli(["chat"], workspace=workspace)
    assert done.code == 2
    assert done.stderr.strip() == (
        "ruizn: error: ruizn chat needs a terminal: use `ruizn run GOAL` or"
        " `ruizn continue RUN MESSAGE`"
    )


ANSWER = "# Plan\n\n- read **README.md**\n- fix it\n\n```python\nprint('done')\n```\n"


def test_an_answer_is_drawn_as_markdown_at_a_terminal_and_left_as_written_when_piped(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    from tests.cli.conftest import run_cli

    server = server_factory(lambda _body, _index: Stream((Text(ANSWER),)))
    env = _env(server, tmp_path / "state")
    del env["NO_COLOR"]  # a person's terminal, in colour
    term = Terminal(["run", "--goal", "plan"], workspace, env, size=(100, 40))
    try:
        assert term.finish() == 0
        screen = _screen(term, 100, 40)
    finally:
        term.close()
    assert screen.count("print('done')") == 1  # drawn again in place, not twice
    assert "# Plan" not in screen  # the heading drawn, not its source
    assert "Plan" in screen
    assert "• read README.md" in screen
    assert "print('done')" in screen
    assert "```" not in screen
    piped = run_cli(["run", "--goal", "plan"], workspace=workspace, base_url=server.base_url)
    assert ANSWER in piped.stdout  # piped: the text as the model wrote it


def test_agents_lists_the_subagents_a_session_offers(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "reviewer.md").write_text(
        "---\nname: reviewer\ndescription: Reviews a diff for bugs\n---\nYou review diffs.\n"
    )
    server = server_factory(_echo)
    term = Terminal(["chat", "--agents", str(agents)], workspace, _env(server, tmp_path / "s"))
    try:
        _prompt(term)
        term.type(b"/agents\r")
        _wait(term, "reviewer: Reviews a diff for bugs")
        assert "general:" in _screen(term)  # the built-in agent beside the file's
        term.type(b"/exit\r")
        assert term.finish() == 0
    finally:
        term.close()
