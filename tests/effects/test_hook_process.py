"""A hook command as a process: its timeout bounds it even while a child it left holds its
output open (the child dies with it), and its environment holds no secret of ruizn's but
those the person's own hooks file passes it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest

from ruizn.effects.hooks.command import CommandHooks, HookRun
from ruizn.effects.hooks.config import HookConfigError, parse
from ruizn.settings import HookSpec

SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-hook-secret",
    "GITHUB_TOKEN": "ghp-hook-secret",
    "DB_PASSWORD": "db-hook-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-hook-secret",
    "SERVICE_SECRET": "svc-hook-secret",
}


def _run(spec: HookSpec, workspace: Path, environ: dict[str, str] | None = None) -> HookRun:
    hooks = CommandHooks(workspace, environ)
    return anyio.run(hooks.run, spec, {"hook_event_name": spec.event})


def _environment(path: Path) -> dict[str, str]:
    pairs = (entry.partition("=") for entry in path.read_text().split("\0") if entry)
    return {name: value for name, _, value in pairs}


def _gone(pid: int) -> bool:
    """No such process, or only its exit status left (a zombie not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def _wait_gone(pid: int) -> bool:
    # SIGKILL is delivered at once; the process table may take a moment to show it.
    deadline = time.monotonic() + 5
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _gone(pid)


@pytest.mark.parametrize(
    "command",
    [
        # The hook ends at once; the child it leaves holds stdout open.
        "sleep 120 & echo $! > child.pid; echo started",
        # The hook itself runs on, with its child.
        "sleep 120 & echo $! > child.pid; sleep 120",
    ],
)
def test_the_timeout_bounds_a_hook_whose_child_holds_its_output(
    tmp_path: Path, command: str
) -> None:
    spec = HookSpec(event="UserPromptSubmit", command=command, timeout=1.0)
    began = time.monotonic()
    ran = _run(spec, tmp_path)
    took = time.monotonic() - began
    child = int((tmp_path / "child.pid").read_text())
    assert _wait_gone(child), f"the hook's child {child} outlived its timeout"
    assert ran.exit_code is None
    assert ran.outcome.error is not None
    assert "timeout" in ran.outcome.error
    assert took < 60, took  # not the child's 120 s


def test_a_hook_that_ends_with_its_output_closed_is_not_cut(tmp_path: Path) -> None:
    spec = HookSpec(event="UserPromptSubmit", command="echo context", timeout=30.0)
    ran = _run(spec, tmp_path)
    assert (ran.exit_code, ran.outcome.context) == (0, "context")


def test_a_hooks_environment_holds_no_secret_but_those_it_is_passed(tmp_path: Path) -> None:
    environ = {"PATH": os.environ["PATH"], "PLAIN": "plain-value", **SECRETS}
    bare = HookSpec(event="Stop", command="env -0 > bare.env")
    passed = HookSpec(event="Stop", command="env -0 > passed.env", env=("GITHUB_TOKEN",))
    assert _run(bare, tmp_path, environ).exit_code == 0
    assert _run(passed, tmp_path, environ).exit_code == 0
    seen = _environment(tmp_path / "bare.env")
    assert seen["PLAIN"] == "plain-value"
    assert seen["CLAUDE_PROJECT_DIR"] == str(tmp_path)
    assert not set(SECRETS) & set(seen)
    assert not set(SECRETS.values()) & set(seen.values())
    given = _environment(tmp_path / "passed.env")
    assert given["GITHUB_TOKEN"] == SECRETS["GITHUB_TOKEN"]
    assert not (set(SECRETS) - {"GITHUB_TOKEN"}) & set(given)


def test_only_the_persons_own_hooks_file_may_pass_secrets() -> None:
    data = {"Stop": [{"hooks": [{"command": "notify", "env": ["GITHUB_TOKEN"]}]}]}
    (own,) = parse(data, "hooks.json", own=True)
    assert own.env == ("GITHUB_TOKEN",)
    with pytest.raises(HookConfigError, match="only your own hooks files"):
        parse(data, ".ruizn/hooks.json", own=False)
    bad = {"Stop": [{"hooks": [{"command": "notify", "env": ["NOT A NAME"]}]}]}
    with pytest.raises(HookConfigError, match="variable names"):
        parse(bad, "hooks.json", own=True)
