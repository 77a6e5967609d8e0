"""The fleet's typed errors, and the check for the `fleet` extra. The fleet is a library: it
raises these and returns reports (fleet/reports.py); the CLI turns them into one line and an
exit code (cli/fleet_printer.py)."""

from __future__ import annotations

import importlib.util

__all__ = ["BatchInterrupted", "FleetRefused", "need_fleet_extra"]


class FleetRefused(Exception):
    """A fleet call cannot go on; the message is one line for the user. Nothing was queued
    or started by the call that raised it."""


class BatchInterrupted(Exception):
    """The batch was interrupted (Ctrl-C) while it waited: runs in flight stop where they
    are, as after kill -9, and the same batch started again resumes them. DBOS is left
    running: the caller should end the process rather than go on with it."""

    def __init__(self, goals: str) -> None:
        super().__init__(f"batch interrupted; run `ruizn batch {goals}` again to resume")
        self.goals = goals


def need_fleet_extra() -> None:
    if importlib.util.find_spec("dbos") is None or importlib.util.find_spec("sqlalchemy") is None:
        from ruizn.effects.packaging.extras import install_command

        raise FleetRefused(f"fleets need DBOS (the fleet extra): {install_command('fleet')}")
