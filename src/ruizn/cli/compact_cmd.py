"""`ruizn compact RUN`: a stopped run's history compacted into one summary, by hand."""

from __future__ import annotations

import click

from ruizn.cli.exits import EXIT_ERROR, EXIT_OK, Exit, fail
from ruizn.cli.options import checked_text, where_options

__all__ = ["compact_command"]


@click.command("compact")
@click.argument("run")
@click.option(
    "--instructions",
    default=None,
    metavar="TEXT",
    help="What the summary must keep (added to the run's --compact-instructions).",
)
@click.option(
    "--trust",
    is_flag=True,
    help="Compact a run ruizn did not start on this machine (or whose log changed).",
)
@where_options
def compact_command(
    run: str, instructions: str | None, trust: bool, workspace: str, log_dir: str | None
) -> None:
    """Compact RUN, a run that stopped: its history becomes one summary, recorded in its log.

    The model's own compaction where the Models API says it takes it, else ruizn asks the
    model for a summary (docs/compaction.md). Go on with `ruizn resume RUN` or `ruizn
    continue RUN MESSAGE`: the model then sees the summary, not the history it replaced.
    """
    import anyio

    from ruizn.cli.live import USAGE_ERRORS, settings_or_fail, terminal_agent
    from ruizn.resuming import UntrustedRun
    from ruizn.shell.compacting import CompactionFailed
    from ruizn.terminal import visible

    said = None if instructions is None else checked_text("--instructions", instructions)
    agent = terminal_agent(settings_or_fail(workspace=workspace), log_dir=log_dir)
    try:
        result = anyio.run(lambda: agent.compact_async(run, instructions=said, trust=trust))
    except USAGE_ERRORS as exc:
        fail(str(exc))
    except UntrustedRun as exc:
        fail(str(exc))
    except CompactionFailed as exc:
        click.echo(f"ruizn: {visible(str(exc))}", err=True)
        raise Exit(EXIT_ERROR) from None
    click.echo(
        f"compacted {result.run_id}: go on with `ruizn resume {result.run_id}` or"
        f" `ruizn continue {result.run_id} MESSAGE`",
        err=True,
    )
    raise Exit(EXIT_OK)
