"""What several commands share: where the runs are (`--workspace`, `--log-dir`, `--db`), how a
read command ends when its reader goes away, and the run's `--otlp` option."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import click

from ruizn.cli.exits import EXIT_OK

__all__ = ["otlp_option", "quiet_flush", "reading", "run_root", "run_store"]


def otlp_option(f: Any) -> Any:
    return click.option(
        "--otlp",
        metavar="URL",
        default=None,
        help="Also send the run's spans to this OTLP/HTTP collector as it goes"
        " (e.g. http://localhost:4318); a collector that is down never stops the run.",
    )(f)


def reading(command: Callable[[], int]) -> int:
    """A read command whose reader went away (`| head -1`) ends as if all was read: exit 0,
    as `run` does. Caught here, before click, which would turn EPIPE into exit 1."""
    try:
        return command()
    except BrokenPipeError:
        quiet_flush()
        return EXIT_OK


def run_root(workspace: str, log_dir: str | None) -> Any:
    from ruizn.effects.runlog.store import default_root

    return default_root(workspace, log_dir)


def run_store(workspace: str, log_dir: str | None, db: str | None) -> Any:
    """Where the runs are: the log folder, or a fleet's database (`--db`)."""
    if db is None:
        from ruizn.effects.runlog.store import FileStore

        return FileStore.at(workspace, log_dir)
    from ruizn.cli.fleet import db_store

    return db_store(db, run_root(workspace, log_dir))


def quiet_flush() -> None:
    """A reader that went away must not turn into a traceback at exit."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
