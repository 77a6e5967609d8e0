"""Fixtures for driving the real `ruizn` CLI as a subprocess against the fake API server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from attrs import frozen

from tests.fakeapi import FakeAnthropic
from tests.paths import RECORDINGS  # noqa: F401 - tests import it from here

API_KEY = "sk-ant-test-0123456789-SECRET"


@frozen
class Result:
    code: int
    stdout: str
    stderr: str
    workspace: Path
    new_logs: tuple[Path, ...] = ()

    @property
    def log_path(self) -> Path:
        """The log this command created."""
        assert len(self.new_logs) == 1, f"expected one new log; stderr: {self.stderr}"
        return self.new_logs[0]

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log_path.read_text().splitlines()]


def cli_env(base_url: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "RUIZN_"))}
    env.update(ANTHROPIC_API_KEY=API_KEY, NO_COLOR="1", RUIZN_RETRY_BASE_DELAY="0.01")
    # No user config file of the machine's (~/.config/ruizn/config.toml) shapes a test's run.
    env["XDG_CONFIG_HOME"] = str(Path(__file__).parent / "no-config-home")
    if base_url is not None:
        env["ANTHROPIC_BASE_URL"] = base_url
    env.update(extra)
    return env


def ruizn_command() -> list[str]:
    return [sys.executable, "-m", "ruizn"]


def run_cli(
    args: Sequence[str],
    *,
    workspace: Path,
    base_url: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    stdin: Any = None,
) -> Result:
    runs = workspace / ".ruizn" / "runs"
    before = set(runs.glob("*/events.jsonl"))
    proc = subprocess.run(
        [*ruizn_command(), *args],
        cwd=workspace,
        env=env if env is not None else cli_env(base_url),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=stdin,
    )
    new = tuple(sorted(set(runs.glob("*/events.jsonl")) - before))
    return Result(proc.returncode, proc.stdout, proc.stderr, workspace, new)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("# Demo\n\nA small demo project.\n", encoding="utf-8")
    return ws


@pytest.fixture
def server_factory() -> Iterator[Any]:
    started: list[FakeAnthropic] = []

    def make(script: Any) -> FakeAnthropic:
        server = FakeAnthropic(script).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


_RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")


def normalise_log(text: str, workspace: Path) -> str:
    """Replace what differs between runs (run id, clock, paths) so a log can be a golden."""
    out = []
    for line in text.splitlines():
        event = json.loads(line)
        event["ts"] = 0.0
        for key in ("run_id",):
            if key in event:
                event[key] = "RUN_ID"
        if "workspace" in event.get("settings", {}):
            event["settings"]["workspace"] = "WORKSPACE"
        if "elapsed" in event:
            event["elapsed"] = 0.0
        if "duration" in event:
            event["duration"] = 0.0
        if event.get("type") == "run_started":
            event["ruizn_version"] = "VERSION"
        out.append(json.dumps(event, ensure_ascii=False))
    return "\n".join(out) + "\n"


def normalise_stdout(text: str) -> str:
    text = _RUN_ID.sub("RUN_ID", text)
    return re.sub(r"· \d+(\.\d+)?s ·", "· T ·", text)
