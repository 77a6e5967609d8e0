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
from tests.fakeapi import Compacted, Reply, Stream, Text, ToolUse

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


def _say(term: Terminal, keys: bytes, prompts: int = 1) -> None:
    """Type at the prompt once it is there: keys typed before prompt_toolkit reads them
    would meet the terminal's own line editing (^D, ^C are the terminal's then)."""
    _prompt(term, prompts)
    term.type(keys)


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
        _say(term, b"first question\r")
        _wait(term, "Answer to: first question")
        _say(term, b"/model claude-sonnet-4-6\r")
        _wait(term, "from the next message on")
        _say(term, b"second question\r")
        _wait(term, "Answer to: second question (claude-sonnet-4-6)")
        _say(term, b"third question\r")
        _wait(term, "Answer to: third question (claude-sonnet-4-6)")
        _say(term, b"\x04")  # Ctrl-D ends the session
        assert term.finish() == 0, _screen(term)
    finally:
        term.close()
    log = only_log(workspace)
    kinds = [e["type"] for e in read_events(log)]
    assert kinds.count("run_started") == 1
    assert kinds.count("user_message") == 2
    (changed,) = [e for e in read_events(log) if e["type"] == "settings_changed"]
    assert changed["model"] == "claude-sonnet-4-6"
    # what the Models API says of the new model: an older one, without the API's compaction
    assert changed["compaction"] == "client"
    models = [r.body["model"] for r in server.requests]
    assert models[0] != "claude-sonnet-4-6"
    assert models[1:] == ["claude-sonnet-4-6", "claude-sonnet-4-6"]
    state = replay_file(log).state
    assert state.status is Status.SUCCESS
    assert state.settings.model == "claude-sonnet-4-6"
    assert len([m for m in state.messages if m.role == "user"]) == 3


def test_history_survives_a_restart_and_holds_no_secret(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory(_echo)
    state = tmp_path / "state"
    term = Terminal(["chat"], workspace, _env(server, state))
    try:
        _prompt(term)
        _say(term, f"use {KEY} and API_TOKEN=hunter2hunter2 please\r".encode())
        _wait(term, "Answer to:")
        _say(term, b"\x04")
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
        _say(term, b"\x1b[A")
        _wait(term, "API_TOKEN=[redacted] please")
        term.type(b"\x03")  # Ctrl-C clears the line...
        _wait(term, "(Ctrl-C again, or Ctrl-D, to leave)")
        _say(term, b"\x04")  # ...and Ctrl-D at the empty line leaves
        assert term.finish() == 0
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
        _say(term, b"/agents\r")
        _wait(term, "reviewer: Reviews a diff for bugs")
        _wait(term, "general:")  # the built-in agent beside the file's (a later line: read it)
        _say(term, b"/exit\r")
        assert term.finish() == 0
    finally:
        term.close()


# Prints seven lines at once, one with an escape sequence, then waits (with them on the
# screen) until the test makes the file `go`, and fails: the live lines show the last five,
# escaped, then fold into exit 3.
COUNTING = (
    "for i in 1 2 3 4 5 6 7; do echo line$i; done; printf '\\033[2Jboom\\n';"
    " until [ -e go ]; do sleep 0.05; done; exit 3"
)


def _working(body: dict[str, Any], index: int) -> Reply:
    """_echo's answers and its command for "sleep...", a command for "count", a file
    edited for "write", a summary for a compaction."""
    if "compaction" in body:
        return Compacted()
    last = body["messages"][-1]["content"]
    texts = [last] if isinstance(last, str) else [b["text"] for b in last if "text" in b]
    if not texts:  # the results of its calls
        return Stream((Text("Done."),))
    said = texts[-1]
    if said == "count":
        return Stream((ToolUse("toolu_c1", "bash", {"command": COUNTING}),), stop_reason="tool_use")
    if said == "write":
        change = {"path": "notes.txt", "old_text": "old", "new_text": "new\nmore"}
        tool = ToolUse("toolu_w1", "edit_file", change)
        return Stream((tool,), stop_reason="tool_use")
    return _echo(body, index)


def test_a_session_with_commands_live_a_cancelled_turn_compact_and_rewind(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    """One session for all of it (a session costs seconds to start): Ctrl-C mid-command
    cancels only that turn; a command's last lines show as it runs (in the sandbox) and
    fold into its exit code; a file change shows its diff stat; /rewind asks, then restores
    the file; /compact logs the compaction and the session goes on; no resumed/user lines
    between the turns."""
    (workspace / "notes.txt").write_text("old\n")
    server = server_factory(_working)
    term = Terminal(
        ["chat", "--shell", "--approval", "always"], workspace, _env(server, tmp_path / "state")
    )
    try:
        _say(term, b"sleep a while\r")
        _wait(term, "[tool] bash")
        time.sleep(0.5)
        term.type(b"\x03")  # Ctrl-C: the turn ends, the session stays
        _wait(term, "turn cancelled")
        _say(term, b"count\r")
        _wait(term, "│ ␛[2Jboom")  # escaped, while the command still runs
        running = _screen(term)
        (workspace / "go").touch()
        assert "│ line7" in running
        assert "│ line4" in running
        assert "line3" not in running  # the last five lines only
        _wait(term, "[tool] bash exit 3 ·")  # a failing command shows its exit code
        _wait(term, "Done.")
        assert "│" not in _screen(term)  # the live lines gave way to the folded line
        _say(term, b"write\r")
        _wait(term, "[tool] edit_file ok · +2 -1")  # its diff stat
        _wait(term, "Done.", 2)
        assert (workspace / "notes.txt").read_text() == "new\nmore\n"
        _say(term, b"/rewind\r")
        _wait(term, "file changed")
        step = next(
            line.split()[1].rstrip(":")
            for line in _screen(term).splitlines()
            if line.strip().startswith("step ") and "file changed" in line
        )
        _say(term, f"/rewind --step {step}\r".encode())
        _wait(term, "rewind? [y/N]")
        term.type(b"y\r")
        _wait(term, "rewound;")
        assert (workspace / "notes.txt").read_text() == "old\n"
        _say(term, b"/compact keep the notes\r")
        _wait(term, "compacted: the next message goes on from the summary")
        _say(term, b"and after?\r")
        _wait(term, "Answer to: and after?")
        screen = _screen(term)
        _say(term, b"\x04")
        assert term.finish() == 0, _screen(term)
    finally:
        term.close()
    assert "[run] resumed" not in screen
    assert "[user]" not in screen
    assert "[files] saved" not in screen
    events = read_events(only_log(workspace))
    finished = [e["result"] for e in events if e["type"] == "tool_call_finished"]
    assert [r["error_type"] for r in finished] == ["interrupted", "exit_status", None]
    assert "line1" in str(finished[1]["content"])  # the log keeps the whole output
    statuses = [e["status"] for e in events if e["type"] == "run_finished"]
    assert statuses[0] == "cancelled"
    assert statuses[1:] == ["success"] * (len(statuses) - 1)
    assert [e["type"] for e in events].count("context_compacted") == 1
    assert replay_file(only_log(workspace)).state.status is Status.SUCCESS
    # the next message went on from the summary, made with the instructions given
    summary = server.requests[-1].body["messages"][0]["content"][0]
    assert summary["type"] == "compaction"
    assert "keep the notes" in summary["content"]


def test_rewind_takes_one_point_to_go_back_to() -> None:
    from ruizn.cli.session import _rewind_arguments

    assert _rewind_arguments("") == {}  # the steps that changed files are listed
    assert _rewind_arguments("--step 3") == {"to": None, "step": 3, "undo": False, "force": False}
    assert _rewind_arguments("--to 12 --force")["to"] == 12
    assert _rewind_arguments("--undo")["undo"] is True
    for wrong in ("--step", "--step 0", "--step x", "--to 3 --step 2", "--force", "now"):
        assert (
            _rewind_arguments(wrong) == "/rewind takes --step N, --to SEQ or --undo (and --force)"
        )
