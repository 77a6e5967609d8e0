"""The fleet's commands: batch, worker, submit, and `--db` for runs/show/replay/resume.

Only click is imported at the top: `ruizn --help` must not pay for DBOS or SQLAlchemy, and
ruizn without the `fleet` extra still runs single goals. Everything else loads inside the
commands. `batch` and `submit` take every option `ruizn run` takes (`settings_options`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ruizn.cli.agents_cmd import agent_options
from ruizn.cli.exits import EXIT_CANCELLED, EXIT_OK, Exit, fail
from ruizn.cli.options import settings_options

if TYPE_CHECKING:  # `--help` does not pay for pathlib (and urllib, ipaddress) at start-up
    from pathlib import Path

DB_HELP = "The fleet's Postgres URL (env RUIZN_DB)."


def _fleet(work: Callable[[], int]) -> int:
    """A fleet function's refusal (FleetRefused) is one line and exit 2."""
    from ruizn.fleet.errors import FleetRefused

    try:
        return work()
    except FleetRefused as exc:
        fail(str(exc))


def _batch_max_cost(f: Any) -> Any:
    return click.option(
        "--batch-max-cost",
        type=click.FloatRange(min=0, min_open=True, max=1e12),
        default=None,
        metavar="USD",
        help="A budget in US dollars for the whole batch, shared by its runs and held in the"
        " database: once their calls cost this much, no run makes another (each ends"
        " max_cost). --max-cost is each run's own.",
    )(f)


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
            "--trust",
            is_flag=True,
            help="Also run queued runs not signed with this user's fleet key, each after"
            " its grant is shown.",
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


def _settings(options: dict[str, Any], workspace: str) -> tuple[Any, tuple[str, ...]]:
    """The runs' settings, and the MCP header values given (`NAME:KEY=VALUE`), which are
    never part of the settings: a batch hands them to its runs in memory. Subagents as
    `ruizn run` finds them (`--agents DIR`, the user's own; a workspace's only once the
    person at the terminal accepts them: a batch's --trust is about queued rows, not them)."""
    from ruizn.cli.agents_cmd import AGENT_OPTIONS, with_subagents
    from ruizn.cli.runoptions import options_from, settings_from_cli

    picked = {key: options.get(key) for key in AGENT_OPTIONS}
    rest = {k: v for k, v in options.items() if k != "profile" and k not in AGENT_OPTIONS}
    given = options_from({**rest, "workspace": workspace}, profile=options.get("profile"))
    settings, servers = settings_from_cli(given)
    settings = with_subagents(settings, picked, trust=False, other_yes="--agents DIR naming them")
    headers = tuple(
        f"{server.name}:{key}={value}" for server in servers for key, value in server.headers
    )
    return settings, headers


def _names_only(headers: tuple[str, ...]) -> tuple[str, ...]:
    """`submit --mcp-header NAME:KEY`: the run records the header's name, and each worker
    gives its value from its own $RUIZN_MCP_HEADER_<NAME>_<KEY>. A value given here would
    have to be stored in the database for the workers to see it: it is refused instead."""
    from ruizn.effects.mcp.config import header_env_name

    named = []
    for spec in headers:
        head, eq, _value = spec.partition("=")
        if eq:
            server, _, key = head.partition(":")
            fail(
                f"--mcp-header {head}=***: submit never stores a header's value in the fleet's"
                f" database; give --mcp-header {head} and set"
                f" ${header_env_name(server.strip(), key.strip())} on the workers"
            )
        named.append(spec + "=")  # a placeholder value: only the name is recorded
    return tuple(named)


@click.command("batch")
@click.argument("goals", type=click.Path(dir_okay=False))
@_worker_options
@_batch_max_cost
@settings_options
@agent_options
def batch_command(
    goals: str,
    *,
    concurrency: int,
    workspace: str,
    log_dir: str | None,
    tools_from: str | None,
    trust: bool,
    batch_max_cost: float | None,
    **options: Any,
) -> None:
    """Run every goal of GOALS.jsonl, N at once, on this machine (SQLite in the user's state
    directory, one database per workspace, never in the workspace).

    Running it again with the same file resumes: finished runs are not run again, and runs
    queued by `ruizn resume --db URL RUN` (the batch prints URL) go on. Exit 0 when every
    run succeeded, 4 when the others await approval, else 1."""
    import os

    from ruizn.cli.batch_helper import fork_helper
    from ruizn.cli.fleet_printer import (
        TerminalWatcher,
        batch_exit,
        print_batch,
        print_interrupted,
    )
    from ruizn.fleet.batch import run_batch
    from ruizn.fleet.errors import BatchInterrupted
    from ruizn.fleet.reports import BatchOptions

    settings, headers = _settings(options, workspace)
    batch = BatchOptions(
        goals=goals,
        settings=settings,
        concurrency=concurrency,
        workspace=workspace,
        log_dir=log_dir,
        tools_from=tools_from,
        mcp_headers=headers,
        trust=trust,
        batch_max_cost=batch_max_cost,
    )

    def run() -> int:
        watcher = TerminalWatcher()
        try:
            report = run_batch(batch, watcher, helper=fork_helper)
        except BatchInterrupted as exc:
            watcher.close()
            print_interrupted(str(exc))
            # Runs in flight stop where they are, as after kill -9: DBOS's threads are
            # not waited for.
            os._exit(EXIT_CANCELLED)
        watcher.close()
        print_batch(report)
        return batch_exit(report.statuses)

    raise Exit(_fleet(run))


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
    import os

    from ruizn.cli.fleet_printer import print_stopped, say
    from ruizn.fleet.worker import work

    def run() -> int:
        stopped = work(db, worker_id=worker_id, dead_after=dead_after, announce=say, **options)
        try:
            print_stopped(stopped)
        finally:
            # At once: no run goes on here while another worker takes it over.
            os._exit(EXIT_CANCELLED)

    raise Exit(_fleet(run))


@click.command("submit")
@click.argument("goals", type=click.Path(dir_okay=False), required=False)
@click.option("--db", envvar="RUIZN_DB", required=True, help=DB_HELP)
@click.option("--goal", default=None, help="One goal instead of a file.")
@click.option(
    "--workspace",
    default=".",
    help="Workspace on the workers, relative to each worker's own (default: theirs).",
)
@_batch_max_cost
@settings_options
@agent_options
def submit_command(
    goals: str | None,
    db: str,
    goal: str | None,
    workspace: str,
    batch_max_cost: float | None,
    **options: Any,
) -> None:
    """Queue GOALS.jsonl (or --goal TEXT) on the fleet; prints the run ids.

    An MCP server's header is given by name (--mcp-header NAME:KEY): each worker sends the
    value of its own $RUIZN_MCP_HEADER_<NAME>_<KEY>."""
    from ruizn.cli.fleet_printer import print_run_id
    from ruizn.fleet.worker import submit

    options["mcp_headers"] = _names_only(options["mcp_headers"])
    settings, _headers = _settings(options, workspace)

    def run() -> int:
        submit(
            db, goals, goal, settings=settings, batch_max_cost=batch_max_cost, queued=print_run_id
        )
        return EXIT_OK

    raise Exit(_fleet(run))


def db_store(db: str, root: Path) -> Any:
    """A fleet's database as the RunStore that `runs`, `show` and `replay` read."""
    from ruizn.fleet.errors import FleetRefused

    try:
        from ruizn.fleet.dbstore import DbRunStore
        from ruizn.fleet.worker import open_store

        return DbRunStore(open_store(db), root)
    except FleetRefused as exc:
        fail(str(exc))


def resume_on_fleet(db: str, run: str, request: Any) -> int:
    """`ruizn resume --db`: the request (an `agent.Resume`: limits, read timeout, decisions)
    goes to the fleet as an order."""
    from ruizn.cli.fleet_printer import print_queued
    from ruizn.fleet.worker import resume_db as resume

    def queue() -> int:
        print_queued(resume(db, run, request))
        return EXIT_OK

    return _fleet(queue)
