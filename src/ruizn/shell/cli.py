"""The `ruizn` command.

Start-up matters: only click and the config record are imported here. anyio, the SDK and
the tools are imported inside the commands that need them, so `--help`, `replay`, `runs`
and `show` never pay for them. Library errors become exit codes here and only here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import click

from ruizn.config import APPROVAL_MODES, DEFAULT_READ_TIMEOUT
from ruizn.shell.exits import EXIT_CANCELLED, EXIT_OK, EXIT_USAGE, Exit, echo_error, fail
from ruizn.shell.options import (
    UsageFailure,
    checked_text,
    db_option,
    mcp_header_option,
    run_options,
    tool_options,
    where_options,
)
from ruizn.version import __version__


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ruizn")
@run_options
@click.pass_context
def cli(ctx: click.Context, /, goal: str | None, **options: Any) -> None:
    """ruizn: stream Claude, run the tools it asks for, log every event.

    `ruizn --goal TEXT` is `ruizn run --goal TEXT`.
    """
    if ctx.invoked_subcommand is not None:
        return
    if goal is None:
        click.echo(ctx.get_help())
        raise Exit(EXIT_USAGE)
    raise Exit(_run(goal=goal, **options))


@cli.command("run")
@click.argument("words", nargs=-1)
@run_options
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
    raise Exit(_run(goal=goal, **options))


def _run(*, goal: str, workspace: str, log_dir: str | None, **options: Any) -> int:
    from ruizn.shell.options import settings_from_cli
    from ruizn.shell.session import new_run, terminal_agent

    if not checked_text("the goal", goal).strip():
        raise UsageFailure("--goal must not be empty")
    if not os.path.isdir(workspace):
        fail(f"--workspace {workspace!r} is not a folder")
    settings, servers = settings_from_cli(workspace=workspace, **options)
    return new_run(terminal_agent(settings, log_dir=log_dir, mcp=servers), goal)


@cli.command("tools")
@click.option("--json", "as_json", is_flag=True, help="Print the tools as a JSON array.")
@tool_options
@where_options
def tools_command(
    *, as_json: bool, tools: tuple[str, ...], no_plugins: bool, workspace: str, log_dir: str | None
) -> None:
    """List every available tool: its name, where it comes from, and its input schema."""
    import json

    from ruizn.shell.session import settings_or_fail, toolbox_of

    settings = settings_or_fail(workspace=workspace, tool_specs=tools, plugins=not no_plugins)
    toolbox = toolbox_of(settings, _root(workspace, log_dir))
    listed = [
        {
            "name": loaded.tool.name,
            "source": {"kind": loaded.source.kind.value, "ref": loaded.source.ref},
            "description": loaded.tool.description,
            "input_schema": loaded.tool.input_schema,
        }
        for loaded in toolbox.tools
    ]

    def show() -> int:
        if as_json:
            click.echo(json.dumps(listed, ensure_ascii=False, indent=2))
            return EXIT_OK
        for loaded, entry in zip(toolbox.tools, listed, strict=True):
            click.echo(f"{entry['name']}  ({loaded.source.describe()})")
            for line in str(entry["description"]).splitlines():
                click.echo(f"  {line}".rstrip())
            schema = json.dumps(entry["input_schema"], ensure_ascii=False, separators=(",", ":"))
            click.echo(f"  input schema: {schema}")
        return EXIT_OK

    raise Exit(_reading(show))


def _reading(command: Callable[[], int]) -> int:
    """A read command whose reader went away (`| head -1`) ends as if all was read: exit 0,
    as `run` does. Caught here, before click, which would turn EPIPE into exit 1."""
    try:
        return command()
    except BrokenPipeError:
        _quiet_flush()
        return EXIT_OK


def _root(workspace: str, log_dir: str | None) -> Any:
    from ruizn.store import default_root

    return default_root(workspace, log_dir)


def _store(workspace: str, log_dir: str | None, db: str | None) -> Any:
    """Where the runs are: the log folder, or a fleet's database (`--db`)."""
    if db is None:
        from ruizn.store import FileStore

        return FileStore.at(workspace, log_dir)
    from ruizn.shell.fleet import db_store

    return db_store(db, _root(workspace, log_dir))


@cli.command("replay")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print the final state as JSON.")
@where_options
@db_option
def replay_command(
    run: str, as_json: bool, workspace: str, log_dir: str | None, db: str | None
) -> None:
    """Rebuild RUN's state from its log and print its transcript (no network).

    RUN is a run id, `last`, a run folder or a path to an events.jsonl.
    """
    from ruizn.shell.logs import replay_run

    store = _store(workspace, log_dir, db)
    raise Exit(_reading(lambda: replay_run(store, run, as_json=as_json)))


@cli.command("resume")
@click.argument("run")
@click.option(
    "--max-steps", type=click.IntRange(min=1), default=None, help="A new step limit (total)."
)
@click.option(
    "--max-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="A new max_tokens per call (lets an answer cut at max_tokens go on).",
)
@click.option(
    "--read-timeout",
    type=float,
    default=None,
    help=f"See `ruizn run` (default {DEFAULT_READ_TIMEOUT:g}; with --db: the run's own).",
)
@mcp_header_option
@click.option(
    "--approve",
    multiple=True,
    metavar="ID|all",
    help="Approve the waiting tool call ID, or all of them (repeatable).",
)
@click.option(
    "--deny",
    multiple=True,
    metavar="ID|all",
    help="Deny the waiting tool call ID, or all of them (repeatable).",
)
@click.option("--reason", default=None, help="Why the calls are denied (the model is told).")
@click.option(
    "--approval",
    type=click.Choice(APPROVAL_MODES),
    default=None,
    help="A new approval mode for the rest of the run (default: the run's own).",
)
@click.option(
    "--trust",
    is_flag=True,
    help="Resume a run ruizn did not start on this machine (or whose log changed) after"
    " checking what its log grants (ruizn show RUN).",
)
@where_options
@db_option
@click.pass_context
def resume_command(
    ctx: click.Context,
    /,
    run: str,
    *,
    max_steps: int | None,
    max_tokens: int | None,
    read_timeout: float | None,
    mcp_headers: tuple[str, ...],
    approve: tuple[str, ...],
    deny: tuple[str, ...],
    reason: str | None,
    approval: str | None,
    trust: bool,
    workspace: str,
    log_dir: str | None,
    db: str | None,
) -> None:
    """Continue RUN where it stopped, appending to the same log (and to its MCP servers).

    A run that waits for approval goes on with --approve/--deny deciding its calls (at a
    terminal, ruizn asks about any call they leave waiting). With --db, RUN is a fleet's run:
    it is queued again, with the decisions, and a worker continues it.
    """
    from ruizn.agent import Resume
    from ruizn.shell.session import resume_run, settings_or_fail, terminal_agent

    if read_timeout is not None:
        settings_or_fail(read_timeout=read_timeout)  # checked like run's (no nan, no 0)
    request = Resume(
        max_steps=max_steps,
        max_tokens=max_tokens,
        read_timeout=read_timeout,
        approve=approve,
        deny=deny,
        reason=None if reason is None else checked_text("--reason", reason),
        approval=approval,  # type: ignore[arg-type]  # click.Choice of the modes
        trust=trust,
    )
    if db is not None:
        _refuse_local_options(ctx)
        from ruizn.shell.fleet import resume_db

        raise Exit(resume_db(db, run, request))
    agent = terminal_agent(
        settings_or_fail(workspace=workspace), log_dir=log_dir, mcp_headers=mcp_headers
    )
    raise Exit(resume_run(agent, run, request))


# Options of a local resume that a fleet's resume cannot honour: the worker that takes the
# run has its own workspace, logs, tools and MCP header values, and trusts its database.
# (--approve/--deny/--reason go with the order: the worker applies them.)
_LOCAL_ONLY = {
    "mcp_headers": "--mcp-header",
    "workspace": "--workspace",
    "log_dir": "--log-dir",
    "approval": "--approval",
    "trust": "--trust",
}


def _refuse_local_options(ctx: click.Context) -> None:
    given = [
        flag
        for name, flag in _LOCAL_ONLY.items()
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
    ]
    if not given:
        return
    source = ctx.get_parameter_source("db")
    db = "--db (from RUIZN_DB)" if source is click.core.ParameterSource.ENVIRONMENT else "--db"
    fail(
        f"{', '.join(given)}: not with {db}: a fleet's run is continued by a worker, with the"
        " worker's workspace, logs, tools and MCP header values, in the run's own approval mode"
    )


@cli.command("runs")
@where_options
@db_option
def runs_command(workspace: str, log_dir: str | None, db: str | None) -> None:
    """List the runs, newest first: id, status, steps, time, tokens, goal."""
    from ruizn.shell.logs import list_runs

    store = _store(workspace, log_dir, db)
    raise Exit(_reading(lambda: list_runs(store)))


@cli.command("show")
@click.argument("run")
@where_options
@db_option
def show_command(run: str, workspace: str, log_dir: str | None, db: str | None) -> None:
    """Summarise one run: goal, model, status, steps, tools, usage and cache ratio."""
    from ruizn.shell.logs import show_run

    store = _store(workspace, log_dir, db)
    raise Exit(_reading(lambda: show_run(store, run)))


# batch, worker and submit: the fleet layer (ruizn.fleet) adds its commands. Its module
# imports only click; DBOS loads inside the commands, so `ruizn --help` never imports it.
from ruizn.shell.fleet import register as _register_fleet  # noqa: E402 - cli must exist

_register_fleet(cli)


def main() -> None:
    try:
        code = cli.main(standalone_mode=False, prog_name="ruizn")
    except click.UsageError as exc:
        echo_error(exc.format_message())
        code = EXIT_USAGE
    except Exit as exc:
        if exc.message:
            echo_error(exc.message)
        code = exc.code
    except (click.Abort, KeyboardInterrupt):
        code = EXIT_CANCELLED
    except BrokenPipeError:
        # The reader went away (`| head -1`): not an error of ours, for every command alike.
        code = EXIT_OK
    _quiet_flush()
    sys.exit(code if isinstance(code, int) else 0)


def _quiet_flush() -> None:
    """A reader that went away must not turn into a traceback at exit."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
