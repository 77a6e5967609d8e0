"""How deep outside JSON may nest, checked without recursion.

A tool_use input comes from the model (and so from anything the model read), an event line
from a log anyone may have edited. Python walks nested data recursively almost everywhere:
json parsing and encoding, the redactor, jsonschema, attrs equality, `repr`. Each level costs
one to ten frames, so an input a few hundred levels deep (1.2 KB of `[`) used to end a run
with a RecursionError, and a few thousand levels deep failed somewhere else with another
message. So depth is checked first, by the loops below (an explicit stack, never a call per
level), and anything deeper is refused the same way at every depth.

MAX_DEPTH is 64 levels of objects and arrays, counting the tool input itself as level 1.
Real tool inputs nest a handful of levels (JSON Schema tools rarely pass 10): 64 leaves room
for any honest one. The recursive walks that come after it set the other side. Measured from
an empty stack, under Python's limit of 1,000 frames: jsonschema (the deepest, about 4
frames a level) fails past 248 levels, cattrs past 332, the redactor past 498, json and
`==` past 990. At 64 levels jsonschema needs some 260 frames, which leaves the runner's own
stack (anyio, the tool's task) and a library caller's room to spare; at 100 it would need
400, and the margin would depend on how deep the caller already was.
"""

from __future__ import annotations

import re

MAX_DEPTH = 64
# An event line wraps a tool input in a few levels of its own (line -> content -> block ->
# input); a line may be that much deeper than an input before it is refused as a line.
ENVELOPE_DEPTH = 8
MAX_LINE_DEPTH = MAX_DEPTH + ENVELOPE_DEPTH

# A JSON string (escapes included), the unrolled form: linear, no backtracking.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")
# A tuple, not `dict | list | tuple`: isinstance with a tuple takes half the time.
_CONTAINERS = (dict, list, tuple)


def too_deep(what: str, limit: int = MAX_DEPTH) -> str:
    """The one message for a value over the limit, the same at any depth past it."""
    return f"{what} is nested deeper than {limit} levels"


def deeper_than(value: object, limit: int = MAX_DEPTH) -> bool:
    """Whether decoded JSON (dicts, lists, tuples) nests more than `limit` levels.

    The value itself is level 1 when it is a container. Depth-first with an explicit stack,
    stopping at the first container past the limit: a cyclic value (a function model may
    return one) is therefore refused, not walked for ever.
    """
    if not isinstance(value, _CONTAINERS):
        return False
    stack: list[tuple[dict[object, object] | list[object] | tuple[object, ...], int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, _CONTAINERS):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


def few_brackets(text: str | bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether `text` opens no more than `limit` objects and arrays in all, and so cannot
    nest deeper than `limit`: two counts in C, to skip a closer look."""
    if isinstance(text, bytes):
        return text.count(b"[") + text.count(b"{") <= limit
    return text.count("[") + text.count("{") <= limit


def text_deeper_than(text: str | bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether JSON text opens more than `limit` objects/arrays at once, before parsing it.

    Brackets inside strings do not count. Text that is not JSON gets an answer too, never
    an error; its parse fails anyway. Cheap for the common case: text with no more than
    `limit` opening brackets in all cannot be deeper (`few_brackets`).
    """
    if few_brackets(text, limit):
        return False
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")  # only for the rare text with many brackets
    depth = 0
    for match in _BRACKET.finditer(_STRING.sub("", text)):
        if match.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False
