"""The commands that read runs and change nothing: runs, show, replay, diff, view, export.
None of them talks to the API (no SDK logging is installed for them)."""

from __future__ import annotations

import click

from ruizn.cli.common import reading, run_store
from ruizn.cli.exits import Exit
from ruizn.cli.options import db_option, where_options

__all__ = [
    "diff_command",
    "export_command",
    "replay_command",
    "runs_command",
    "show_command",
    "view_command",
]


@click.command("replay")
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
    from ruizn.cli.logs import replay_run

    store = run_store(workspace, log_dir, db)
    raise Exit(reading(lambda: replay_run(store, run, as_json=as_json)))


@click.command("runs")
@where_options
@db_option
def runs_command(workspace: str, log_dir: str | None, db: str | None) -> None:
    """List the runs, newest first: id, status, steps, time, tokens, cost, goal."""
    from ruizn.cli.runs_list import list_folder, list_store

    if db is None:  # a log folder: its rows come from the cache where its logs are unchanged
        raise Exit(reading(lambda: list_folder(workspace, log_dir)))
    store = run_store(workspace, log_dir, db)
    raise Exit(reading(lambda: list_store(store)))


@click.command("show")
@click.argument("run")
@where_options
@db_option
def show_command(run: str, workspace: str, log_dir: str | None, db: str | None) -> None:
    """Summarise one run: goal, model, status, steps, tools, usage, cost (per step too) and
    cache ratio."""
    from ruizn.cli.logs import show_run

    store = run_store(workspace, log_dir, db)
    raise Exit(reading(lambda: show_run(store, run)))


@click.command("diff")
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
    from ruizn.cli.logs import diff_runs

    store = run_store(workspace, log_dir, db)
    raise Exit(reading(lambda: diff_runs(store, run_a, run_b)))


@click.command("view")
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
    from ruizn.cli.view import view_run

    store = run_store(workspace, log_dir, db)
    raise Exit(view_run(store, run, out=output, open_browser=open_browser))


@click.command("export")
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
    from ruizn.cli.view import export_run

    raise Exit(export_run(run_store(workspace, log_dir, db), run, otlp=otlp))
