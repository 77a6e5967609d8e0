"""What may reach a terminal: text from outside ruizn, with every control character shown.

The model's words, tool names and inputs, tool errors, goals and API error texts are all
written by someone else (a file the model read can steer what it says). A terminal acts on
control characters, so any of them could retitle the window (`ESC ] 0 ;`), write the
clipboard (`ESC ] 52`), clear the screen (`ESC [ 2J`), hide text (`ESC [ 8m`) or, with a lone
`\\r`, draw over a line already shown. `visible` turns each such character into a printable
stand-in, so the reader sees that it was there and the terminal never acts on it:

- C0 controls (U+0000-U+001F) other than `\\n` and `\\t`: the Unicode control picture
  U+2400 + code (ESC -> `␛`, BEL -> `␇`, CR -> `␍`, BS -> `␈`). One column each, so a
  shown line keeps its shape, and the picture names the character.
- DEL (U+007F): `␡` (U+2421).
- C1 controls (U+0080-U+009F; U+009B is a one-character CSI and U+009D an OSC on some
  terminals) and the bidi embeddings, overrides and isolates (U+202A-U+202E,
  U+2066-U+2069), which reorder how a line reads without changing its bytes ("Trojan
  Source"): `\\x9b`, `\\u202e`, the way Python writes them. Unicode has no picture for these.
  The bidi *marks* (U+200E, U+200F, U+061C) are kept: they only nudge neutral characters and
  right-to-left text needs them.
- `\\r\\n` within one string becomes `\\n`: a CR right before a newline cannot hide anything,
  and Windows line ends are common in files. A CR anywhere else shows as `␍`.

Nothing is dropped, so the same text always shows the same way and nothing can be smuggled
past the reader by deletion. The rule is a per-character table: escape *sequences* need no
parsing, because a sequence without its ESC (or C1 introducer) is inert text.

It is the hot path of a streamed answer (one call per delta), so clean text costs one scan
in C: a character class built from the same table finds no match and the text is returned as
it is (about 0.1 µs a delta; `python bench/terminal_cost.py` compares the alternatives).
"""

from __future__ import annotations

import re
from collections.abc import Callable

# A one-line notice for the person (a plug-in left out, an MCP server restarted): where it
# goes is the caller's (the CLI: stderr, made visible).
Notice = Callable[[str], None]


_PICTURE_BASE = 0x2400  # U+2400 SYMBOL FOR NULL; U+241B SYMBOL FOR ESCAPE
_KEPT = frozenset({"\n", "\t"})
_BIDI_CONTROLS = (*range(0x202A, 0x202F), *range(0x2066, 0x206A))


def _table() -> dict[int, str]:
    table = {code: chr(_PICTURE_BASE + code) for code in range(0x20) if chr(code) not in _KEPT}
    table[0x7F] = "\u2421"  # SYMBOL FOR DELETE
    for code in (*range(0x80, 0xA0), *_BIDI_CONTROLS):
        table[code] = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return table


_TABLE = _table()
# Every character `visible` changes, for tests and for callers that want to check.
UNSAFE = frozenset(chr(code) for code in _TABLE)
# A character class, not a pattern over escape sequences: it only says "translate needed".
_ANY_UNSAFE = re.compile("[" + "".join(sorted(map(re.escape, UNSAFE))) + "]")


def visible(text: str) -> str:
    """`text` with every control character a terminal would act on made visible."""
    if _ANY_UNSAFE.search(text) is None:
        return text
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    return text.translate(_TABLE)


# Characters that show as nothing (or move text) yet change what a name or a line is:
# zero-width spaces and joiners, the bidi marks, the line and paragraph separators, the
# word joiner and invisible operators, the byte-order mark, soft hyphen, the Mongolian vowel
# separator, and the tag characters (U+E0000-U+E007F, which can spell hidden ASCII); and the
# fillers, which draw as blank space yet are letters to a program: the combining grapheme
# joiner, the Hangul fillers, the Khmer inherent vowels, the braille blank, and the
# variation selectors (which can also carry hidden bytes). Where a person decides (an
# approval prompt, a grant, a diff), `notes\u200b.txt` must not read as `notes.txt`: there
# they are shown as escapes too.
_INVISIBLE = (
    0x00AD,
    0x034F,
    0x061C,
    0x115F,
    0x1160,
    0x17B4,
    0x17B5,
    *range(0x180B, 0x1810),
    0x2800,
    0x3164,
    *range(0xFE00, 0xFE10),
    0xFFA0,
    *range(0xE0100, 0xE01F0),
    *range(0x200B, 0x2010),
    0x2028,
    0x2029,
    *range(0x2060, 0x2065),
    0xFEFF,
    *range(0xE0000, 0xE0080),
)
_REVEAL_TABLE = {
    **_TABLE,
    **{code: f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}" for code in _INVISIBLE},
}
_ANY_HIDDEN = re.compile(
    "[" + "".join(sorted(map(re.escape, (chr(c) for c in _REVEAL_TABLE)))) + "]"
)


def revealed(text: str) -> str:
    """`visible(text)`, and every invisible or direction-changing character shown as an
    escape too: for what a person decides on (prompts, grants, diffs), where a hidden
    character could make one name look like another."""
    if _ANY_HIDDEN.search(text) is None:
        return text
    if "\r\n" in text:
        text = text.replace("\r\n", "\n")
    return text.translate(_REVEAL_TABLE)


_LINE_TABLE = {**_REVEAL_TABLE, ord("\n"): "\u2424", ord("\t"): "\u2409"}


def revealed_line(text: str) -> str:
    """`revealed(text)` as one line: a line break shows as `␤` and a tab as `␉` too. For
    each fact of a grant or an acceptance prompt (a hook's event, matcher, command and
    source; a pattern; a path), so that no field can draw a line of its own, such as a
    harmless command under the real one."""
    return text.translate(_LINE_TABLE)
