"""`ruizn agents`, and the subagents a run at the terminal gets (docs/subagents.md).

Definitions come from `--agents DIR`, the user's `~/.config/ruizn/agents/` (both the
person's own) and the workspace's `.ruizn/agents/` and `.claude/agents/`: data from the
workspace, which a run uses only once the person at the terminal accepts it (each agent shown
with its tools and model), or with --trust, as a project's hooks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from attrs import evolve

from ruizn.cli.exits import EXIT_OK, Exit, fail
from ruizn.cli.options import where_options

if TYPE_CHECKING:
    from ruizn.agentdefs import Subagent
    from ruizn.settings import RunSettings

__all__ = [
    "AGENT_OPTIONS",
    "agent_options",
    "agents_command",
    "found_definitions",
    "with_subagents",
]


# The keyword names of `agent_options`: not run settings, taken out before those are built.
AGENT_OPTIONS = ("agents_dirs", "subagents", "max_depth", "max_agents")


def agent_options(f: Any) -> Any:
    """The options of `run` that choose its subagents."""
    f = click.option(
        "--max-agents",
        type=click.IntRange(min=1),
        default=None,
        help="The most subagents of one run running at once (default 4).",
    )(f)
    f = click.option(
        "--max-depth",
        type=click.IntRange(min=0),
        default=None,
        help="How deep subagents nest below the run (default 1: a subagent starts none).",
    )(f)
    f = click.option(
        "--subagents/--no-subagents",
        default=None,
        help="Offer the `agent` tool (with the built-in `general` agent) even when no"
        " definition is found / offer none. Default: on when definitions are found.",
    )(f)
    return click.option(
        "--agents",
        "agents_dirs",
        multiple=True,
        type=click.Path(file_okay=False),
        metavar="DIR",
        help="A folder of subagent definitions (Claude Code's .md files). Repeatable.",
    )(f)


def found_definitions(
    workspace: str, dirs: tuple[str, ...]
) -> tuple[tuple[Subagent, ...], tuple[Subagent, ...]]:
    """(the person's own definitions, the workspace's), or one line and exit 2."""
    from ruizn.effects.agents.files import (
        AgentFileError,
        read_folder,
        user_agents_dir,
        workspace_agents,
    )

    try:
        own: list[Subagent] = []
        for folder in dirs:
            if not Path(folder).is_dir():
                fail(f"--agents {folder}: not a folder")
            own += read_folder(Path(folder))
        own += read_folder(user_agents_dir(os.environ))
        theirs = workspace_agents(Path(workspace))
    except AgentFileError as exc:
        fail(str(exc))
    return tuple(own), tuple(theirs)


def with_subagents(
    settings: RunSettings, options: dict[str, Any], *, trust: bool, other_yes: str = "--trust"
) -> RunSettings:
    """The settings with the run's subagents and their limits (`options` loses the CLI's
    agent options). A workspace's definitions only once accepted; `other_yes`: the option
    that accepts them without a terminal, as the refusal names it."""
    from ruizn.agentdefs import with_general

    dirs = tuple(options.pop("agents_dirs", ()) or ())
    wanted = options.pop("subagents", None)
    depth = options.pop("max_depth", None)
    at_once = options.pop("max_agents", None)
    if depth is not None:
        settings = evolve(settings, max_depth=depth)
    if at_once is not None:
        settings = evolve(settings, max_agents=at_once)
    if wanted is False:
        return settings
    own, theirs = found_definitions(settings.workspace, dirs)
    if theirs and _accepted(theirs, trust=trust, other_yes=other_yes):
        own = (*own, *theirs)
    if not own and not wanted:
        return settings
    return evolve(settings, subagents=with_general(own))


def _accepted(found: tuple[Subagent, ...], *, trust: bool, other_yes: str) -> bool:
    from ruizn.cli.live import echo_err
    from ruizn.terminal import revealed_line, visible

    if trust:
        return True
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        echo_err(
            f"ruizn: the workspace defines {len(found)} subagent(s)"
            f" ({', '.join(visible(d.name) for d in found)}); they do not run without a"
            f" person's yes at a terminal, or {other_yes}"
        )
        return False
    echo_err("ruizn: this workspace defines these subagents (each a run with its own prompt):")
    for definition in found:
        echo_err(f"  {_line(definition)}")
        lines = definition.prompt.splitlines()
        for text in lines[:3]:
            echo_err(f"      {revealed_line(text)}")
        if len(lines) > 3:
            echo_err(f"      (… {len(lines) - 3} more lines of prompt: {definition.source})")
    echo_err("let the model start them in this run? [y/N] ")
    if sys.stdin.readline().strip().lower() in ("y", "yes"):
        return True
    echo_err("ruizn: the workspace's subagents do not run in this run")
    return False


def _line(definition: Subagent) -> str:
    """One definition as a person decides on it: every field revealed, on one line."""
    from ruizn.terminal import revealed_line as shown

    tools = (
        "the parent's tools"
        if definition.tools is None
        else ", ".join(shown(t) for t in definition.tools)
    )
    if definition.disallowed_tools:
        tools += f" but {', '.join(shown(t) for t in definition.disallowed_tools)}"
    model = shown(definition.model) if definition.model else "the parent's model"
    mode = f"; permissionMode {definition.permission_mode}" if definition.permission_mode else ""
    return f"{shown(definition.name)}  ({shown(definition.source)}; {tools}; {model}{mode})"


@click.command("agents")
@click.option("--json", "as_json", is_flag=True, help="Print the definitions as a JSON array.")
@click.option(
    "--agents",
    "agents_dirs",
    multiple=True,
    type=click.Path(file_okay=False),
    metavar="DIR",
    help="Also list the definitions of this folder. Repeatable.",
)
@where_options
def agents_command(
    *, as_json: bool, agents_dirs: tuple[str, ...], workspace: str, log_dir: str | None
) -> None:
    """List the subagents a run here could start: name, where each is defined, its tools,
    model and description (a workspace's are marked: they run only once accepted)."""
    import json

    from attrs import asdict

    from ruizn.agentdefs import with_general
    from ruizn.terminal import visible

    own, theirs = found_definitions(workspace, agents_dirs)
    listed = [(d, False) for d in with_general(own)]
    names = {d.name for d, _ in listed}
    listed += [(d, True) for d in theirs if d.name not in names]
    if as_json:
        rows = [{**asdict(d), "needs_acceptance": marked} for d, marked in listed]
        click.echo(json.dumps(rows, ensure_ascii=False, indent=2))
        raise Exit(EXIT_OK)
    for definition, marked in listed:
        mark = "  [workspace: runs only once accepted]" if marked else ""
        click.echo(_line(definition) + mark)
        click.echo(visible(f"  {' '.join(definition.description.split())}"))
    raise Exit(EXIT_OK)
