"""`echo GOAL | ruizn run` at a terminal: stdin is a pipe, but the process has a terminal,
and ruizn asks there (/dev/tty), as git, ssh and sudo do. With no terminal at all, the run
stops awaiting approval (exit 4), as before.

The CLI runs with a pseudo-terminal as its controlling terminal, stdout and stderr, and a
pipe as its stdin, as in `echo 'edit README' | ruizn run` typed in a shell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cli.approval_helpers import of_type, turns_model
from tests.cli.conftest import cli_env, only_log, run_cli
from tests.cli.terminals import PROMPT, Terminal
from tests.fakeapi import ToolUse

EDIT = ToolUse(
    "toolu_e1", "edit_file", {"path": "README.md", "old_text": "small", "new_text": "tiny"}
)


def test_a_piped_goal_is_approved_at_the_terminal(workspace: Path, server_factory: Any) -> None:
    server = server_factory(turns_model([[EDIT]]))
    term = Terminal(
        ["run"], workspace, cli_env(server.base_url, COLUMNS="200"), goal="edit the README"
    )
    shown = term.expect(PROMPT)
    assert "[approval] edit_file · toolu_e1\n--- a/README.md\n+++ b/README.md\n" in shown
    term.type(b"y\n")
    assert term.finish() == 0, term.text
    assert (workspace / "README.md").read_text() == "# Demo\n\nA tiny demo project.\n"
    (decided,) = of_type(only_log(workspace), "tool_approval_decided")
    assert (decided["approved"], decided["by"]) == (True, "user")
    assert of_type(only_log(workspace), "run_started")[0]["goal"] == "edit the README"


def test_a_denial_at_the_terminal_reaches_the_model(workspace: Path, server_factory: Any) -> None:
    server = server_factory(turns_model([[EDIT]]))
    term = Terminal(["run"], workspace, cli_env(server.base_url, COLUMNS="200"), goal="edit")
    term.expect(PROMPT)
    term.type(b"n not today\n")
    assert term.finish() == 0, term.text
    assert (workspace / "README.md").read_text() == "# Demo\n\nA small demo project.\n"
    assert "[approval] denied · toolu_e1 · by user: not today" in term.text


def test_with_no_terminal_at_all_the_run_waits_for_resume(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(turns_model([[EDIT]]))
    done = run_cli(
        ["run"],
        workspace=workspace,
        base_url=server.base_url,
        input="edit the README",
        start_new_session=True,  # no controlling terminal: /dev/tty cannot be opened
    )
    assert done.code == 4, done.stderr
    assert "awaits approval" in done.stderr
    assert (workspace / "README.md").read_text() == "# Demo\n\nA small demo project.\n"
