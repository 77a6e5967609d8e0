"""`visible`: no control character from outside ruizn reaches a terminal able to act."""

from __future__ import annotations

import io
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ruizn.cli.printer import StdoutPrinter
from ruizn.events import (
    LlmCallFailed,
    LlmToken,
    RunFinished,
    ToolCallFinished,
    ToolCallStarted,
)
from ruizn.state import ErrorType, Status, ToolResult
from ruizn.terminal import UNSAFE, visible

# What a terminal acts on: C0 but \n and \t, DEL, C1, and the bidi embeddings/overrides/isolates.
ACTIVE = {chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))} - {"\n", "\t"}
BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}
# Each escape class of issue 10, as an attacker would send it.
ATTACKS = {
    "clipboard write (OSC 52)": "\x1b]52;c;ZXZpbA==\x07",
    "window title (OSC 0)": "\x1b]0;pwned\x07",
    "clear screen (CSI 2J)": "\x1b[2J",
    "hidden text (SGR 8)": "\x1b[8mhidden\x1b[0m",
    "overwrite (lone CR)": "[tool] ok\rfake line",
    "backspace": "abc\x08\x08\x08xyz",
    "delete": "a\x7fb",
    "8-bit CSI (C1)": "\x9b2J",
    "8-bit OSC (C1)": "\x9d0;pwned\x9c",
    "bidi override": "safe\u202eexe.txt",
}


def test_the_sanitised_set_is_exactly_the_active_characters() -> None:
    assert UNSAFE == ACTIVE | BIDI


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_no_escape_class_survives(attack: str) -> None:
    shown = visible(attack)
    assert not set(shown) & (ACTIVE | BIDI)


def test_the_stand_ins_name_the_character() -> None:
    assert visible("\x1b]52;c;ZXZpbA==\x07") == "␛]52;c;ZXZpbA==␇"
    assert visible("\x1b[2J") == "␛[2J"
    assert visible("a\rb") == "a␍b"
    assert visible("a\x08\x7f\x00") == "a␈␡␀"
    assert visible("\x9b2J") == "\\x9b2J"
    assert visible("safe\u202eexe.txt") == "safe\\u202eexe.txt"


def test_newlines_tabs_crlf_and_every_script_pass_unchanged() -> None:
    text = "读取当前目录下的 README.md\n\tcode — ok ✓ مرحبا \u200f שלום 🙂\n"
    assert visible(text) is text
    assert visible("line one\r\nline two\r\n") == "line one\nline two\n"
    assert visible("\r\r\n") == "␍\n"


@given(st.text())
def test_nothing_active_ever_remains(text: str) -> None:
    assert not set(visible(text)) & UNSAFE


@given(st.text())
def test_visible_is_idempotent_and_leaves_clean_text_alone(text: str) -> None:
    once = visible(text)
    assert visible(once) == once
    if not set(text) & UNSAFE:
        assert once == text


# --- the printer: every line it shows is sanitised, its own colours stay ------------------

_OWN_SGR = re.compile(r"\x1b\[(?:0|2|31|32)m")


def _printed(*events: object, color: bool = True) -> str:
    out = io.StringIO()
    printer = StdoutPrinter(out, color=color)
    for event in events:
        printer(event)  # type: ignore[arg-type]
    return out.getvalue()


def test_the_printer_shows_every_outside_text_inert_and_keeps_its_colours() -> None:
    evil = "".join(ATTACKS.values())
    shown = _printed(
        LlmToken(seq=2, ts=0.0, text=evil),
        ToolCallStarted(seq=3, ts=0.0, id="t1", name=f"read{evil}", input={"path": evil}),
        ToolCallFinished(
            seq=4, ts=0.0, id="t1", result=ToolResult.error(ErrorType.NOT_FOUND, evil)
        ),
        LlmCallFailed(
            seq=5, ts=0.0, error_type="x", message=evil, will_retry=True, request_id=evil
        ),
        RunFinished(seq=6, ts=0.0, status=Status.ERROR, steps=1, elapsed=0.0, error=evil),
    )
    own = _OWN_SGR.findall(shown)
    assert own, "colour is on: ruizn's own codes must still be there"
    rest = _OWN_SGR.sub("", shown)
    assert not set(rest) & UNSAFE, repr(rest)
    assert "␛]52;c;" in rest
    assert "[tool] read␛" in rest
    assert "[run] error: ␛" in rest


def test_without_colour_the_transcript_has_no_escape_at_all() -> None:
    shown = _printed(LlmToken(seq=2, ts=0.0, text=ATTACKS["window title (OSC 0)"]), color=False)
    assert shown == "␛]0;pwned␇"
