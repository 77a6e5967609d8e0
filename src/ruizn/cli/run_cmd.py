"""`ruizn run` (and `ruizn --goal`): a new run at the terminal."""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

import click

from ruizn.cli.agents_cmd import AGENT_OPTIONS, agent_options
from ruizn.cli.common import otlp_option
from ruizn.cli.exits import Exit, fail
from ruizn.cli.options import UsageFailure, checked_text, run_options

__all__ = ["run_command", "run_goal"]


@click.command("run")
@click.argument("words", nargs=-1)
@run_options
@agent_options
@otlp_option
def run_command(words: tuple[str, ...], goal: str | None, **options: Any) -> None:
    """Run an agent on GOAL until the model ends its turn or --max-steps is reached.

    The goal is --goal, the arguments, or standard input when it is not a terminal.
    """
    if goal is not None and words:
        raise UsageFailure("give the goal once: as --goal or as arguments, not both")
    if goal is None and words:
        goal = " ".join(words)
    if goal is None and not sys.stdin.isatty():
        goal = sys.stdin.read() or None
    if goal is None:
        raise UsageFailure("missing goal: give --goal GOAL, ruizn run GOAL, or pipe it in")
    raise Exit(run_goal(goal=goal, **options))


def run_goal(
    *,
    goal: str,
    workspace: str,
    log_dir: str | None,
    otlp: str | None = None,
    trust: bool = False,
    **options: Any,
) -> int:
    # The collector off while the run is built (its modules imported, the SDK's too): see
    # `live.drive`, which turns it on again once the run has begun.
    gc.disable()
    from ruizn.cli.live import (
        new_run,
        terminal_agent,
        with_project_hooks,
        with_user_hooks,
    )
    from ruizn.cli.runoptions import options_from, settings_from_cli

    if not checked_text("the goal", goal).strip():
        raise UsageFailure("--goal must not be empty")
    if not os.path.isdir(workspace):
        fail(f"--workspace {workspace!r} is not a folder")
    from ruizn.cli.agents_cmd import with_subagents

    picked = {key: options.pop(key, None) for key in AGENT_OPTIONS}
    profile = options.pop("profile", None)
    given = options_from({**options, "workspace": workspace}, profile=profile)
    settings, servers = settings_from_cli(given)
    settings = with_project_hooks(with_user_hooks(settings), trust=trust)
    settings = with_subagents(settings, picked, trust=trust)
    if otlp is None:
        return new_run(terminal_agent(settings, log_dir=log_dir, mcp=servers), goal)
    from ruizn.cli.view import live_export

    with live_export(otlp) as exporter:
        agent = terminal_agent(settings, log_dir=log_dir, mcp=servers, subscribers=(exporter,))
        return new_run(agent, goal)
