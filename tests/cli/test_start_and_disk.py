"""No empty logs (issue 10): a signal early in a run, or a write that fails, never leaves a log
that replay refuses, and is one line on stderr.

The failing write is injected with RLIMIT_FSIZE in the child (a write past the limit fails
with EFBIG; Python ignores SIGXFSZ), which needs no mount and behaves as a full disk does.
"""

from __future__ import annotations

import random
import resource
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.cli.conftest import (
    Result,
    cli_env,
    run_cli,
    slow_answer,
    start_cli,
    wait_for_tokens,
)
from tests.fakeapi import Stream, Text


def _every_log_replays(workspace: Path) -> int:
    runs = workspace / ".ruizn" / "runs"
    logs = list(runs.glob("*/events.jsonl")) if runs.is_dir() else []
    for log in logs:
        assert log.stat().st_size > 0, f"an empty log: {log}"
        replay = run_cli(["replay", str(log), "--json"], workspace=workspace)
        assert replay.code == 0, (log, replay.stderr)
    listing = run_cli(["runs"], workspace=workspace) if runs.is_dir() else None
    assert listing is None or "unreadable" not in listing.stdout
    return len(logs)


def test_a_signal_at_20_moments_of_the_first_second_leaves_no_unreadable_log(
    workspace: Path,
) -> None:
    rng = random.Random(20261203)
    for _ in range(20):
        proc = start_cli(
            ["run", "--model", "test", "--goal", "read README.md"],
            workspace=workspace,
            stdout=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.0, 1.0))
        proc.send_signal(rng.choice([signal.SIGINT, signal.SIGTERM, signal.SIGHUP]))
        _, err = proc.communicate(timeout=30)
        assert "Traceback" not in err, err
        # 0: it finished first; 130: it cancelled cleanly; killed by the signal itself: it
        # came before the run installed its handlers (then no run, or a readable one).
        assert proc.returncode in (0, 130, -signal.SIGINT, -signal.SIGTERM, -signal.SIGHUP), err
    _every_log_replays(workspace)


def _limited(max_bytes: int) -> Any:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return limit


def _run_limited(workspace: Path, base_url: str, max_bytes: int) -> Result:
    return run_cli(
        ["run", "--goal", "talk"],
        workspace=workspace,
        base_url=base_url,
        preexec_fn=_limited(max_bytes),
    )


def test_a_log_that_cannot_be_written_at_start_is_one_line_and_no_run(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("hello"),))])
    done = _run_limited(workspace, server.base_url, 200)  # run_started alone is larger
    assert done.code == 1, done.stderr
    assert done.stderr.count("\n") == 1
    assert "cannot write the event log" in done.stderr
    assert "EFBIG" in done.stderr or "too large" in done.stderr
    assert _every_log_replays(workspace) == 0
    assert server.requests == []


def test_a_write_that_fails_mid_run_is_one_line_and_the_log_still_replays(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("word " * 2000, chunk=5),))])
    done = _run_limited(workspace, server.base_url, 12_000)
    assert done.code == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("ruizn: error:")]
    assert len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert _every_log_replays(workspace) == 1


def test_sighup_ends_a_run_cancelled_like_sigterm(workspace: Path, server_factory: Any) -> None:

    server = server_factory([slow_answer(0.05)])
    proc = start_cli(["run", "--goal", "slow"], workspace=workspace, base_url=server.base_url)
    log = wait_for_tokens(workspace / ".ruizn" / "runs", 3, proc)
    proc.send_signal(signal.SIGHUP)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    replay = run_cli(["replay", str(log), "--json"], workspace=workspace)
    assert '"status": "cancelled"' in replay.stdout


def test_bad_numbers_are_one_line_and_create_nothing(workspace: Path) -> None:
    nan = run_cli(
        ["run", "--model", "test", "--goal", "x", "--read-timeout", "nan"], workspace=workspace
    )
    assert (nan.code, nan.stderr.count("\n")) == (2, 1), nan.stderr
    assert "read_timeout" in nan.stderr
    env = cli_env(None, RUIZN_RETRY_BASE_DELAY="abc")
    abc = run_cli(["run", "--model", "test", "--goal", "x"], workspace=workspace, env=env)
    assert (abc.code, abc.stderr.count("\n")) == (2, 1), abc.stderr
    assert "RUIZN_RETRY_BASE_DELAY" in abc.stderr
    assert not (workspace / ".ruizn").exists()


def test_a_closed_pipe_is_no_error_for_any_command(workspace: Path) -> None:
    for n in range(3):
        run_cli(["run", "--model", "test", "--goal", f"goal {n}"], workspace=workspace)
    for args in (
        ["runs"],
        ["show", "last"],
        ["replay", "last"],
        ["replay", "last", "--json"],
        ["tools"],
        ["tools", "--json"],
    ):
        proc = start_cli(args, workspace=workspace, text=False)
        assert proc.stdout is not None
        proc.stdout.readline()
        proc.stdout.close()  # the reader goes away, as `| head -1` does
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, (args, err)
        assert b"Traceback" not in err
