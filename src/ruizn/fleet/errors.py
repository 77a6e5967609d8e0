"""The fleet's one-line errors, and the check for the `fleet` extra."""

from __future__ import annotations

import importlib.util
from typing import NoReturn


class FleetError(Exception):
    """A fleet command cannot go on; the message is one line for the user (the CLI prints it
    and exits 2)."""


def fail(message: str) -> NoReturn:
    raise FleetError(message)


def need_fleet_extra() -> None:
    if importlib.util.find_spec("dbos") is None or importlib.util.find_spec("sqlalchemy") is None:
        from ruizn.effects.packaging.extras import install_command

        fail(f"fleets need DBOS (the fleet extra): {install_command('fleet')}")
