"""The fleet's commands: batch, worker, submit, and `--db` for runs/show/replay/resume.

Only click is imported at the top: `ruizn --help` must not pay for DBOS or SQLAlchemy, and
ruizn without the `fleet` extra still runs single goals. Everything else loads inside the
commands. `batch` and `submit` take every option `ruizn run` takes (`settings_options`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ruizn.shell.exits import Exit, fail
from ruizn.shell.options import settings_options

DB_HELP = "The fleet's Postgres URL (env RUIZN_DB)."


def _fleet(work: Callable[[], int]) -> int:
    """A fleet function's refusal (FleetError) is one line and exit 2."""
    from ruizn.fleet.errors import FleetError

    try:
        return work()
    except FleetError as exc:
        fail(str(exc))


def _worker_options(f: Any) -> Any:
    options = [
        click.option(
            "--concurrency",
            type=click.IntRange(min=1),
            default=4,
            show_default=True,
            help="Runs at once in this process.",
        ),
        click.option(
            "--workspace",
            type=click.Path(exists=True, file_okay=False),
            default=".",
            help="Folder of runs whose line names none.",
        ),
        click.option(
            "--log-dir",
            type=click.Path(),
            default=None,
            help="Root of the run logs (default: WORKSPACE/.ruizn/runs).",
        ),
        click.option(
            "--tools-from",
            default=None,
            metavar="MODULE:FUNCTION",
            help="A function of the workspace giving extra tools for every run.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def _settings(options: dict[str, Any], workspace: str) -> Any:
    from ruizn.shell.options import settings_from_cli

    settings, _servers = settings_from_cli(workspace=workspace, **options)
    return settings


@click.command("batch")
@click.argument("goals", type=click.Path(dir_okay=False))
@_worker_options
@settings_options
def batch_command(
    goals: str,
    *,
    concurrency: int,
    workspace: str,
    log_dir: str | None,
    tools_from: str | None,
    **options: Any,
) -> None:
    """Run every goal of GOALS.jsonl, N at once, on this machine (SQLite under the log dir).

    Running it again with the same file resumes: finished runs are not run again."""
    from ruizn.fleet.run_batch import batch

    settings = _settings(options, workspace)
    raise Exit(
        _fleet(
            lambda: batch(
                goals,
                concurrency=concurrency,
                workspace=workspace,
                log_dir=log_dir,
                tools_from=tools_from,
                settings=settings,
            )
        )
    )


@click.command("worker")
@click.option("--db", envvar="RUIZN_DB", required=True, help=DB_HELP)
@click.option("--id", "worker_id", default=None, help="This worker's name (default host-pid).")
@click.option(
    "--dead-after",
    type=click.FloatRange(min=0.5),
    default=30.0,
    show_default=True,
    help="Seconds without a heartbeat before a worker's runs are taken over.",
)
@_worker_options
def worker_command(db: str, worker_id: str | None, dead_after: float, **options: Any) -> None:
    """Take runs from the fleet's database until Ctrl-C or SIGTERM."""
    from ruizn.fleet.run_worker import work

    raise Exit(_fleet(lambda: work(db, worker_id=worker_id, dead_after=dead_after, **options)))


@click.command("submit")
@click.argument("goals", type=click.Path(dir_okay=False), required=False)
@click.option("--db", envvar="RUIZN_DB", required=True, help=DB_HELP)
@click.option("--goal", default=None, help="One goal instead of a file.")
@click.option(
    "--workspace",
    default=".",
    help="Workspace on the workers, relative to each worker's own (default: theirs).",
)
@settings_options
def submit_command(
    goals: str | None, db: str, goal: str | None, workspace: str, **options: Any
) -> None:
    """Queue GOALS.jsonl (or --goal TEXT) on the fleet; prints the run ids."""
    from ruizn.fleet.run_worker import submit

    settings = _settings(options, workspace)
    raise Exit(_fleet(lambda: submit(db, goals, goal, settings=settings)))


def register(cli: click.Group) -> None:
    for command in (batch_command, worker_command, submit_command):
        cli.add_command(command)


def db_store(db: str, root: Path) -> Any:
    """A fleet's database as the RunStore that `runs`, `show` and `replay` read."""
    from ruizn.fleet.errors import FleetError

    try:
        from ruizn.fleet.run_worker import open_store
        from ruizn.fleet.runstore import DbRunStore

        return DbRunStore(open_store(db), root)
    except FleetError as exc:
        fail(str(exc))


def resume_db(
    db: str,
    run: str,
    *,
    max_steps: int | None,
    max_tokens: int | None,
    max_cost: float | None = None,
    max_context: int | None = None,
    read_timeout: float | None,
) -> int:
    from ruizn.fleet.run_worker import resume_db as resume

    return _fleet(
        lambda: resume(
            db,
            run,
            max_steps=max_steps,
            max_tokens=max_tokens,
            max_cost=max_cost,
            max_context=max_context,
            read_timeout=read_timeout,
        )
    )
