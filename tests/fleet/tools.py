"""A tool that is not read-only, for the fleet tests: it appends a line to notes.txt.

Each call writes one line with one write(2) in append mode, so counting a note's lines
counts how many times the tool really ran, across processes and machines' worth of workers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ruizn.effects.tools import BaseTool, BlockingTool

NOTES = "notes.txt"


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
