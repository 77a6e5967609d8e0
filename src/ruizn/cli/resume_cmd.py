"""The commands that go on from a run's log: resume, continue, fork and rerun."""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Any

import click

from ruizn.cli.exits import Exit, fail
from ruizn.cli.options import (
    UsageFailure,
    checked_text,
    db_option,
    max_context_option,
    max_cost_option,
    mcp_header_option,
    new_approval_option,
    where_options,
)
from ruizn.defaults import DEFAULT_READ_TIMEOUT

if TYPE_CHECKING:
    from ruizn.shell.outcome import Resume

__all__ = ["continue_command", "fork_command", "rerun_command", "resume_command"]


@click.command("resume")
@click.argument("run", required=False)
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
    run: str | None,
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

    Without RUN, the workspace's newest run, named first.

    A run that waits for approval goes on with --approve/--deny deciding its calls (at a
    terminal, ruizn asks about any call they leave waiting). With --db, RUN is a fleet's run:
    it is queued again, with the decisions, and a worker continues it.
    """
    from ruizn.cli.live import settings_or_fail
    from ruizn.limits import Limits
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
        if run is None:
            raise UsageFailure("with --db, name the RUN to resume")
        from ruizn.cli.fleet import resume_on_fleet

        raise Exit(resume_on_fleet(db, run, request))
    raise Exit(_go_on(run, request, workspace=workspace, log_dir=log_dir, mcp_headers=mcp_headers))


def _go_on(
    run: str | None,
    request: Resume,
    *,
    workspace: str,
    log_dir: str | None,
    mcp_headers: tuple[str, ...],
) -> int:
    """`resume` and `continue`: the terminal's agent resumes RUN as `request` says; with no
    RUN, the workspace's newest run, named on stderr before anything else happens."""
    from ruizn.cli.live import resume_run, settings_or_fail, terminal_agent

    agent = terminal_agent(
        settings_or_fail(workspace=workspace), log_dir=log_dir, mcp_headers=mcp_headers
    )
    if run is None:
        run = _newest(agent)
    return resume_run(agent, run, request)


def _newest(agent: Any) -> str:
    from ruizn.effects.runlog.store import LAST, RunNotFound

    try:
        ref = agent.store().find(LAST)
    except RunNotFound as exc:
        fail(str(exc))
    click.echo(f"ruizn: going on with {ref.run_id}, the newest run here", err=True)
    return str(ref.run_id)


def _is_run(run: str, workspace: str, log_dir: str | None) -> bool:
    """Whether `continue`'s first word names a run (a path, an id or its start, `last`) or
    looks like one (a run id's date, a path): else it is the message's first word."""
    from ruizn.effects.runlog.store import RunNotFound, default_root, resolve_run

    if re.match(r"\d{4}", run) or "/" in run or run.endswith(".jsonl"):
        return True
    try:
        resolve_run(run, default_root(workspace, log_dir))
    except RunNotFound:
        return False
    return True


@click.command("continue")
@click.argument("run", required=False, metavar="[RUN]")
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
    run: str | None,
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
    """Add MESSAGE to RUN, a run that ended, and go on in the same log. Without RUN (a first
    word that names no run and does not look like one), the workspace's newest run, named
    first.

    The model sees the whole conversation, then the message (the arguments, or standard
    input when it is not a terminal). Printing, exit codes, locking and trust are resume's.
    """
    from ruizn.cli.live import settings_or_fail
    from ruizn.limits import Limits
    from ruizn.shell.outcome import Resume

    if run is not None and not _is_run(run, workspace, log_dir):
        words = (run, *words)
        run = None
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


@click.command("fork")
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
@click.option(
    "--into",
    type=click.Path(file_okay=False),
    default=None,
    metavar="DIR",
    help="Write the workspace's files as they were at SEQ (from RUN's checkpoints) into DIR,"
    " a new or empty folder, and make it the fork's workspace.",
)
@where_options
def fork_command(
    run: str, *, at: int, trust: bool, into: str | None, workspace: str, log_dir: str | None
) -> None:
    """Write a new run holding RUN's events up to SEQ, and print its id.

    RUN is never touched. Go on with `ruizn resume NEW` (the model is asked again from there)
    or `ruizn continue NEW MESSAGE`. A SEQ inside a model call or a tool turn is refused,
    naming the nearest points between steps. Without --into the fork's workspace is RUN's,
    as its files are now.
    """
    from ruizn.cli.live import fork_run, settings_or_fail, terminal_agent

    agent = terminal_agent(settings_or_fail(workspace=workspace), log_dir=log_dir)
    raise Exit(fork_run(agent, run, at=at, trust=trust, into=into))


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


@click.command("rerun")
@click.argument("run")
@click.option("--show", is_flag=True, help="Print the re-driven run's transcript too.")
@click.option(
    "--in-place",
    is_flag=True,
    help="Run the tools in your workspace as it is now (default: a scratch copy of the files"
    " as they were when RUN started, so your tree is never touched).",
)
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
    in_place: bool,
    trust: bool,
    mcp_headers: tuple[str, ...],
    workspace: str,
    log_dir: str | None,
) -> None:
    """Drive RUN again as a new run: its model's replies come from the recording (no network,
    no key), its tools run for real in a scratch copy of the files, and each request is
    compared with the recorded one.

    The tools run in a scratch copy of the files as they were when RUN started (its first
    checkpoint; without one, a copy of the workspace), and the command says where; --in-place
    runs them in your workspace.

    Identical: exit 0 and one line. The first divergence: exit 1, naming the recording's seq,
    the call and the tool, with a short diff (recorded vs now).
    """
    from ruizn.cli.live import notice, printer, rerun_run, settings_or_fail
    from ruizn.shell.agent import Agent

    if not os.path.isdir(workspace):
        fail(f"--workspace {workspace!r} is not a folder")
    agent = Agent(
        settings=settings_or_fail(workspace=workspace),
        log_dir=log_dir,
        mcp_headers=mcp_headers,
        subscribers=(printer(),) if show else (),
        on_notice=notice,
    )
    raise Exit(rerun_run(agent, run, trust=trust, in_place=in_place))
