"""The `ruizn` command.

Start-up matters: only click and the config record are imported here. anyio, the SDK and
the tools are imported inside the commands that need them, so `--help`, `replay`, `runs`
and `show` never pay for them. Library errors become exit codes here and only here.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import click

from ruizn import __version__
from ruizn.config import (
    APPROVAL_MODES,
    DEFAULT_APPROVAL,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_STEPS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRY_BASE_DELAY,
    DEFAULT_SYSTEM,
    DEFAULT_TOOL_CONCURRENCY,
    TEST_MODEL,
)
from ruizn.shell.exits import EXIT_CANCELLED, EXIT_OK, EXIT_USAGE, Exit, echo_error, fail

# Ctrl-C before a run has begun (while Python imports) ends the process quietly, as the
# shell expects, instead of printing a KeyboardInterrupt traceback. A run installs its own
# handlers (first Ctrl-C cancels cleanly, the second exits).
signal.signal(signal.SIGINT, signal.SIG_DFL)


class UsageFailure(click.UsageError):
    """A bad argument found after parsing (e.g. an empty goal)."""


def _where_options(f: Any) -> Any:
    """--workspace and --log-dir: where runs are. Every command that reads or writes runs
    takes both, and looks where `ruizn run` with the same options writes."""
    f = click.option(
        "--log-dir",
        type=click.Path(file_okay=False),
        default=None,
        help="Root of the run logs (default: WORKSPACE/.ruizn/runs).",
    )(f)
    return click.option(
        "--workspace",
        type=click.Path(file_okay=False),
        default=".",
        help="The workspace folder (default: the current directory).",
    )(f)


def _mcp_header_option(f: Any) -> Any:
    # A function, not a shared decorator object: click's decorators are made for one use.
    return click.option(
        "--mcp-header",
        "mcp_headers",
        multiple=True,
        metavar="NAME:KEY[=VALUE]",
        help="A header for MCP server NAME; without =VALUE it is read from"
        " $RUIZN_MCP_HEADER_<NAME>_<KEY>. Repeatable.",
    )(f)


def _run_options(f: Any) -> Any:
    options: list[Callable[[Any], Any]] = [
        click.option("--goal", help="What ruizn should do (or give it as an argument)."),
        click.option(
            "--model",
            envvar="RUIZN_MODEL",
            default=DEFAULT_MODEL,
            show_default=True,
            help=f"Claude model id (env RUIZN_MODEL); '{TEST_MODEL}' is the offline model.",
        ),
        click.option(
            "--max-steps",
            type=click.IntRange(min=1),
            default=DEFAULT_MAX_STEPS,
            show_default=True,
            help="Most model calls in the run.",
        ),
        click.option(
            "--max-tokens",
            type=click.IntRange(min=1),
            default=DEFAULT_MAX_TOKENS,
            show_default=True,
            help="max_tokens of each model call.",
        ),
        click.option("--system", default=DEFAULT_SYSTEM, help="System prompt."),
        click.option(
            "--read-timeout",
            type=float,
            default=DEFAULT_READ_TIMEOUT,
            show_default=True,
            help="Seconds a model stream may stay silent before the call is retried.",
        ),
        click.option(
            "--max-retries",
            type=click.IntRange(min=0),
            default=DEFAULT_MAX_RETRIES,
            show_default=True,
            help="Retries of a failed model call (429, 5xx, overloaded, broken stream).",
        ),
        click.option(
            "--tool-concurrency",
            type=click.IntRange(min=1),
            default=DEFAULT_TOOL_CONCURRENCY,
            show_default=True,
            help="Most tool calls of one turn run at once (1: one at a time, in order).",
        ),
        click.option(
            "--mcp",
            "mcp",
            multiple=True,
            metavar="NAME=COMMAND|URL",
            help="An MCP server: NAME='COMMAND ARGS...' (stdio) or NAME=https://... (Streamable"
            " HTTP). Its tools are mcp__NAME__TOOL. Repeatable.",
        ),
        _mcp_header_option,
        click.option(
            "--allow-secret-files",
            is_flag=True,
            help="Let the file tools read .env, *.pem, id_rsa and other secret files.",
        ),
        click.option(
            "--approval",
            type=click.Choice(APPROVAL_MODES),
            default=DEFAULT_APPROVAL,
            show_default=True,
            help="Tool calls that need approval (write_file, edit_file, MCP tools): ask at the"
            " terminal (with no terminal the run stops, exit 4, for `resume --approve`),"
            " approve them always, or never.",
        ),
        click.option(
            "--otlp",
            metavar="URL",
            default=None,
            help="Also send the run's spans to this OTLP/HTTP collector as it goes"
            " (e.g. http://localhost:4318); a collector that is down never stops the run.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return _tool_options(_where_options(f))


def _db_option(f: Any) -> Any:
    return click.option(
        "--db", envvar="RUIZN_DB", default=None, help="A fleet's database (env RUIZN_DB)."
    )(f)


def _tool_options(f: Any) -> Any:
    """--tool / --no-plugins, shared by `run` and `tools`."""
    f = click.option("--no-plugins", is_flag=True, help="Load no plug-in tools.")(f)
    return click.option(
        "--tool",
        "tools",
        multiple=True,
        metavar="MODULE:ATTR",
        help="Add the tools MODULE:ATTR names (a module or a .py file; repeatable).",
    )(f)


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ruizn")
@_run_options
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
@_run_options
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


def _checked_text(name: str, value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageFailure(f"{name} is not valid UTF-8") from None
    return value


def _retry_base_delay() -> float:
    # Tests set this to keep retry back-offs short; users keep the default.
    raw = os.environ.get("RUIZN_RETRY_BASE_DELAY")
    if raw is None:
        return DEFAULT_RETRY_BASE_DELAY
    try:
        return float(raw)
    except ValueError:
        fail(f"RUIZN_RETRY_BASE_DELAY must be a number of seconds, not {raw!r}")


def _run(
    *,
    goal: str,
    workspace: str,
    log_dir: str | None,
    no_plugins: bool,
    mcp: tuple[str, ...],
    mcp_headers: tuple[str, ...],
    otlp: str | None = None,
    **options: Any,
) -> int:
    from ruizn.shell.session import config_from_options, new_run

    if not _checked_text("the goal", goal).strip():
        raise UsageFailure("--goal must not be empty")
    if not os.path.isdir(workspace):
        fail(f"--workspace {workspace!r} is not a folder")
    config = config_from_options(
        workspace=workspace,
        log_dir=log_dir,
        retry_base_delay=_retry_base_delay(),
        plugins=not no_plugins,
        **options,
    )
    servers: tuple[Any, ...] = ()
    if mcp or mcp_headers:
        from ruizn.effects.mcp_config import McpConfigError, parse_cli

        try:
            servers = parse_cli(mcp, mcp_headers)
        except McpConfigError as exc:
            raise UsageFailure(str(exc)) from None
    if otlp is None:
        return new_run(config, goal, servers)
    from ruizn.shell.view import live_export

    with live_export(otlp) as exporter:
        return new_run(config, goal, servers, subscribers=(exporter,))


@cli.command("tools")
@click.option("--json", "as_json", is_flag=True, help="Print the tools as a JSON array.")
@_tool_options
@_where_options
def tools_command(
    *, as_json: bool, tools: tuple[str, ...], no_plugins: bool, workspace: str, log_dir: str | None
) -> None:
    """List every available tool: its name, where it comes from, and its input schema."""
    import json
    from pathlib import Path

    from ruizn.shell.session import config_from_options, make_toolbox

    folder = Path(workspace).resolve()
    config = config_from_options(workspace=workspace, tools=tools, plugins=not no_plugins)
    toolbox = make_toolbox(config, folder, _root(workspace, log_dir))
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


@cli.command("replay")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print the final state as JSON.")
@_where_options
@_db_option
def replay_command(
    run: str, as_json: bool, workspace: str, log_dir: str | None, db: str | None
) -> None:
    """Rebuild RUN's state from its log and print its transcript (no network).

    RUN is a run id, `last`, a run folder or a path to an events.jsonl.
    """
    if db is not None:
        from ruizn.fleet.commands import replay_db

        raise Exit(_reading(lambda: replay_db(db, run, as_json=as_json)))
    from ruizn.shell.logs import replay_run

    raise Exit(_reading(lambda: replay_run(run, root=_root(workspace, log_dir), as_json=as_json)))


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
@_mcp_header_option
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
@_where_options
@_db_option
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
    workspace: str,
    log_dir: str | None,
    db: str | None,
) -> None:
    """Continue RUN where it stopped, appending to the same log (and to its MCP servers).

    A run that waits for approval goes on with --approve/--deny deciding its calls (at a
    terminal, ruizn asks about any call they leave waiting). With --db, RUN is a fleet's run:
    it is queued again and a worker continues it.
    """
    from ruizn.shell.session import config_from_options, resume_run

    if read_timeout is not None:
        config_from_options(read_timeout=read_timeout)  # checked like run's (no nan, no 0)
    if db is not None:
        _refuse_local_options(ctx)
        from ruizn.fleet.commands import resume_db

        raise Exit(
            resume_db(
                db, run, max_steps=max_steps, max_tokens=max_tokens, read_timeout=read_timeout
            )
        )
    raise Exit(
        resume_run(
            run,
            root=_root(workspace, log_dir),
            max_steps=max_steps,
            max_tokens=max_tokens,
            read_timeout=DEFAULT_READ_TIMEOUT if read_timeout is None else read_timeout,
            mcp_headers=mcp_headers,
            approve=approve,
            deny=deny,
            reason=None if reason is None else _checked_text("--reason", reason),
        )
    )


# Options of a local resume that a fleet's resume cannot honour: the worker that takes the
# run has its own workspace, logs and tools, and nobody to ask about tool calls.
_LOCAL_ONLY = {
    "approve": "--approve",
    "deny": "--deny",
    "reason": "--reason",
    "mcp_headers": "--mcp-header",
    "workspace": "--workspace",
    "log_dir": "--log-dir",
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
        " worker's workspace, logs and tools, and no one to decide tool calls"
    )


@cli.command("runs")
@_where_options
@_db_option
def runs_command(workspace: str, log_dir: str | None, db: str | None) -> None:
    """List the runs, newest first: id, status, steps, time, tokens, goal."""
    if db is not None:
        from ruizn.fleet.commands import runs_db

        raise Exit(_reading(lambda: runs_db(db)))
    from ruizn.shell.logs import list_runs

    raise Exit(_reading(lambda: list_runs(_root(workspace, log_dir))))


@cli.command("show")
@click.argument("run")
@_where_options
@_db_option
def show_command(run: str, workspace: str, log_dir: str | None, db: str | None) -> None:
    """Summarise one run: goal, model, status, steps, tools, usage and cache ratio."""
    if db is not None:
        from ruizn.fleet.commands import show_db

        raise Exit(_reading(lambda: show_db(db, run)))
    from ruizn.shell.logs import show_run

    raise Exit(_reading(lambda: show_run(run, _root(workspace, log_dir))))


@cli.command("view")
@click.argument("run")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Where to write the page (default: view.html in the run's folder).",
)
@click.option("--open", "open_browser", is_flag=True, help="Open the page in a browser.")
@_where_options
@_db_option
def view_command(
    run: str,
    *,
    output: str | None,
    open_browser: bool,
    workspace: str,
    log_dir: str | None,
    db: str | None,
) -> None:
    """Write RUN as one self-contained HTML page: its model and tool calls on a timeline,
    beside the transcript. Prints the page's path."""
    from ruizn.shell.view import view_run

    root = _root(workspace, log_dir)
    raise Exit(view_run(run, root=root, db=db, out=output, open_browser=open_browser))


@cli.command("export")
@click.argument("run")
@click.option(
    "--otlp",
    metavar="URL",
    default=None,
    help="The OTLP/HTTP collector, e.g. http://localhost:4318 (default:"
    " $OTEL_EXPORTER_OTLP_ENDPOINT).",
)
@_where_options
@_db_option
def export_command(
    run: str, otlp: str | None, workspace: str, log_dir: str | None, db: str | None
) -> None:
    """Send RUN's spans (OpenTelemetry GenAI conventions) to a collector over OTLP/HTTP.
    Exporting twice sends the same trace."""
    from ruizn.shell.view import export_run

    raise Exit(export_run(run, root=_root(workspace, log_dir), db=db, otlp=otlp))


# batch, worker and submit: the fleet layer (ruizn.fleet) adds its commands. Its module
# imports only click; DBOS loads inside the commands, so `ruizn --help` never imports it.
from ruizn.fleet.commands import register as _register_fleet  # noqa: E402 - cli must exist

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
