"""Tables that fit the terminal: `runs`, `runs --db` and the batch table.

At a terminal, each column is as wide as its widest cell, the columns that can go (IN, OUT,
TIME...) go when the row would leave the last column (the goal) too little room, and the
goal takes what is left, cut with "…". Piped, every row is whole: nothing is cut or dropped,
so `grep` and files see all of it.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Sequence
from typing import NamedTuple

# The goal is worth a column of its own: below this, columns that can go go first.
GOAL_ROOM = 16


class Column(NamedTuple):
    """A column's layout. A NamedTuple, not an attrs record: a warm `ruizn runs` prints
    through this module and must start without importing attrs."""

    title: str
    right: bool = False  # numbers line up on the right
    width: int = 0  # the least width piped (a fixed layout scripts may read)
    drop: int = 0  # 0: always shown; else dropped at a narrow terminal, the highest first


def terminal_width() -> int | None:
    """The terminal's columns when stdout is one (COLUMNS wins, as shutil reads it)."""
    if not sys.stdout.isatty():
        return None
    import shutil  # only at a terminal: piped `ruizn runs` starts without it

    return shutil.get_terminal_size().columns


def cells(text: str) -> int:
    """How many terminal cells `text` takes: wide (CJK) characters two, combining marks
    none."""
    total = 0
    for char in text:
        if unicodedata.combining(char):
            continue
        total += 2 if unicodedata.east_asian_width(char) in "WF" else 1
    return total


def clip(text: str, room: int) -> str:
    """`text` cut to `room` cells, ending in "…" when cut."""
    if cells(text) <= room:
        return text
    if room <= 0:
        return ""
    out, used = [], 0
    for char in text:
        size = 0 if unicodedata.combining(char) else cells(char)
        if used + size > room - 1:
            break
        out.append(char)
        used += size
    return "".join(out) + "…"


def _pad(text: str, width: int, right: bool) -> str:
    space = " " * max(width - cells(text), 0)
    return space + text if right else text + space


def render(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    *,
    last: str,
    lasts: Sequence[str],
    width: int | None,
    whole: Sequence[bool] = (),
) -> list[str]:
    """The header and the rows: `columns` with their cells, then the `last` column (two
    spaces before it) holding `lasts`, fitted to `width` cells (None: piped, whole). A row
    marked in `whole` keeps its last cell uncut even at a terminal (a reason naming a file)."""
    shown = list(range(len(columns)))
    widths = [
        max(
            [cells(column.title), *(cells(row[i]) for row in rows)]
            + ([column.width] if width is None else [])
        )
        for i, column in enumerate(columns)
    ]

    def fixed() -> int:
        return sum(widths[i] + 1 for i in shown) - 1 + 2

    if width is not None:
        droppable = [i for i, column in enumerate(columns) if column.drop]
        for i in sorted(droppable, key=lambda i: -columns[i].drop):
            if width - fixed() >= GOAL_ROOM:
                break
            shown.remove(i)

    def line(texts: Sequence[str], tail: str, keep: bool = False) -> str:
        head = " ".join(_pad(texts[i], widths[i], columns[i].right) for i in shown)
        text = f"{head}  {tail}"
        if width is None or keep:
            return text.rstrip()
        room = width - fixed()
        if room < 1:  # still too narrow: the row itself is cut
            return clip(head, width)
        return f"{head}  {clip(tail, room)}".rstrip()

    out = [line([c.title for c in columns], last)]
    keeps = list(whole) + [False] * (len(rows) - len(whole))
    out += [line(row, tail, keep) for row, tail, keep in zip(rows, lasts, keeps, strict=True)]
    return out
