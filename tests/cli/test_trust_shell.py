"""A planted log's shell loosening (`--sandbox off`, `--allow-command` patterns) is never
applied by `resume --trust` with no terminal, and at a terminal it is shown and asked about
on its own: the pending call it would approve runs unconfined only after a person's yes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ruizn.effects.runlog.reader import replay_file
from tests.cli.approval_helpers import of_type, turns_model
from tests.cli.conftest import cli_env, run_cli
from tests.cli.terminals import PROMPT, Terminal
from tests.fakeapi import ToolUse


def _planted(workspace: Path, server_factory: Any) -> tuple[Path, Path, Any]:
    """A run stopped with a bash call waiting, whose log is then changed to approve it by
    a pattern (as anyone who can write the folder could): ruizn no longer vouches for it."""
    outside = workspace.parent / "outside.txt"
    call = ToolUse("toolu_t", "bash", {"command": f"touch {outside}"})
    server = server_factory(turns_model([[call]]))
    stopped = run_cli(
        ["run", "--shell", "--sandbox", "off", "--allow-command", "nothing *", "go"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert stopped.code == 4, stopped.stderr
    log = stopped.log_path
    lines = log.read_text().splitlines()
    first = json.loads(lines[0])
    first["settings"]["allow_commands"] = ["touch *"]
    lines[0] = json.dumps(first)
    log.write_text("\n".join(lines) + "\n")
    return log, outside, server


def test_resume_trust_with_no_terminal_applies_neither_sandbox_off_nor_patterns(
    workspace: Path, server_factory: Any
) -> None:
    log, outside, server = _planted(workspace, server_factory)
    trusted = run_cli(["resume", "last", "--trust"], workspace=workspace, base_url=server.base_url)
    assert trusted.code == 4, trusted.stderr  # the call waits for a person: no pattern
    assert "--allow-command patterns are not applied" in trusted.stderr
    assert not outside.exists()
    (resumed,) = of_type(log, "run_resumed")
    assert resumed["confine"] is True
    settings = replay_file(log).state.settings
    assert (settings.sandbox, settings.allow_commands) == (True, ())
    # The person approves the call now: it runs, in the sandbox (the log's `off` is gone).
    done = run_cli(
        ["resume", "last", "--approve", "all"], workspace=workspace, base_url=server.base_url
    )
    assert done.code == 0, done.stderr
    assert not outside.exists()


@pytest.mark.parametrize("answer", [b"n", b"y"])
def test_at_a_terminal_the_shell_loosening_is_shown_and_asked(
    workspace: Path, server_factory: Any, answer: bytes
) -> None:
    log, outside, server = _planted(workspace, server_factory)
    term = Terminal(["resume", "last"], workspace, cli_env(server.base_url, COLUMNS="200"))
    try:
        shown = term.expect("resume it with this? [y/N]")
        assert "bash commands UNCONFINED (--sandbox off); approved without asking: touch *" in shown
        term.type(b"y\n")
        term.expect("apply the log's shell settings: bash commands UNCONFINED (--sandbox off);")
        term.type(answer + b"\n")
        if answer == b"n":
            shown = term.expect(PROMPT)  # no pattern approves the call: a person is asked
            assert "$ touch " in shown
            term.type(b"n\n")
        assert term.finish() == 0, term.text
    finally:
        term.close()
    assert outside.exists() is (answer == b"y")
    (resumed,) = of_type(log, "run_resumed")
    assert resumed.get("confine", False) is (answer == b"n")
