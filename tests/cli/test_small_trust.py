"""The small ones of #28: an unwritable state folder, numbers in a log, a copy of a project
resuming into the original folder, invisible characters where a person decides."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from ruizn.terminal import revealed
from tests.cli.approval_helpers import turns_model, write
from tests.cli.conftest import cli_env, read_events, run_cli
from tests.cli.terminals import PROMPT, Terminal
from tests.fakeapi import Stream, Text, ToolUse


def test_an_unwritable_state_folder_is_one_line_and_the_run_works(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    server = server_factory([Stream((Text("Fine."),))])
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    environ = cli_env(server.base_url, XDG_STATE_HOME=str(blocker / "state"))
    result = run_cli(["run", "hello"], workspace=workspace, base_url=server.base_url, env=environ)
    assert result.code == 0, result.stderr
    assert "Traceback" not in result.stderr
    warnings = [line for line in result.stderr.splitlines() if "trust record" in line]
    assert len(warnings) == 1, result.stderr
    assert "resuming it will ask" in warnings[0]
    last = json.loads(result.log_path.read_text().splitlines()[-1])
    assert (last["type"], last["status"]) == ("run_finished", "success")


@pytest.mark.parametrize("ts", ["NaN", "Infinity", "-Infinity", "1e308", "-5"])
def test_a_log_with_a_number_that_is_not_a_time_is_refused_in_one_line(
    workspace: Path, server_factory: Any, ts: str
) -> None:
    server = server_factory([Stream((Text("Fine."),))])
    done = run_cli(["run", "hello"], workspace=workspace, base_url=server.base_url)
    assert done.code == 0, done.stderr
    lines = done.log_path.read_text().splitlines()
    body = json.loads(lines[1])
    lines[1] = json.dumps(body).replace(f'"ts": {json.dumps(body["ts"])}', f'"ts": {ts}')
    assert ts in lines[1]
    done.log_path.write_text("\n".join(lines) + "\n")
    for command in (
        ["view", "last"],
        ["show", "last"],
        ["replay", "last"],
        ["export", "last", "--otlp", "http://127.0.0.1:9"],
    ):
        shown = run_cli(command, workspace=workspace)
        assert "Traceback" not in shown.stderr, (command, shown.stderr)
        assert shown.code in (1, 2), (command, shown.stderr)
        assert "not a time" in shown.stderr or command[0] == "show", (command, shown.stderr)


def test_a_copy_of_a_project_says_where_its_resume_writes(
    tmp_path: Path, server_factory: Any
) -> None:
    original = tmp_path / "original"
    original.mkdir()
    (original / "README.md").write_text("# Demo\n")
    reads = ToolUse("toolu_r1", "read_file", {"path": "README.md"})
    server = server_factory(turns_model([[reads], [reads]]))
    stopped = run_cli(
        ["run", "--max-steps", "1", "read it"], workspace=original, base_url=server.base_url
    )
    assert stopped.code == 3, stopped.stderr
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    again = run_cli(["resume", "last"], workspace=copy, base_url=server.base_url)
    assert again.code in (0, 3), again.stderr
    assert f"works in its own workspace {original}, not {copy}" in again.stderr


def test_invisible_characters_are_escaped_where_a_person_decides(
    workspace: Path, server_factory: Any
) -> None:
    assert revealed("notes\u200b.txt") == "notes\\u200b.txt"
    for hidden in ("\u200e", "\u200f", "\u2028", "\U000e0041", "\ufeff"):
        assert hidden not in revealed(f"a{hidden}b")
    server = server_factory(turns_model([[write("toolu_z", "notes\u200b.txt", "hi\u202e\n")]]))
    term = Terminal(["run", "--goal", "write"], workspace, cli_env(server.base_url))
    try:
        shown = term.expect(PROMPT)
        assert "notes\\u200b.txt" in shown
        assert "\u200b" not in shown
        term.type(b"n\n")
        assert term.finish() == 0, term.text
    finally:
        term.close()


def test_a_session_that_died_counts_in_the_runs_time(workspace: Path, server_factory: Any) -> None:
    """A session killed before its run_finished (kill -9, a fleet worker taken over) ran
    from its first event to its last: the resume records that time, and the run's time is
    every session's."""
    from ruizn.effects.runlog.reader import replay_file
    from ruizn.events import LlmCallStarted, LlmResponse, RunStarted
    from ruizn.serde import encode
    from ruizn.state import TextBlock, ToolUseBlock
    from tests.cli.planted import RUN, settings

    server = server_factory([Stream((Text("Done."),))])
    call = ToolUseBlock(id="toolu_r", name="read_file", input={"path": "README.md"})
    stream = [
        RunStarted(
            seq=1, ts=100.0, run_id=RUN, goal="read", settings=settings(workspace, max_steps=3)
        ),
        LlmCallStarted(seq=2, ts=101.0, step=1),
        LlmResponse(
            seq=3, ts=130.5, content=(TextBlock(text="On it."), call), stop_reason="tool_use"
        ),
    ]
    log = workspace / ".ruizn" / "runs" / RUN / "events.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("".join(encode(e) + "\n" for e in stream))
    done = run_cli(["resume", "last", "--trust"], workspace=workspace, base_url=server.base_url)
    assert done.code == 0, done.stderr
    lines = read_events(log)
    (resumed,) = [e for e in lines if e["type"] == "run_resumed"]
    assert resumed["elapsed"] == 30.5
    finished = lines[-1]
    assert replay_file(log).state.elapsed == pytest.approx(30.5 + finished["elapsed"])
