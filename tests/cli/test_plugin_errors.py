"""A broken plug-in's error text is the plug-in's own: the CLI shows it in one inert line.

The plug-in here is installed the way importlib.metadata finds any package (a dist-info
folder with its entry points, on PYTHONPATH); its module raises at import with window-title,
clear-screen, C1 and bidi codes in the message, and its package name holds one too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ruizn.terminal import UNSAFE
from tests.cli.conftest import Result, cli_env, run_cli
from tests.fakeapi import Stream, Text
from tests.fleet.conftest import SUBPROCESS_PATH

HOSTILE = "\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m red\\u202e evil"
SHOWN = "␛]0;pwned␇␛[2J\\x9b31m red\\u202e evil"


@pytest.fixture
def hostile_plugin(tmp_path: Path) -> Path:
    folder = tmp_path / "site"
    info = folder / "hostile_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hostile-plugin\x1b[8m\nVersion: 0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text("[ruizn.tools]\nhostile = hostile_plugin:tools\n")
    (folder / "hostile_plugin.py").write_text(
        f'raise RuntimeError("{HOSTILE}\\nsecond line")\n', encoding="utf-8"
    )
    return folder


def _run(args: list[str], workspace: Path, base_url: str | None, site: Path) -> Result:
    env = cli_env(base_url, PYTHONPATH=f"{site}:{SUBPROCESS_PATH}")
    return run_cli(args, workspace=workspace, env=env)


def _inert(text: str) -> bool:
    return not any(c in UNSAFE and c != "\n" for c in text)


def test_a_broken_plugin_is_one_inert_warning_and_the_run_goes_on(
    workspace: Path, server_factory: Any, hostile_plugin: Path
) -> None:
    server = server_factory([Stream((Text("ok"),))])
    proc = _run(["run", "--goal", "go"], workspace, server.base_url, hostile_plugin)
    assert proc.code == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("ruizn: warning:")]
    assert warnings == [
        "ruizn: warning: plug-in 'hostile' (hostile-plugin␛[8m 0.1) could not be loaded:"
        f" RuntimeError: {SHOWN}; it was left out"
    ]
    assert _inert(proc.stderr)
    assert _inert(proc.stdout)


def test_a_broken_tool_spec_is_one_inert_error(workspace: Path, hostile_plugin: Path) -> None:
    proc = _run(
        ["run", "--goal", "go", "--tool", "hostile_plugin:tools"], workspace, None, hostile_plugin
    )
    assert proc.code == 2
    assert proc.stderr == (
        "ruizn: error: tool spec 'hostile_plugin:tools': cannot import hostile_plugin:"
        f" RuntimeError: {SHOWN}\n"
    )


@pytest.mark.parametrize("command", ["worker", "batch"])
def test_a_broken_tools_from_module_is_one_inert_error(
    workspace: Path, hostile_plugin: Path, command: str
) -> None:
    goals = workspace / "goals.jsonl"
    goals.write_text('{"goal": "x"}\n', encoding="utf-8")
    where = ["--db", f"sqlite:///{workspace / 'fleet.db'}"] if command == "worker" else [str(goals)]
    proc = _run(
        [command, *where, "--tools-from", "hostile_plugin:make"], workspace, None, hostile_plugin
    )
    assert proc.code == 2
    assert proc.stderr == (
        "ruizn: error: --tools-from 'hostile_plugin:make': cannot import hostile_plugin:"
        f" RuntimeError: {SHOWN}\n"
    )
