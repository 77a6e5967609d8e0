"""The fleet's commands: batch, worker, submit, and `--db` for runs/show/replay/resume.

Only click is imported at the top: `ruizn --help` must not pay for DBOS or SQLAlchemy, and
ruizn without the `fleet` extra still runs single goals. Everything else loads inside the
commands.
"""

from __future__ import annotations

from typing import Any

import click

from ruizn.shell.exits import Exit

DB_HELP = "The fleet's Postgres URL (env RUIZN_DB)."


def _common(f: Any) -> Any:
    from ruizn.config import (
        DEFAULT_MAX_RETRIES,
        DEFAULT_MAX_STEPS,
        DEFAULT_MAX_TOKENS,
        DEFAULT_MODEL,
        DEFAULT_READ_TIMEOUT,
        DEFAULT_SYSTEM,
    )

    options = [
        click.option(
            "--model",
            envvar="RUIZN_MODEL",
            default=DEFAULT_MODEL,
            show_default=True,
            help="Model of runs whose line names none.",
        ),
        click.option(
            "--max-steps",
            type=click.IntRange(min=1),
            default=DEFAULT_MAX_STEPS,
            show_default=True,
        ),
        click.option(
            "--max-tokens",
            type=click.IntRange(min=1),
            default=DEFAULT_MAX_TOKENS,
            show_default=True,
        ),
        click.option("--system", default=DEFAULT_SYSTEM, help="System prompt."),
        click.option(
            "--read-timeout", type=click.FloatRange(min=0.1), default=DEFAULT_READ_TIMEOUT
        ),
        click.option("--max-retries", type=click.IntRange(min=0), default=DEFAULT_MAX_RETRIES),
    ]
    for option in reversed(options):
        f = option(f)
    return f


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


@click.command("batch")
@click.argument("goals", type=click.Path(dir_okay=False))
@_worker_options
@_common
def batch_command(goals: str, **options: Any) -> None:
    """Run every goal of GOALS.jsonl, N at once, on this machine (SQLite under the log dir).

    Running it again with the same file resumes: finished runs are not run again."""
    from ruizn.fleet.run_batch import batch

    raise Exit(batch(goals, **options))


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

    raise Exit(work(db, worker_id=worker_id, dead_after=dead_after, **options))


@click.command("submit")
@click.argument("goals", type=click.Path(dir_okay=False), required=False)
@click.option("--db", envvar="RUIZN_DB", required=True, help=DB_HELP)
@click.option("--goal", default=None, help="One goal instead of a file.")
@click.option(
    "--workspace", default=None, help="Workspace on the workers (default: each worker's own)."
)
@_common
def submit_command(goals: str | None, db: str, goal: str | None, **options: Any) -> None:
    """Queue GOALS.jsonl (or --goal TEXT) on the fleet; prints the run ids."""
    from ruizn.fleet.run_worker import submit

    raise Exit(submit(db, goals, goal, **options))


def register(cli: click.Group) -> None:
    for command in (batch_command, worker_command, submit_command):
        cli.add_command(command)


# `--db` for runs/show/replay/resume, called from ruizn.shell.cli.


def runs_db(db: str) -> int:
    from ruizn.fleet.run_worker import list_runs_db

    return list_runs_db(db)


def show_db(db: str, run: str) -> int:
    from ruizn.fleet.run_worker import show_db as show

    return show(db, run, what="show")


def replay_db(db: str, run: str, *, as_json: bool) -> int:
    from ruizn.fleet.run_worker import show_db as show

    return show(db, run, what="replay", as_json=as_json)


def resume_db(
    db: str,
    run: str,
    *,
    max_steps: int | None,
    max_tokens: int | None,
    read_timeout: float | None,
) -> int:
    from ruizn.fleet.run_worker import resume_db as resume

    return resume(db, run, max_steps=max_steps, max_tokens=max_tokens, read_timeout=read_timeout)
