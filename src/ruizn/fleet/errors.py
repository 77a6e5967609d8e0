"""One-line errors for the fleet commands (exit 2), and the check for the `fleet` extra."""

from __future__ import annotations

import importlib.util
from typing import NoReturn

import click

EXIT_USAGE = 2


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    click.echo(f"ruizn: error: {message}", err=True)
    raise SystemExit(code)


def need_fleet_extra() -> None:
    if importlib.util.find_spec("dbos") is None or importlib.util.find_spec("sqlalchemy") is None:
        fail("fleets need DBOS: pip install 'ruizn[fleet]'")
