"""Exit codes and the one-line error: the only place library errors become process exits.

Kept free of the state module, so `ruizn --help` imports nothing but click.
"""

from __future__ import annotations

from typing import NoReturn

import click

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_MAX_STEPS, EXIT_CANCELLED = 0, 1, 2, 3, 130
# The run stopped cleanly with tool calls waiting for a person's decision.
EXIT_AWAITING_APPROVAL = 4
# The answer never matched the run's output schema (--output-schema), retries included.
EXIT_OUTPUT_INVALID = 5
# Keyed by Status values (a StrEnum hashes as its value).
EXIT_CODES = {
    "success": EXIT_OK,
    "error": EXIT_ERROR,
    "max_steps": EXIT_MAX_STEPS,
    "max_cost": EXIT_MAX_STEPS,  # a limit, like the step limit
    "cancelled": EXIT_CANCELLED,
    "awaiting_approval": EXIT_AWAITING_APPROVAL,
    "output_invalid": EXIT_OUTPUT_INVALID,
    "running": EXIT_ERROR,
}


class Exit(Exception):
    """Leave the command with `code` after printing `message` (if any) as one line."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message or "")
        self.code = code
        self.message = message


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    raise Exit(code, message)


def echo_error(message: str) -> None:
    # One line, always: a message with a newline in it (an API's text) is folded, and no
    # control character in it (a model's, a file name's) reaches the terminal.
    from ruizn.terminal import visible

    click.echo("ruizn: error: " + visible(" ".join(message.split())), err=True)
