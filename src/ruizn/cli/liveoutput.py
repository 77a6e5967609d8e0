"""A running `bash` command's last lines at a terminal, drawn in place while it runs, gone
when it ends (the printer's folded line `exit 1 · 2.6 KB · 0.4s` takes their place).

Display only: the lines are not events, so the log, `replay` and piped output are the same
as without them; the CLI makes one only when its transcript goes to a terminal. The bash
tool hands over the end of the output (effects/tools/bash.py `CommandOutput`), on the event
loop's thread, the thread the printer writes on too; the printer clears the lines before it
writes an event's line, and draws them again below it.

Every line goes through `terminal.visible` like all tool output, is cut to the terminal's
width (so the rows drawn are the rows erased) and keeps only what follows its last carriage
return (what a progress bar leaves on a terminal).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TextIO

from ruizn.terminal import visible

__all__ = ["LIVE_LINES", "LiveLines"]

# How many of a running command's last lines are shown.
LIVE_LINES = 5
_DIM, _RESET = "\x1b[2m", "\x1b[0m"
_MARGIN = "  │ "


class LiveLines:
    """The last lines of the commands running now, below the transcript."""

    def __init__(
        self, out: TextIO, *, color: bool, before: Callable[[], None] = lambda: None
    ) -> None:
        self._out = out
        self._color = color
        self._before = before  # the printer's: end a streamed line first
        self._tails: dict[str, list[str]] = {}
        self._drawn = 0  # rows on the screen now, the cursor on the row below them
        self._broken = False

    def running(self, job: str, tail: str) -> None:
        lines = tail.split("\n")
        if lines and not lines[-1]:
            lines.pop()
        self._tails[job] = [line.rsplit("\r", 1)[-1] for line in lines[-LIVE_LINES:]]
        self._draw()

    def ended(self, job: str) -> None:
        if self._tails.pop(job, None) is not None:
            self._draw()

    def redraw(self) -> None:
        """Draw the lines again (after the printer wrote), if a command still runs."""
        if self._tails:
            self._draw()

    def clear(self) -> None:
        """Take the lines off the screen (the printer is about to write)."""
        if self._drawn:
            self._write(f"\r\x1b[{self._drawn}A\x1b[J")
            self._drawn = 0

    def _draw(self) -> None:
        if self._broken:
            return
        self.clear()
        if not self._tails:
            return
        columns, rows = _size(self._out)
        shown = [line for tail in self._tails.values() for line in tail][-max(1, rows - 2) :]
        if not shown:
            return
        self._before()
        text = "".join(self._line(line, columns) for line in shown)
        self._write(text)
        if not self._broken:
            self._drawn = len(shown)

    def _line(self, line: str, columns: int) -> str:
        from rich.cells import cell_len, set_cell_size

        text = visible(_MARGIN + line.expandtabs(4))
        if cell_len(text) >= columns:
            text = set_cell_size(text, columns - 1)
        return (f"{_DIM}{text}{_RESET}" if self._color else text) + "\n"

    def _write(self, text: str) -> None:
        try:
            self._out.write(text)
            self._out.flush()
        except (BrokenPipeError, ValueError, OSError):
            self._broken = True


def _size(out: TextIO) -> tuple[int, int]:
    try:
        columns, rows = os.get_terminal_size(out.fileno())
    except (AttributeError, OSError, ValueError):
        return 80, 24
    return (columns or 80), (rows or 24)
