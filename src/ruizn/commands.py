"""Which bash commands an `--allow-command` pattern approves (`rules.command_allowed`).

A pattern is matched against the whole command, character for character, except that `*`
stands for any run of characters and `?` for any one, neither ever standing for a
SHELL_CONTROL character. A match of the characters is not enough: bash builds characters at
run time (`${x@P}` turns a variable's value into a prompt string, `$(...)` included), so
what the wildcards stood for is *parsed*, with bashlex (a pure-Python bash parser, the
grammar of bash's own parse.y), and every character a wildcard stood for must lie in a
**plain** word or be the blank between two words.

A word is plain when it is a literal: bashlex found no expansion in it (no parameter,
command or process substitution, no tilde), it is not an assignment, a redirection or a
reserved word, and its text is only letters, digits, `-_./:=,+@%^` and quoted parts:
`'...'` (anything but a quote) and `"..."` (nothing of `$`, `` ` ``, `\\`, `!`). Unquoted
braces (brace expansion), `*?[` (globs), `~`, `#`, `!`, `\\` and `$` in any form
(arithmetic `$((...))`, `$'...'`) make a word not plain. A construct that is not plain is
approved only where the pattern's own text spells it out (`git log | head` approves that
pipe and no other); a command the parser cannot parse is never approved by a wildcard.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterator
from typing import Any

__all__ = ["MAX_PARSED", "SHELL_CONTROL", "matching_pattern", "plain_word"]

# What chains, pipes, substitutes, groups or redirects commands, and line breaks: a wildcard
# never stands for one of these (the parse below would refuse them too; this is the cheap
# first sieve, and it keeps patterns' meaning for people simple).
SHELL_CONTROL = ";&|`()<>\n\r"
# A longer command is asked about: parsing it is not free, and no one approves such a
# command at a glance.
MAX_PARSED = 10_000
_PLAIN = frozenset(string.ascii_letters + string.digits + "-_./:=,+@%^")
_NOT_IN_DOUBLE_QUOTES = frozenset("$`\\!")
_BLANKS = frozenset(" \t")


def matching_pattern(command: str, patterns: tuple[str, ...], *, parsed: bool = True) -> str | None:
    """The first of `patterns` that approves `command`, or None. `parsed=False`: the first
    whose characters match (the check a log's recorded decision must pass: a log written
    before patterns were parsed stays readable, and a decision made now is stricter)."""
    for pattern in patterns:
        match = _pattern_regex(pattern).fullmatch(command)
        if match is None:
            continue
        if not parsed:
            return pattern
        spans = [match.span(group) for group in range(1, (match.re.groups or 0) + 1)]
        if _only_plain_in(command, [(start, end) for start, end in spans if end > start]):
            return pattern
    return None


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    free = "[^" + re.escape(SHELL_CONTROL) + "]"
    parts = [
        f"({free}*)" if ch == "*" else f"({free})" if ch == "?" else re.escape(ch) for ch in pattern
    ]
    return re.compile("".join(parts), re.DOTALL)


def _only_plain_in(command: str, spans: list[tuple[int, int]]) -> bool:
    """Whether every character of `spans` (what the wildcards stood for) lies in a plain
    word, or is a blank outside every word."""
    if not spans:
        return True  # the pattern spelled the whole command out
    if len(command) > MAX_PARSED:
        return False
    words = _words(command)
    if words is None:
        return False
    # For each character: None (in no word), True (only in plain words), False (in a word
    # that is not plain: a substitution's inner words lie inside their outer word).
    cover: list[bool | None] = [None] * len(command)
    for start, end, plain in words:
        for i in range(start, end):
            cover[i] = plain and cover[i] is not False
    return all(
        cover[i] is True or (cover[i] is None and command[i] in _BLANKS)
        for start, end in spans
        for i in range(start, end)
    )


def _words(command: str) -> list[tuple[int, int, bool]] | None:
    """Every word bashlex finds in `command`: its span and whether it is plain; None when
    bashlex cannot parse the command (bashlex raises for what it does not support)."""
    # Imported here: about 0.1 s, paid only by a command a pattern's characters match.
    import bashlex  # type: ignore[import-untyped]

    try:
        trees = bashlex.parse(command)
        return [
            (start, end, plain_word(command[start:end], node))
            for node in _nodes(trees)
            if node.kind == "word"
            for start, end in [node.pos]
        ]
    except Exception:  # whatever the parser fails on is not approved
        return None


def _nodes(trees: list[Any]) -> Iterator[Any]:
    stack = list(trees)
    while stack:
        node = stack.pop()
        yield node
        for name in ("parts", "list", "command", "output", "heredoc"):
            child = getattr(node, name, None)
            if isinstance(child, list):
                stack.extend(child)
            elif child is not None and hasattr(child, "kind"):
                stack.append(child)


def plain_word(text: str, node: Any) -> bool:
    """Whether the word `node` (whose source is `text`) is a literal: no expansion found by
    the parser, only plain characters and closed quotes, and the same word to us as to
    the parser (so that no quote is read differently by the two)."""
    if getattr(node, "parts", None):
        return False
    unquoted = _unquoted(text)
    return unquoted is not None and text != "" and unquoted == node.word


def _unquoted(text: str) -> str | None:
    """The value of a word of plain characters and quoted parts, or None for any other."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char in ("'", '"'):
            end = text.find(char, i + 1)
            if end < 0:
                return None
            inner = text[i + 1 : end]
            if char == '"' and not _NOT_IN_DOUBLE_QUOTES.isdisjoint(inner):
                return None
            out.append(inner)
            i = end + 1
        elif char in _PLAIN or (not char.isascii() and char.isalnum()):
            out.append(char)
            i += 1
        else:
            return None
    return "".join(out)
