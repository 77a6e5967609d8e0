"""One-line errors for the fleet commands (exit 2), and the check for the `fleet` extra."""

from __future__ import annotations

import importlib.util
from typing import NoReturn

from ruizn.shell.exits import EXIT_USAGE, Exit


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    raise Exit(code, message)  # printed as one line by the CLI's main


def need_fleet_extra() -> None:
    if importlib.util.find_spec("dbos") is None or importlib.util.find_spec("sqlalchemy") is None:
        fail("fleets need DBOS: pip install 'ruizn[fleet]'")
