"""The `ruizn` command.

Start-up matters: only click and the config record are imported here. anyio, the SDK and
the tools are imported inside the commands that need them, so `--help`, `replay`, `runs`
and `show` never pay for them. Library errors become exit codes here and only here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ruizn.settings import DEFAULT_READ_TIMEOUT
from ruizn.shell.cli.exits import EXIT_CANCELLED, EXIT_OK, EXIT_USAGE, Exit, echo_error, fail
from ruizn.shell.cli.options import (
    TopGroup,
    UsageFailure,
    checked_text,
    db_option,
    max_context_option,
    max_cost_option,
    mcp_header_option,
    new_approval_option,
    run_options,
    tool_options,
    where_options,
)
from ruizn.version import __version__

if TYPE_CHECKING:
    from ruizn.shell.outcome import Resume


def _otlp_option(f: Any) -> Any:
    return click.option(
        "--otlp",
        metavar="URL",
        default=None,
        help="Also send the run's spans to this OTLP/HTTP collector as it goes"
        " (e.g. http://localhost:4318); a collector that is down never stops the run.",
    )(f)


@click.group(
    cls=TopGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="ruizn")
@run_options
@_otlp_option
@click.pass_context
def cli(ctx: click.Context, /, goal: str | None, **options: Any) -> None:
    """ruizn: stream Claude, run the tools it asks for, log every event.

    `ruizn --goal TEXT` is `ruizn run --goal TEXT`. An option given before a command goes
    on to it (`ruizn --mcp x=cmd tools`), or is refused if the command does not take it.
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
@_otlp_option
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


def _run(
    *,
    goal: str,
    workspace: str,
    log_dir: str | None,
    otlp: str | None = None,
    trust: bool = False,
    **options: Any,
) -> int:
    from ruizn.shell.cli.live import (
        new_run,
        terminal_agent,
        with_project_hooks,
        with_user_hooks,
    )
    from ruizn.shell.cli.options import settings_from_cli

    if not checked_text("the goal", goal).strip():
        raise UsageFailure("--goal must not be empty")
    if not os.path.isdir(workspace):
        fail(f"--workspace {workspace!r} is not a folder")
    settings, servers = settings_from_cli(workspace=workspace, **options)
    settings = with_project_hooks(with_user_hooks(settings), trust=trust)
    if otlp is None:
        return new_run(terminal_agent(settings, log_dir=log_dir, mcp=servers), goal)
    from ruizn.shell.cli.view import live_export

    with live_export(otlp) as exporter:
        agent = terminal_agent(settings, log_dir=log_dir, mcp=servers, subscribers=(exporter,))
        return new_run(agent, goal)


@cli.command("tools")
@click.option("--json", "as_json", is_flag=True, help="Print the tools as a JSON array.")
@click.option(
    "--mcp",
    "mcp",
    multiple=True,
    metavar="NAME=COMMAND|URL",
    help="Also list the tools of this MCP server (started, listed, stopped); as `ruizn run`"
    " takes it. Repeatable.",
)
@mcp_header_option
@tool_options
@where_options
def tools_command(
    *,
    as_json: bool,
    mcp: tuple[str, ...],
    mcp_headers: tuple[str, ...],
    tools: tuple[str, ...],
    no_plugins: bool,
    workspace: str,
    log_dir: str | None,
) -> None:
    """List every available tool: its name, where it comes from, whether it only reads, and
    its input schema. With --mcp, the servers' tools too."""
    import json

    from ruizn.shell.cli.live import mcp_tools_of, toolbox_of
    from ruizn.shell.cli.options import settings_from_cli
    from ruizn.terminal import visible

    settings, servers = settings_from_cli(
        workspace=workspace, tools=tools, no_plugins=no_plugins, mcp=mcp, mcp_headers=mcp_headers
    )
    toolbox = toolbox_of(settings, _root(workspace, log_dir))
    found = [(loaded.tool, loaded.source) for loaded in toolbox.tools]
    if servers:
        found += [(tool, tool.source()) for tool in mcp_tools_of(settings, servers)]
    listed = [
        {
            "name": tool.name,
            "source": {"kind": source.kind.value, "ref": source.ref},
            "read_only": bool(tool.read_only),
            "description": tool.description,
            "input_schema": tool.input_schema,
        }
        for tool, source in found
    ]

    def show() -> int:
        if as_json:
            click.echo(json.dumps(listed, ensure_ascii=False, indent=2))
            return EXIT_OK
        for (_, source), entry in zip(found, listed, strict=True):
            reads = " · read-only" if entry["read_only"] else ""
            click.echo(visible(f"{entry['name']}  ({source.describe()}{reads})"))
            for line in str(entry["description"]).splitlines():
                click.echo(visible(f"  {line}".rstrip()))
            schema = json.dumps(entry["input_schema"], ensure_ascii=False, separators=(",", ":"))
            click.echo(visible(f"  input schema: {schema}"))
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
    from ruizn.effects.runlog.store import default_root

    return default_root(workspace, log_dir)


def _store(workspace: str, log_dir: str | None, db: str | None) -> Any:
    """Where the runs are: the log folder, or a fleet's database (`--db`)."""
    if db is None:
        from ruizn.effects.runlog.store import FileStore

        return FileStore.at(workspace, log_dir)
    from ruizn.shell.cli.fleet import db_store

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
    from ruizn.shell.cli.logs import replay_run

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
@max_cost_option(
    "The run's new budget in US dollars: a total for the whole run, above what it has spent."
)
@max_context_option("A new context limit in tokens ('off': never clear).")
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
@new_approval_option
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
    max_cost: float | None,
    max_context: int | None,
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
    from ruizn.limits import Limits
    from ruizn.shell.cli.live import settings_or_fail
    from ruizn.shell.outcome import Resume

    if read_timeout is not None:
        settings_or_fail(read_timeout=read_timeout)  # checked like run's (no nan, no 0)
    request = Resume(
        limits=Limits(
            max_steps=max_steps, max_tokens=max_tokens, max_cost=max_cost, max_context=max_context
        ),
        read_timeout=read_timeout,
        approve=approve,
        deny=deny,
        reason=None if reason is None else checked_text("--reason", reason),
        approval=approval,  # type: ignore[arg-type]  # click.Choice of the modes
        trust=trust,
    )
    if db is not None:
        _refuse_local_options(ctx)
        from ruizn.shell.cli.fleet import resume_db

        raise Exit(resume_db(db, run, request))
    raise Exit(_go_on(run, request, workspace=workspace, log_dir=log_dir, mcp_headers=mcp_headers))


def _go_on(
    run: str, request: Resume, *, workspace: str, log_dir: str | None, mcp_headers: tuple[str, ...]
) -> int:
    """`resume` and `continue`: the terminal's agent resumes RUN as `request` says."""
    from ruizn.shell.cli.live import resume_run, settings_or_fail, terminal_agent

    agent = terminal_agent(
        settings_or_fail(workspace=workspace), log_dir=log_dir, mcp_headers=mcp_headers
    )
    return resume_run(agent, run, request)


@cli.command("continue")
@click.argument("run")
@click.argument("words", nargs=-1, metavar="[MESSAGE]...")
@click.option(
    "--max-steps",
    type=click.IntRange(min=1),
    default=None,
    help="Steps for this message (the run's new total is its steps plus N; default: the"
    " run's own limit).",
)
@click.option(
    "--max-tokens", type=click.IntRange(min=1), default=None, help="A new max_tokens per call."
)
@click.option("--read-timeout", type=float, default=None, help="See `ruizn run`.")
@mcp_header_option
@new_approval_option
@click.option(
    "--trust",
    is_flag=True,
    help="Continue a run ruizn did not start on this machine (see `ruizn resume --trust`).",
)
@where_options
def continue_command(
    run: str,
    words: tuple[str, ...],
    *,
    max_steps: int | None,
    max_tokens: int | None,
    read_timeout: float | None,
    mcp_headers: tuple[str, ...],
    approval: str | None,
    trust: bool,
    workspace: str,
    log_dir: str | None,
) -> None:
    """Add MESSAGE to RUN, a run that ended, and go on in the same log.

    The model sees the whole conversation, then the message (the arguments, or standard
    input when it is not a terminal). Printing, exit codes, locking and trust are resume's.
    """
    from ruizn.limits import Limits
    from ruizn.shell.cli.live import settings_or_fail
    from ruizn.shell.outcome import Resume

    message = " ".join(words) if words else None
    if message is None and not sys.stdin.isatty():
        message = sys.stdin.read() or None
    if message is None or not checked_text("the message", message).strip():
        raise UsageFailure("missing message: ruizn continue RUN MESSAGE..., or pipe it in")
    if read_timeout is not None:
        settings_or_fail(read_timeout=read_timeout)
    request = Resume(
        limits=Limits(max_steps=max_steps, max_tokens=max_tokens),
        read_timeout=read_timeout,
        approval=approval,  # type: ignore[arg-type]  # click.Choice of the modes
        trust=trust,
        message=message,
    )
    raise Exit(_go_on(run, request, workspace=workspace, log_dir=log_dir, mcp_headers=mcp_headers))


@cli.command("fork")
@click.argument("run")
@click.option(
    "--at",
    "at",
    type=click.IntRange(min=1),
    required=True,
    metavar="SEQ",
    help="The last event of RUN the fork keeps (a point between steps).",
)
@click.option(
    "--trust",
    is_flag=True,
    help="Vouch for the fork of a run ruizn did not start on this machine (see --trust of"
    " `ruizn resume`).",
)
@where_options
def fork_command(run: str, at: int, trust: bool, workspace: str, log_dir: str | None) -> None:
    """Write a new run holding RUN's events up to SEQ, and print its id.

    RUN is never touched. Go on with `ruizn resume NEW` (the model is asked again from there)
    or `ruizn continue NEW MESSAGE`. A SEQ inside a model call or a tool turn is refused,
    naming the nearest points between steps.
    """
    from ruizn.shell.cli.live import fork_run, settings_or_fail, terminal_agent

    agent = terminal_agent(settings_or_fail(workspace=workspace), log_dir=log_dir)
    raise Exit(fork_run(agent, run, at=at, trust=trust))


# Options of a local resume that a fleet's resume cannot honour: the worker that takes the
# run has its own workspace, logs, tools and MCP header values, and trusts its database.
# (--approve/--deny/--reason go with the order: the worker applies them.)
_LOCAL_ONLY = {
    "mcp_headers": "--mcp-header",
    "workspace": "--workspace",
    "log_dir": "--log-dir",
    "approval": "--approval",
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
    """List the runs, newest first: id, status, steps, time, tokens, cost, goal."""
    from ruizn.shell.cli.logs import list_runs

    store = _store(workspace, log_dir, db)
    raise Exit(_reading(lambda: list_runs(store)))


@cli.command("show")
@click.argument("run")
@where_options
@db_option
def show_command(run: str, workspace: str, log_dir: str | None, db: str | None) -> None:
    """Summarise one run: goal, model, status, steps, tools, usage, cost (per step too) and
    cache ratio."""
    from ruizn.shell.cli.logs import show_run

    store = _store(workspace, log_dir, db)
    raise Exit(_reading(lambda: show_run(store, run)))


@cli.command("rerun")
@click.argument("run")
@click.option("--show", is_flag=True, help="Print the re-driven run's transcript too.")
@click.option(
    "--trust",
    is_flag=True,
    help="Re-drive a recording ruizn did not make on this machine (it imports the tool modules"
    " and starts the MCP servers its log names; see `ruizn show RUN`).",
)
@mcp_header_option
@where_options
def rerun_command(
    run: str,
    *,
    show: bool,
    trust: bool,
    mcp_headers: tuple[str, ...],
    workspace: str,
    log_dir: str | None,
) -> None:
    """Drive RUN again as a new run: its model's replies come from the recording (no network,
    no key), its tools run for real here, and each request is compared with the recorded one.

    Identical: exit 0 and one line. The first divergence: exit 1, naming the recording's seq,
    the call and the tool, with a short diff (recorded vs now).
    """
    from ruizn.shell.agent import Agent
    from ruizn.shell.cli.live import notice, printer, rerun_run, settings_or_fail

    if not os.path.isdir(workspace):
        fail(f"--workspace {workspace!r} is not a folder")
    agent = Agent(
        settings=settings_or_fail(workspace=workspace),
        log_dir=log_dir,
        mcp_headers=mcp_headers,
        subscribers=(printer(),) if show else (),
        on_notice=notice,
    )
    raise Exit(rerun_run(agent, run, trust=trust))


@cli.command("diff")
@click.argument("run_a")
@click.argument("run_b")
@where_options
@db_option
def diff_command(
    run_a: str, run_b: str, workspace: str, log_dir: str | None, db: str | None
) -> None:
    """Compare RUN_A and RUN_B event by event, ignoring what must differ (run ids, times,
    durations, request ids, the workspace path): exit 0 "no difference", or exit 1 with the
    first differing seq of each and what each run came to."""
    from ruizn.shell.cli.logs import diff_runs

    store = _store(workspace, log_dir, db)
    raise Exit(_reading(lambda: diff_runs(store, run_a, run_b)))


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
@where_options
@db_option
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
    from ruizn.shell.cli.view import view_run

    store = _store(workspace, log_dir, db)
    raise Exit(view_run(store, run, out=output, open_browser=open_browser))


@cli.command("export")
@click.argument("run")
@click.option(
    "--otlp",
    metavar="URL",
    default=None,
    help="The OTLP/HTTP collector, e.g. http://localhost:4318 (default:"
    " $OTEL_EXPORTER_OTLP_ENDPOINT).",
)
@where_options
@db_option
def export_command(
    run: str, otlp: str | None, workspace: str, log_dir: str | None, db: str | None
) -> None:
    """Send RUN's spans (OpenTelemetry GenAI conventions) to a collector over OTLP/HTTP.
    Exporting twice sends the same trace."""
    from ruizn.shell.cli.view import export_run

    raise Exit(export_run(_store(workspace, log_dir, db), run, otlp=otlp))


# batch, worker and submit: the fleet layer (ruizn.fleet) adds its commands. Its module
# imports only click; DBOS loads inside the commands, so `ruizn --help` never imports it.
from ruizn.shell.cli.fleet import register as _register_fleet  # noqa: E402 - cli must exist

_register_fleet(cli)

from ruizn.shell.cli.models import models_command  # noqa: E402 - cli must exist

cli.add_command(models_command)

from ruizn.shell.cli.configured import config_command_of  # noqa: E402 - cli must exist

cli.add_command(config_command_of(run_options))


def main() -> None:
    from ruizn.shell.cli.sdklog import install

    install()  # before anything can import the MCP SDK (a run, a worker's thread)
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
