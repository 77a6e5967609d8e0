"""The model's answer as Markdown at a terminal: streamed token by token as it comes, then,
when the text turns out to be Markdown, drawn again in place by rich (headings, lists, code
blocks with highlighting). Piped output never comes here: it keeps the text as written.

Only text that still fits on the screen is drawn again (the rows it took are counted in
terminal cells, wide characters included); a longer answer stays as it was streamed.
"""

from __future__ import annotations

import io
import math
import re

__all__ = ["looks_like_markdown", "redrawn", "rows_taken"]

# What makes a plain answer worth drawing again: a heading, a list, a fence, emphasis, a
# table row, a quote or a link.
_MARKDOWN = re.compile(
    r"(?m)^(#{1,6} |\s*[-*+] |\s*\d+[.)] |```|> |\|.*\|)|\*\*[^*\n]+\*\*|`[^`\n]+`|\[[^\]\n]+\]\("
)


def looks_like_markdown(text: str) -> bool:
    return _MARKDOWN.search(text) is not None


def rows_taken(text: str, columns: int) -> int:
    """The terminal rows `text` took, written from the first column of a row."""
    from rich.cells import cell_len

    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()  # the cursor sits at the start of the next row: that row is not taken
    return sum(max(1, math.ceil(cell_len(line) / columns)) for line in lines)


def redrawn(text: str, *, columns: int) -> str:
    """`text` (already made inert by `terminal.visible`) rendered as Markdown for a terminal
    `columns` wide, with colours; ends with a newline."""
    from rich.console import Console
    from rich.markdown import Markdown

    out = io.StringIO()
    console = Console(
        file=out,
        width=columns,
        force_terminal=True,
        color_system="standard",
        highlight=False,
        emoji=False,
        markup=False,
    )
    # Links stay text: a terminal hyperlink's target is hidden from the person.
    console.print(Markdown(text, hyperlinks=False))
    return out.getvalue()
