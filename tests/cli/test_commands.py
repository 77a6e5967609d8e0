"""The CLI's table of commands (`ruizn.cli.main.COMMANDS`): every entry imports, its
one-line help is the command's own, `ruizn --help` lists them as click would, and neither
`--help` nor `runs` imports what only a run needs."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from ruizn.cli.main import COMMANDS, cli, load
from tests.cli.conftest import cli_env, modules_after

# What only a run (or the library's records) needs: `--help` and `runs` must not pay for it.
HEAVY = ("anyio", "anthropic", "pydantic", "attr", "attrs", "httpx", "mcp", "dbos")
HEAVY_RUIZN = ("ruizn.settings", "ruizn.events", "ruizn.state", "ruizn.cli.sdklog")


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_imports_and_its_help_is_the_tables(name: str) -> None:
    command = load(COMMANDS[name])
    assert isinstance(command, click.Command)
    assert command.name == name
    assert not command.hidden
    # The whole first sentence: click shortens it for the width, from the table's text.
    assert command.get_short_help_str(limit=10**6) == COMMANDS[name].help


def test_help_lists_the_commands_as_click_would() -> None:
    eager = click.Group("ruizn", commands={name: load(e) for name, e in COMMANDS.items()})
    for width in (60, 80, 120):
        lazy_out = click.HelpFormatter(width=width)
        cli.format_commands(click.Context(cli), lazy_out)
        eager_out = click.HelpFormatter(width=width)
        eager.format_commands(click.Context(eager), eager_out)
        assert lazy_out.getvalue() == eager_out.getvalue()
        assert lazy_out.getvalue().count("\n") == len(COMMANDS) + 1  # "Commands:" and a row each


def _heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY_RUIZN}


def test_help_imports_no_command_nor_what_a_run_needs(tmp_path: Path) -> None:
    out, modules = modules_after(["--help"], cwd=tmp_path, env=cli_env(None))
    assert "Commands:" in out
    assert "  runs " in out
    assert "click" in modules  # the check sees imports at all
    assert _heavy(modules) == set()
    targets = {entry.target.partition(":")[0] for entry in COMMANDS.values()}
    assert modules & targets <= {"ruizn.cli.main"}


def test_version_imports_nothing_heavy(tmp_path: Path) -> None:
    out, modules = modules_after(["--version"], cwd=tmp_path, env=cli_env(None))
    assert out.startswith("ruizn, version ")
    assert _heavy(modules) == set()


def test_runs_of_no_runs_imports_nothing_heavy(tmp_path: Path) -> None:
    # (A warm listing of runs imports no more: test_runs_cache.py.)
    env = cli_env(None, RUIZN_STATE_DIR=str(tmp_path / "state"))
    (tmp_path / "empty").mkdir()
    out, modules = modules_after(
        ["runs", "--log-dir", str(tmp_path / "empty")], cwd=tmp_path, env=env
    )
    assert out.split() == ["RUN", "STATUS", "STEPS", "TIME", "IN", "OUT", "COST", "GOAL"]
    assert _heavy(modules) == set()


def test_a_run_routes_the_sdk_logs_and_an_offline_run_never_imports_the_sdk(tmp_path: Path) -> None:
    # The commands that may talk to the API or an MCP server install the redacting handler
    # before they run; `--help` above does not.
    env = cli_env(None, RUIZN_STATE_DIR=str(tmp_path / "state"))
    runs = str(tmp_path / "runs")
    _, modules = modules_after(
        ["run", "--model", "test", "--goal", "hi", "--log-dir", runs], cwd=tmp_path, env=env
    )
    assert "ruizn.cli.sdklog" in modules
    # An offline run, and a replay of any run, never import the SDK (1.8 CPU-seconds here).
    assert "anthropic" not in modules
    out, modules = modules_after(["replay", "last", "--log-dir", runs], cwd=tmp_path, env=env)
    assert "hi" in out
    assert "ruizn.reducers" in modules  # the check sees the replay's imports
    assert "anthropic" not in modules
