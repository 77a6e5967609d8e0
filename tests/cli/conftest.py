"""Helpers for driving the real `ruizn` CLI as a subprocess against the fake API server:
`run_cli` (one command to its end), `start_cli` (a running one), their environment, and
what the tests of interruptions share. `workspace` and `server_factory` are fixtures of
tests/conftest.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attrs import frozen

from tests.fakeapi import Stream, Text
from tests.paths import RECORDINGS  # noqa: F401 - tests import it from here
from tests.warm_client import run_ruizn

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
        return read_events(self.log_path)


def cli_env(base_url: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "RUIZN_"))}
    env.update(ANTHROPIC_API_KEY=API_KEY, NO_COLOR="1", RUIZN_RETRY_BASE_DELAY="0.01")
    # No user config file of the machine's (~/.config/ruizn/config.toml) shapes a test's run.
    env["XDG_CONFIG_HOME"] = str(Path(__file__).parent / "no-config-home")
    if base_url is not None:
        env["ANTHROPIC_BASE_URL"] = base_url
    env.update(extra)
    return env


def offline_env() -> dict[str, str]:
    """No key, no server: what the offline model, a rerun and a refusal need."""
    env = cli_env(None)
    del env["ANTHROPIC_API_KEY"]
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
    input: str | None = None,
    command: Sequence[str] | None = None,
    **popen: Any,
) -> Result:
    """`ruizn ARGS` in `workspace` to its end (`command` instead of `python -m ruizn` for
    another way in); `popen` passes on (preexec_fn, start_new_session)."""
    runs = workspace / ".ruizn" / "runs"
    before = set(runs.glob("*/events.jsonl"))
    # In a forked child of a process that has imported ruizn and the SDK once, unless the
    # command could tell it from a fresh interpreter (tests/warm_cli.py).
    proc = run_ruizn(
        args,
        cwd=workspace,
        env=env if env is not None else cli_env(base_url),
        timeout=timeout,
        stdin=stdin,
        input=input,
        command=command,
        **popen,
    )
    new = tuple(sorted(set(runs.glob("*/events.jsonl")) - before))
    return Result(proc.returncode, proc.stdout, proc.stderr, workspace, new)


def modules_after(args: Sequence[str], *, cwd: Path, env: dict[str, str]) -> tuple[str, set[str]]:
    """`ruizn ARGS` run in a fresh interpreter: what it printed, and every module it had
    imported by its end (what start-up pays for)."""
    from tests.conftest import run_python

    code = (
        "import sys\n"
        f"sys.argv = ['ruizn', *{list(args)!r}]\n"
        "from ruizn.cli.main import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    done = run_python("-c", code, cwd=cwd, env=env)
    return done.stdout, set(done.stderr.split())


def start_cli(
    args: Sequence[str],
    *,
    workspace: Path,
    base_url: str | None = None,
    env: dict[str, str] | None = None,
    stdout: Any = subprocess.PIPE,
    stderr: Any = subprocess.PIPE,
    text: bool = True,
    **popen: Any,
) -> subprocess.Popen[Any]:
    """`ruizn ARGS` started in `workspace` and left running, its output piped (as text unless
    `text` is False); `popen` passes on (stdin, start_new_session, preexec_fn)."""
    return subprocess.Popen(
        [*ruizn_command(), *args],
        cwd=workspace,
        env=env if env is not None else cli_env(base_url),
        stdout=stdout,
        stderr=stderr,
        text=text,
        **popen,
    )


def slow_answer(delay: float = 0.05) -> Stream:
    """An answer that streams for seconds: time to interrupt it."""
    return Stream((Text("word " * 400, chunk=5),), token_delay=delay)


def wait_for_event(
    log_root: Path, kind: str, proc: subprocess.Popen[str], *, count: int = 1, timeout: float = 60
) -> Path:
    """The log under `log_root` once it holds `count` events of type `kind`, the run still
    live (the test interrupts it there)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before {count} {kind}: {proc.communicate()}")
        for log in log_root.glob("*/events.jsonl"):
            if log.read_text(encoding="utf-8").count(f'"type":"{kind}"') >= count:
                return log
        time.sleep(0.02)
    raise AssertionError(f"no {count} {kind} in {timeout} s")


def wait_for_tokens(log_root: Path, count: int, proc: subprocess.Popen[str]) -> Path:
    """The log under `log_root` once it holds `count` streamed tokens (the run still live)."""
    return wait_for_event(log_root, "llm_token", proc, count=count, timeout=20)


def live_run(workspace: Path, server_factory: Any) -> tuple[subprocess.Popen[str], Path]:
    """A run still streaming its answer (3 tokens in), and its log."""
    server = server_factory([slow_answer(0.05)])
    proc = start_cli(["run", "--goal", "slow"], workspace=workspace, base_url=server.base_url)
    log = wait_for_tokens(workspace / ".ruizn" / "runs", 3, proc)
    return proc, log


def read_events(log: Path) -> list[dict[str, Any]]:
    """A log's events, one JSON object a line."""
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def only_log(workspace: Path) -> Path:
    """The one run log in `workspace`."""
    (log,) = (workspace / ".ruizn" / "runs").glob("*/events.jsonl")
    return log


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
