"""Run folders opened like hostile input, over the real CLI.

A `.ruizn/runs/RUN/` folder may arrive with a cloned repository, a tarball or a shared
drive, or be changed by anyone who can write the workspace. Each test here takes a run the
user made (so nothing but the planted file stands between it and `resume`), plants one
thing in its folder, and checks that no command follows a link, writes through a hard link,
hangs on a FIFO, reads a line whole past the cap, or cuts a whole line it cannot read.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from ruizn.effects.runlog.reader import MAX_LINE_BYTES
from tests.cli.conftest import (
    Result,
    ruizn_command,
    run_cli,
    start_cli,
    wait_for_tokens,
)
from tests.conftest import PRECIOUS
from tests.fakeapi import Stream, Text, ToolUse, tool_loop

# A command that meets a planted file answers at once; this only stops a hang.
PROMPT = 30


def _own_run(workspace: Path, server: Any) -> Path:
    """A run the user made, stopped at max_steps: `ruizn resume` would go on with it."""
    result = run_cli(
        ["run", "--goal", "loop", "--max-steps", "1"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 3, result.stderr
    return result.log_path.parent


def _snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under folder: a link's target, a file's bytes, a FIFO's kind."""
    seen: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            seen[key] = "-> " + os.readlink(path)
        elif path.is_fifo():
            seen[key] = "fifo"
        elif path.is_file():
            seen[key] = path.read_bytes()
    return seen


def one_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def _row(listing: Result, run: str) -> str:
    assert listing.code == 0, listing.stderr
    rows = [r for r in listing.stdout.splitlines() if r.startswith(run)]
    assert len(rows) == 1, listing.stdout
    return rows[0]


def _refused_resume(run: Path, workspace: Path, server: Any, *words: str) -> None:
    """`resume` says in one line, exit 2, which file and why, and asks the model nothing."""
    asked = len(server.requests)
    result = run_cli(
        ["resume", run.name, "--max-steps", "5"],
        workspace=workspace,
        base_url=server.base_url,
        timeout=PROMPT,
    )
    assert result.code == 2, result.stderr
    line = one_line(result)
    for word in words:
        assert word in line, line
    assert len(server.requests) == asked


@pytest.fixture
def server(server_factory: Any) -> Any:
    return server_factory(tool_loop(3))


# -- links -----------------------------------------------------------------------------------


@pytest.mark.parametrize("log", ["whole", "garbage"])
def test_a_lock_that_is_a_link_is_refused_and_its_target_untouched(
    log: str, workspace: Path, server: Any, tmp_path: Path, precious: Path
) -> None:
    run = _own_run(workspace, server)
    (run / "lock").unlink()
    (run / "lock").symlink_to(precious)
    if log == "garbage":  # a log resume would refuse anyway: the lock comes first
        (run / "events.jsonl").write_text("not a log\n")
    _refused_resume(run, workspace, server, "lock", "symbolic link")
    assert precious.read_text() == PRECIOUS
    assert (run / "lock").is_symlink()
    listed = _row(run_cli(["runs"], workspace=workspace, timeout=PROMPT), run.name)
    assert "unreadable" in listed
    assert "lock" in listed
    assert "symbolic link" in listed


def test_a_log_that_is_a_link_is_neither_written_nor_read_through(
    workspace: Path, server: Any, tmp_path: Path
) -> None:
    run = _own_run(workspace, server)
    elsewhere = tmp_path / "elsewhere.jsonl"
    (run / "events.jsonl").rename(elsewhere)
    (run / "events.jsonl").symlink_to(elsewhere)
    before = elsewhere.read_bytes()
    _refused_resume(run, workspace, server, "events.jsonl", "symbolic link")
    assert elsewhere.read_bytes() == before
    for command in (["replay", run.name], ["show", run.name]):
        shown = run_cli(command, workspace=workspace, timeout=PROMPT)
        assert shown.code == 2, shown.stderr
        assert "symbolic link" in one_line(shown)
    listed = _row(run_cli(["runs"], workspace=workspace, timeout=PROMPT), run.name)
    assert "unreadable" in listed
    assert "symbolic link" in listed


def test_a_run_folder_that_is_a_link_is_refused_and_nothing_lands_behind_it(
    workspace: Path, server: Any, tmp_path: Path
) -> None:
    run = _own_run(workspace, server)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run.rename(elsewhere / run.name)
    run.symlink_to(elsewhere / run.name, target_is_directory=True)
    before = _snapshot(elsewhere)
    _refused_resume(run, workspace, server, run.name, "symbolic link")
    assert _snapshot(elsewhere) == before
    for command in (["replay", run.name], ["show", run.name]):
        shown = run_cli(command, workspace=workspace, timeout=PROMPT)
        assert shown.code == 2, shown.stderr
        assert "symbolic link" in one_line(shown)
    listed = _row(run_cli(["runs"], workspace=workspace, timeout=PROMPT), run.name)
    assert "unreadable" in listed
    assert "symbolic link" in listed


# -- hard links ------------------------------------------------------------------------------


def test_a_hard_linked_lock_is_refused_and_the_other_name_untouched(
    workspace: Path, server: Any, tmp_path: Path, precious: Path
) -> None:
    run = _own_run(workspace, server)
    (run / "lock").unlink()
    os.link(precious, run / "lock")
    _refused_resume(run, workspace, server, "lock", "hard link")
    assert precious.read_text() == PRECIOUS


def test_a_hard_linked_log_is_read_but_never_written(
    workspace: Path, server: Any, tmp_path: Path
) -> None:
    run = _own_run(workspace, server)
    other = tmp_path / "backup.jsonl"
    os.link(run / "events.jsonl", other)
    before = other.read_bytes()
    _refused_resume(run, workspace, server, "events.jsonl", "hard link")
    assert other.read_bytes() == before
    # Reading cannot change it: a backup made with hard links stays readable.
    shown = run_cli(["show", run.name], workspace=workspace, timeout=PROMPT)
    assert shown.code == 0, shown.stderr
    assert "max_steps" in shown.stdout


# -- special files ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["lock", "events.jsonl"])
def test_a_fifo_in_a_run_folder_hangs_no_command_and_the_others_are_listed(
    name: str, workspace: Path, server: Any
) -> None:
    run = _own_run(workspace, server)
    other = _own_run(workspace, server)
    (run / name).unlink()
    os.mkfifo(run / name)
    listing = run_cli(["runs"], workspace=workspace, timeout=PROMPT)
    listed = _row(listing, run.name)
    assert "unreadable" in listed
    assert name in listed
    assert "FIFO" in listed
    assert "max_steps" in _row(listing, other.name)
    shown = run_cli(["show", run.name], workspace=workspace, timeout=PROMPT)
    assert shown.code == 2, shown.stderr
    assert "FIFO" in one_line(shown)
    _refused_resume(run, workspace, server, name, "FIFO")
    if name == "events.jsonl":
        replayed = run_cli(["replay", run.name], workspace=workspace, timeout=PROMPT)
        assert replayed.code == 2, replayed.stderr
        assert "FIFO" in one_line(replayed)
    assert (run / name).is_fifo()


# -- size ------------------------------------------------------------------------------------


# Runs the command given after the report file and writes that child's peak RSS there. A
# child's ru_maxrss starts from its parent's RSS at the fork, so the measured command is
# forked from this small launcher, not from the test process (hundreds of MB by now).
_LAUNCHER = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
proc.returncode = 0
with open(sys.argv[1], "w") as report:
    report.write(str(usage.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _measured(args: list[str], workspace: Path, server: Any) -> tuple[Result, int]:
    """Run the CLI; its result and its own peak RSS in bytes (Linux reports kilobytes)."""
    with tempfile.NamedTemporaryFile("r") as report:
        result = run_cli(
            args,
            workspace=workspace,
            base_url=server.base_url,
            timeout=PROMPT,
            command=[sys.executable, "-c", _LAUNCHER, report.name, *ruizn_command()],
        )
        peak = int(report.read())
    return result, peak


def test_a_2gb_last_line_is_refused_in_bounded_memory_and_nothing_is_cut(
    workspace: Path, server: Any
) -> None:
    run = _own_run(workspace, server)
    log = run / "events.jsonl"
    whole = log.read_bytes()
    lines = whole.count(b"\n")
    size = len(whole) + (2 << 30)
    with log.open("r+b") as f:  # a hole: 2 GB of zero bytes and no newline, on no disk
        f.truncate(size)
    cap = f"{MAX_LINE_BYTES >> 20} MiB"
    commands = (["replay", run.name], ["show", run.name], ["resume", run.name, "--max-steps", "5"])
    for command in commands:
        result, peak = _measured(command, workspace, server)
        assert result.code == 2, result.stderr
        line = one_line(result)
        assert f"line {lines + 1}" in line, line
        assert cap in line, line
        assert peak < MAX_LINE_BYTES + (160 << 20), f"{command[0]}: peak RSS {peak >> 20} MiB"
    listing, peak = _measured(["runs"], workspace, server)
    listed = _row(listing, run.name)
    assert "unreadable" in listed
    assert cap in listed
    assert peak < MAX_LINE_BYTES + (160 << 20), f"runs: peak RSS {peak >> 20} MiB"
    assert log.stat().st_size == size
    with log.open("rb") as f:
        assert f.read(len(whole)) == whole


# -- whole lines are never torn --------------------------------------------------------------

BAD_LAST_LINES = {
    "garbage": b"this is not an event\n",
    "newer-schema": b'{"v":99,"type":"llm_token","seq":99,"ts":1.0,"text":"x"}\n',
    "nested": b"[" * 2000 + b"]" * 2000 + b"\n",
}


@pytest.mark.parametrize("kind", sorted(BAD_LAST_LINES))
def test_a_whole_bad_last_line_is_an_error_naming_it_and_is_never_cut(
    kind: str, workspace: Path, server: Any
) -> None:
    run = _own_run(workspace, server)
    log = run / "events.jsonl"
    lines = log.read_bytes().count(b"\n")
    with log.open("ab") as f:
        f.write(BAD_LAST_LINES[kind])
    before = log.read_bytes()
    replayed = run_cli(["replay", run.name], workspace=workspace)
    assert replayed.code == 2, replayed.stderr
    line = one_line(replayed)
    assert f"line {lines + 1}" in line
    assert "torn" not in line
    _refused_resume(run, workspace, server, f"line {lines + 1}")
    assert log.read_bytes() == before
    listed = _row(run_cli(["runs"], workspace=workspace), run.name)
    assert "unreadable" in listed
    assert f"line {lines + 1}" in listed


def test_only_a_last_line_without_its_newline_is_torn_and_cut(workspace: Path, server: Any) -> None:
    run = _own_run(workspace, server)
    log = run / "events.jsonl"
    whole = log.read_bytes()
    torn = whole.splitlines(keepends=True)[-1].rstrip(b"\n")
    with log.open("ab") as f:  # a well-formed event, but its newline never reached the disk
        f.write(torn)
    lines = whole.count(b"\n")
    replayed = run_cli(["replay", run.name], workspace=workspace)
    assert replayed.code == 0, replayed.stderr
    assert f"line {lines + 1} is torn" in replayed.stderr
    # The bytes were added by the test, not by a ruizn that died writing them: --trust.
    resumed = run_cli(
        ["resume", run.name, "--max-steps", "5", "--trust"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert resumed.code == 0, resumed.stderr
    after = log.read_bytes()
    assert after.startswith(whole)
    events = [json.loads(line) for line in after[len(whole) :].splitlines()]
    assert events[0]["type"] == "run_resumed"  # the torn bytes are gone, not left before it
    assert events[0]["torn_bytes"] == len(torn)
    assert events[-1]["status"] == "success"


# -- the recovery copy -----------------------------------------------------------------------


def test_the_recovery_copy_replaces_a_planted_link_instead_of_writing_through_it(
    workspace: Path, server_factory: Any, tmp_path: Path, precious: Path
) -> None:
    server = server_factory(
        [
            Stream(
                (Text("look"), ToolUse("t1", "read_file", {"path": "README.md"})),
                stop_reason="tool_use",
                token_delay=0.3,
            ),
            Stream((Text("done"),)),
        ]
    )
    proc = start_cli(["run", "--goal", "x"], workspace=workspace, base_url=server.base_url)
    log = wait_for_tokens(workspace / ".ruizn" / "runs", 1, proc)
    log.with_name("events.recovered.jsonl").symlink_to(precious)
    log.unlink()
    _, err = proc.communicate(timeout=PROMPT)
    assert "deleted or replaced" in err, err
    assert precious.read_text() == PRECIOUS
    recovered = log.with_name("events.recovered.jsonl")
    assert not recovered.is_symlink()
    first = json.loads(recovered.read_text(encoding="utf-8").splitlines()[0])
    assert first["type"] == "run_started"
