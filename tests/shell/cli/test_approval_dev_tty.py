"""`echo GOAL | ruizn run` at a terminal: stdin is a pipe, but the process has a terminal,
and ruizn asks there (/dev/tty), as git, ssh and sudo do. With no terminal at all, the run
stops awaiting approval (exit 4), as before.

The CLI runs with a pseudo-terminal as its controlling terminal, stdout and stderr, and a
pipe as its stdin, as in `echo 'edit README' | ruizn run` typed in a shell."""

from __future__ import annotations

import fcntl
import os
import subprocess
import termios
from pathlib import Path
from typing import Any

from tests.fakeapi import ToolUse
from tests.shell.cli.approval_helpers import of_type, turns_model
from tests.shell.cli.conftest import cli_env, ruizn_command
from tests.shell.cli.test_approval_terminal import PROMPT, Terminal

EDIT = ToolUse(
    "toolu_e1", "edit_file", {"path": "README.md", "old_text": "small", "new_text": "tiny"}
)


def _stdout_is_the_terminal() -> None:
    # In the child, after setsid: the pty on fd 1 becomes its controlling terminal (stdin is
    # the pipe), which is what /dev/tty then opens.
    fcntl.ioctl(1, termios.TIOCSCTTY, 0)


class PipedTerminal(Terminal):
    """A terminal that shows the run, with the goal piped into stdin."""

    def __init__(self, args: list[str], workspace: Path, env: dict[str, str], goal: str) -> None:
        master, slave = os.openpty()
        self.proc = subprocess.Popen(
            [*ruizn_command(), *args],
            cwd=workspace,
            env=env,
            stdin=subprocess.PIPE,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=_stdout_is_the_terminal,  # noqa: PLW1509 - the test's own child
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(goal.encode())
        self.proc.stdin.close()  # the goal is all of stdin
        os.close(slave)
        self.master = master
        self.seen = bytearray()
        self._closed = False


def _log(workspace: Path) -> Path:
    (log,) = (workspace / ".ruizn" / "runs").glob("*/events.jsonl")
    return log


def test_a_piped_goal_is_approved_at_the_terminal(workspace: Path, server_factory: Any) -> None:
    server = server_factory(turns_model([[EDIT]]))
    term = PipedTerminal(
        ["run"], workspace, cli_env(server.base_url, COLUMNS="200"), "edit the README"
    )
    shown = term.expect(PROMPT)
    assert "[approval] edit_file · toolu_e1\n--- a/README.md\n+++ b/README.md\n" in shown
    term.type(b"y\n")
    assert term.finish() == 0, term.text
    assert (workspace / "README.md").read_text() == "# Demo\n\nA tiny demo project.\n"
    (decided,) = of_type(_log(workspace), "tool_approval_decided")
    assert (decided["approved"], decided["by"]) == (True, "user")
    assert of_type(_log(workspace), "run_started")[0]["goal"] == "edit the README"


def test_a_denial_at_the_terminal_reaches_the_model(workspace: Path, server_factory: Any) -> None:
    server = server_factory(turns_model([[EDIT]]))
    term = PipedTerminal(["run"], workspace, cli_env(server.base_url, COLUMNS="200"), "edit")
    term.expect(PROMPT)
    term.type(b"n not today\n")
    assert term.finish() == 0, term.text
    assert (workspace / "README.md").read_text() == "# Demo\n\nA small demo project.\n"
    assert "[approval] denied · toolu_e1 · by user: not today" in term.text


def test_with_no_terminal_at_all_the_run_waits_for_resume(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(turns_model([[EDIT]]))
    done = subprocess.run(
        [*ruizn_command(), "run"],
        cwd=workspace,
        env=cli_env(server.base_url),
        input="edit the README",
        capture_output=True,
        text=True,
        start_new_session=True,  # no controlling terminal: /dev/tty cannot be opened
        timeout=60,
        check=False,
    )
    assert done.returncode == 4, done.stderr
    assert "awaits approval" in done.stderr
    assert (workspace / "README.md").read_text() == "# Demo\n\nA small demo project.\n"
