"""The log is the truth on every path (issue 9), through the real CLI.

One writer per run; hostile replies never make a line replay refuses; illegal sequences are
refused by replay with the line; bad argv; the read side looks where `run` wrote.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.cli.conftest import (
    cli_env,
    live_run,
    run_cli,
    slow_answer,
    start_cli,
    wait_for_tokens,
)
from tests.fakeapi import HttpError, Stream, Text, ToolUse


def test_resume_of_a_live_run_is_refused_and_the_live_log_stays_whole(
    workspace: Path, server_factory: Any
) -> None:
    proc, log = live_run(workspace, server_factory)
    try:
        result = run_cli(["resume", log.parent.name], workspace=workspace)
        assert result.code == 2
        assert len(result.stderr.strip().splitlines()) == 1
        assert f"process {proc.pid}" in result.stderr
        runs = run_cli(["runs"], workspace=workspace)
        assert "running" in runs.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
    replay = run_cli(["replay", str(log), "--json"], workspace=workspace)
    assert replay.code == 0, replay.stderr
    assert json.loads(replay.stdout)["status"] == "cancelled"


def test_kill_9_of_the_holder_leaves_no_stale_lock(workspace: Path, server_factory: Any) -> None:
    proc, _ = live_run(workspace, server_factory)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    runs = run_cli(["runs"], workspace=workspace)
    assert "interrupted" in runs.stdout
    server = server_factory([Stream((Text("done"),))])
    result = run_cli(["resume", "last"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    assert (
        json.loads(run_cli(["replay", "last", "--json"], workspace=workspace).stdout)["status"]
        == "success"
    )


def test_two_resumes_at_once_exactly_one_proceeds(workspace: Path, server_factory: Any) -> None:
    first = server_factory([Stream((Text("a"),), stop_reason="max_tokens")])
    run = run_cli(
        ["run", "--goal", "x", "--max-tokens", "5"], workspace=workspace, base_url=first.base_url
    )
    assert run.code == 1  # cut at max_tokens
    server = server_factory([slow_answer(0.02), slow_answer(0.02)])
    procs = [
        start_cli(
            ["resume", run.log_path.parent.name, "--max-tokens", "50"],
            workspace=workspace,
            base_url=server.base_url,
        )
        for _ in range(2)
    ]
    outcomes = [p.communicate(timeout=60) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outcomes
    refused = next(err for p, (_, err) in zip(procs, outcomes, strict=True) if p.returncode == 2)
    assert "is being written by process" in refused
    assert run_cli(["replay", str(run.log_path), "--json"], workspace=workspace).code == 0


def test_duplicate_tool_use_ids_are_a_retried_invalid_response_and_the_log_replays(
    workspace: Path, server_factory: Any
) -> None:
    dup = Stream(
        (
            ToolUse("same", "read_file", {"path": "README.md"}),
            ToolUse("same", "read_file", {"path": "README.md"}),
        ),
        stop_reason="tool_use",
    )
    server = server_factory([dup, Stream((Text("fine"),))])
    result = run_cli(["run", "--goal", "x"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    events = result.events()
    failed = [e for e in events if e["type"] == "llm_call_failed"]
    assert failed[0]["error_type"] == "invalid_response"
    assert "share the id" in failed[0]["message"]
    assert not any(e["type"] == "tool_call_started" for e in events)
    assert run_cli(["replay", str(result.log_path), "--json"], workspace=workspace).code == 0


def _write(log: Path, events: list[dict[str, Any]]) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")


def _start_line() -> dict[str, Any]:
    return {
        "v": 2,
        "type": "run_started",
        "seq": 1,
        "ts": 1.0,
        "run_id": "r",
        "goal": "g",
        "model": "m",
        "max_steps": 3,
        "max_tokens": 100,
        "system": "",
    }


ILLEGAL = {
    "response without a call": [{"type": "llm_response", "content": [], "stop_reason": "end_turn"}],
    "token without a call": [{"type": "llm_token", "text": "x"}],
    "call for step 99": [{"type": "llm_call_started", "step": 99, "attempt": 1}],
    "run_finished with wrong steps": [
        {"type": "run_finished", "status": "error", "steps": 42, "elapsed": 0.0}
    ],
    "tokens while tools are pending": [
        {"type": "llm_call_started", "step": 1, "attempt": 1},
        {
            "type": "llm_response",
            "stop_reason": "tool_use",
            "content": [{"type": "tool_use", "id": "t", "name": "n", "input": {}}],
        },
        {"type": "llm_token", "text": "x"},
    ],
    "duplicate ids in a response": [
        {"type": "llm_call_started", "step": 1, "attempt": 1},
        {
            "type": "llm_response",
            "stop_reason": "tool_use",
            "content": [
                {"type": "tool_use", "id": "t", "name": "n", "input": {}},
                {"type": "tool_use", "id": "t", "name": "n", "input": {}},
            ],
        },
    ],
}


def test_replay_refuses_each_illegal_sequence_naming_the_line(tmp_path: Path) -> None:
    for name, tail in ILLEGAL.items():
        log = tmp_path / name.replace(" ", "_") / "events.jsonl"
        events = [_start_line()]
        for i, event in enumerate(tail, start=2):
            events.append({"v": 2, **event, "seq": i, "ts": float(i)})
        _write(log, events)
        result = run_cli(["replay", str(log)], workspace=tmp_path)
        assert result.code == 2, name
        assert f"line {len(events)}:" in result.stderr, (name, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1


def test_undecodable_argv_is_one_line_and_creates_nothing(workspace: Path) -> None:
    bad = b"read \xff\xfe file"
    proc = subprocess.run(
        [*_cmd(), b"run", b"--model", b"test", b"--goal", bad],
        cwd=workspace,
        env=cli_env(None),
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.decode().count("\n") == 1
    assert b"UTF-8" in proc.stderr
    assert not (workspace / ".ruizn").exists()


def _cmd() -> list[bytes]:
    from tests.cli.conftest import ruizn_command

    return [os.fsencode(part) for part in ruizn_command()]


def test_runs_lists_newest_first_within_one_second(workspace: Path) -> None:
    ids = []
    for n in range(4):
        result = run_cli(["run", "--model", "test", "--goal", f"goal {n}"], workspace=workspace)
        ids.append(result.log_path.parent.name)
    listed = [
        line.split()[0] for line in run_cli(["runs"], workspace=workspace).stdout.splitlines()[1:]
    ]
    assert listed == ids[::-1]


def test_the_read_commands_take_workspace_and_look_where_run_wrote(
    workspace: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    made = run_cli(
        ["run", "--model", "test", "--goal", "hi", "--workspace", str(workspace)],
        workspace=elsewhere,
    )
    assert made.code == 0, made.stderr
    for args in (["runs"], ["show", "last"], ["replay", "last"]):
        found = run_cli([*args, "--workspace", str(workspace)], workspace=elsewhere)
        assert found.code == 0, (args, found.stderr)
    assert run_cli(["runs"], workspace=elsewhere).code == 2  # nothing here


def test_retry_in_is_the_wait_the_server_asked_for(workspace: Path, server_factory: Any) -> None:
    server = server_factory(
        [
            HttpError(429, "rate_limit_error", "slow down", headers={"retry-after": "1"}),
            Stream((Text("ok"),)),
        ]
    )
    began = time.monotonic()
    result = run_cli(["run", "--goal", "x"], workspace=workspace, base_url=server.base_url)
    took = time.monotonic() - began
    assert result.code == 0, result.stderr
    failed = next(e for e in result.events() if e["type"] == "llm_call_failed")
    assert failed["retry_after"] == 1.0
    assert failed["retry_in"] == 1.0
    assert took >= 1.0
    assert "retrying in 1.0s" in result.stdout


def test_a_log_deleted_mid_run_stops_the_run_and_is_recovered(
    workspace: Path, server_factory: Any
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
    log.unlink()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1, err
    assert "deleted or replaced" in err
    recovered = log.with_name("events.recovered.jsonl")
    lines = recovered.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["type"] == "run_started"
    assert json.loads(lines[-1])["type"] == "run_finished"
    assert run_cli(["replay", str(recovered), "--json"], workspace=workspace).code == 0
