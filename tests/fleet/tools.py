"""Tools for the fleet tests. `note` is not read-only: it appends a line to notes.txt.

Each call writes one line with one write(2) in append mode, so counting a note's lines
counts how many times the tool really ran, across processes and machines' worth of workers.
`nap` and `shout` are read-only tools the options tests give with `--tool` / `tool_specs`.
`linger` notes as `note` does, then waits for a gate file: a kill while it waits cuts a call
whose effect is done and whose end is not logged.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ruizn.effects.tools.base import BaseTool, BlockingTool

NOTES = "notes.txt"
NAP_SECONDS = 0.3
GATE = "gate"
LINGER_SECONDS = 60.0


class NoteTool(BlockingTool):
    name = "note"
    description = "Append a note to notes.txt."
    input_schema: dict[str, Any] = {  # noqa: RUF012 (the tool API's class attribute)
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    read_only = False

    def __init__(self, workspace: Path) -> None:
        super().__init__()
        self._path = workspace / NOTES

    def run(self, input: dict[str, Any]) -> str:
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (input["text"] + "\n").encode())
        finally:
            os.close(fd)
        return "noted"


def make_tools(workspace: Path) -> Sequence[BaseTool]:
    return [NoteTool(workspace)]


class LingerTool(NoteTool):
    """Not read-only: appends its note, then answers only once the workspace holds the file
    `gate` (or after a minute)."""

    name = "linger"
    description = "Append a note to notes.txt, then wait."

    def __init__(self, workspace: Path) -> None:
        super().__init__(workspace)
        self._gate = workspace / GATE

    def run(self, input: dict[str, Any]) -> str:
        super().run(input)
        deadline = time.monotonic() + LINGER_SECONDS
        while not self._gate.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return "noted, then waited"


def make_linger_tools(workspace: Path) -> Sequence[BaseTool]:
    return [NoteTool(workspace), LingerTool(workspace)]


class NapTool(BlockingTool):
    """Sleeps a moment: two calls of one turn overlap in the log only when the run's
    tool_concurrency lets them run at once. Given with `--tool tests.fleet.tools:NapTool`."""

    name = "nap"
    description = "Sleep for a moment."
    input_schema: dict[str, Any] = {  # noqa: RUF012 (the tool API's class attribute)
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
    read_only = True

    def run(self, input: dict[str, Any]) -> str:
        time.sleep(NAP_SECONDS)
        return "rested"


class ShoutTool(BlockingTool):
    """Upper-cases its text: a tool a goals-file line asks for (`tool_specs`)."""

    name = "shout"
    description = "Repeat the text in capitals."
    input_schema: dict[str, Any] = {  # noqa: RUF012 (the tool API's class attribute)
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    read_only = True

    def run(self, input: dict[str, Any]) -> str:
        return str(input["text"]).upper()
