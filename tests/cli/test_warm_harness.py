"""The CLI tests run most commands in forked children of a warm ruizn (tests/warm_cli.py).
These tests hold it to its promise: a command run warm prints, exits and logs as a fresh
`python -m ruizn` does, and a command a fork could get wrong runs fresh."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import cli_env, offline_env
from tests.warm_client import run_ruizn

RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")
SECONDS = re.compile(r"\d+\.\ds\b")


def _both(
    monkeypatch: pytest.MonkeyPatch, args: list[str], cwd: Path, env: dict[str, str], **kw: Any
) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    def plain(text: str) -> str:
        return SECONDS.sub("N.Ns", RUN_ID.sub("RUN", text))

    results = []
    for cold in ("0", "1"):
        monkeypatch.setenv("RUIZN_TEST_COLD", cold)
        done = run_ruizn(args, cwd=cwd, env=env, timeout=60, **kw)
        results.append((done.returncode, plain(done.stdout), plain(done.stderr)))
    return results[0], results[1]


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["--help"],
        ["run", "--model", "test", "--goal", "read README.md"],
        ["run", "--model", "test", "--goal", ""],  # one line, exit 2
        ["run", "--no-such-option"],  # click's usage error, exit 2
        ["runs"],
        ["show", "no-such-run"],
    ],
)
def test_a_warm_command_prints_and_exits_as_a_fresh_one(
    args: list[str], workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    warm, cold = _both(monkeypatch, args, workspace, offline_env())
    assert warm == cold


def test_a_warm_run_logs_what_a_fresh_one_logs(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["run", "--model", "test", "--goal", "read README.md"]
    _both(monkeypatch, args, workspace, offline_env())
    logs = sorted(workspace.glob(".ruizn/runs/*/events.jsonl"))
    assert len(logs) == 2

    def kinds(log: Path) -> list[str]:
        return re.findall(r'"type":\s*"([a-z_]+)"', log.read_text(encoding="utf-8"))

    assert kinds(logs[0]) == kinds(logs[1])
    assert kinds(logs[0])[-1] == "run_finished"


def test_stdin_reaches_a_warm_command(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUIZN_TEST_COLD", "0")
    env = offline_env()
    first = run_ruizn(
        ["run", "--model", "test", "--goal", "read README.md"], cwd=workspace, env=env, timeout=60
    )
    assert first.returncode == 0, first.stderr
    # `continue` with no message on its line reads it from stdin
    done = run_ruizn(
        ["continue", "last"], cwd=workspace, env=env, timeout=60, input="now in one word"
    )
    assert done.returncode == 0, done.stderr
    (log,) = workspace.glob(".ruizn/runs/*/events.jsonl")
    assert "now in one word" in log.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"ANTHROPIC_LOG": "debug"}, "ANTHROPIC_LOG differs"),  # the SDK reads it on import
        ({"PYTHONWARNINGS": "error"}, "PYTHONWARNINGS differs"),  # read at start-up
        ({"LC_ALL": "C"}, "LC_ALL differs"),
    ],
)
def test_what_a_fork_could_get_wrong_runs_fresh(
    extra: dict[str, str],
    why: str,
    workspace: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace = tmp_path / "trace"
    monkeypatch.setenv("RUIZN_TEST_WARM_TRACE", str(trace))
    monkeypatch.setenv("RUIZN_TEST_COLD", "0")
    env = {**cli_env(None), **extra}
    done = run_ruizn(["--version"], cwd=workspace, env=env, timeout=60)
    assert done.returncode == 0
    assert why in trace.read_text(encoding="utf-8")


def test_a_module_on_pythonpath_named_like_an_imported_one_runs_fresh(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fresh interpreter would import this click, not site-packages' one: the fork cannot.
    planted = tmp_path / "planted"
    (planted / "click").mkdir(parents=True)
    (planted / "click" / "__init__.py").write_text("raise SystemExit('planted click')\n")
    trace = tmp_path / "trace"
    monkeypatch.setenv("RUIZN_TEST_WARM_TRACE", str(trace))
    monkeypatch.setenv("RUIZN_TEST_COLD", "0")
    done = run_ruizn(
        ["--version"], cwd=workspace, env=cli_env(None, PYTHONPATH=str(planted)), timeout=60
    )
    assert "planted click" in done.stderr
    assert "imported from elsewhere" in trace.read_text(encoding="utf-8")
