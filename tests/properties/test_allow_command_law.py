"""Law: an `--allow-command` pattern approves only plain commands beyond what it spells.

1. No command whose wildcard part holds, outside single quotes, a `$` (any expansion), a
   backtick, a backslash, a redirection or process substitution (`<`, `>`), a pipe or a
   list (`|`, `;`, `&`), a group (`(`, `)`), a line break, or (outside any quotes) a glob,
   brace, tilde, comment or `!`, is ever approved by a pattern that does not spell it out.
2. Every plain command the pattern's characters match is approved.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ruizn.commands import SHELL_CONTROL
from ruizn.rules import command_allowed

PATTERN = "git status *"
HEAD = "git status "
# Built at run time by bash whatever their quoting but single quotes.
EXPANDING = set("$`\\<>|;&()\n\r")
# Special only outside every quote.
UNQUOTED_SPECIAL = set("*?[]{}~#!")
ALPHABET = "ab-./=,+@%:_ '\"$`\\<>|;&(){}*?[]~#!\t\n@Px0"


def _outside_single_quotes(text: str) -> str:
    """`text` without its closed '...' parts (what bash reads literally)."""
    out, quoted = [], False
    for index, char in enumerate(text):
        if char == "'" and (quoted or "'" in text[index + 1 :]):
            quoted = not quoted
            continue
        if not quoted:
            out.append(char)
    return "".join(out)


def _outside_quotes(text: str) -> str:
    out, quote = [], ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        else:
            out.append(char)
    return "".join(out)


@settings(max_examples=250, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=30))
def test_nothing_that_expands_is_approved_beyond_the_pattern(tail: str) -> None:
    command = HEAD + tail
    if command_allowed(command, (PATTERN,)) is None:
        return
    assert not EXPANDING & set(_outside_single_quotes(tail)), command
    assert not UNQUOTED_SPECIAL & set(_outside_quotes(tail)), command


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(
        [
            "${x@P}",
            "$(id)",
            "`id`",
            "$((1+2))",
            "$'\\x41'",
            "<(id)",
            ">(id)",
            "> out",
            "2>&1",
            "| sh",
            "; id",
            "&& id",
            "{a,b}",
            "*.py",
            "~/x",
            '"$HOME"',
            "\\$x",
            "# $(id)",
        ]
    ),
    st.text(alphabet="ab-./=", max_size=8),
)
def test_each_known_expansion_is_refused_wherever_it_stands(hostile: str, plain: str) -> None:
    for command in (f"{HEAD}{hostile}", f"{HEAD}{plain} {hostile}", f"{HEAD}{hostile} {plain}"):
        assert command_allowed(command, (PATTERN,)) is None, command


_PLAIN_WORD = st.text(alphabet="abcxyz0123456789-_./:=,+@%", min_size=1, max_size=8)
# Quoted, anything is literal; but a wildcard never stands for SHELL_CONTROL, quoted or not.
_QUOTED_WORD = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="'" + SHELL_CONTROL), max_size=10
).map(lambda text: f"'{text}'")
_DOUBLE_QUOTED_WORD = st.text(alphabet="ab c{}*?~#[]", max_size=10).map(lambda text: f'"{text}"')


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_PLAIN_WORD, _QUOTED_WORD, _DOUBLE_QUOTED_WORD), max_size=6))
def test_plain_commands_the_pattern_matches_are_approved(words: list[str]) -> None:
    command = HEAD + " ".join(words)
    assert command_allowed(command, (PATTERN,)) == PATTERN, command


def test_a_pattern_that_spells_a_construct_out_approves_exactly_it() -> None:
    assert command_allowed("git log | head -5", ("git log | head *",)) == "git log | head *"
    assert command_allowed("git log | head -5 | sh", ("git log | head *",)) is None
    assert command_allowed("echo $HOME", ("echo $HOME",)) == "echo $HOME"
    assert command_allowed("echo $HOME $(id)", ("echo $HOME *",)) is None
    assert command_allowed("git commit -m 'fix: $x'", ("git commit -m '*'",)) is not None
    assert command_allowed("git commit -m 'a' $(id) 'b'", ("git commit -m '*'",)) is None


def test_a_log_from_before_patterns_were_parsed_replays_and_a_new_decision_is_stricter() -> None:
    from ruizn.events import (
        LlmCallStarted,
        LlmResponse,
        RunStarted,
        ToolApprovalDecided,
        ToolApprovalRequested,
    )
    from ruizn.reducers import rebuild
    from ruizn.rules import rule_decision
    from ruizn.settings import RunSettings
    from ruizn.state import TextBlock, ToolCall, ToolUseBlock

    command = {"command": "pytest tests/*.py"}
    call = ToolUseBlock(id="toolu_g", name="bash", input=command)
    settings = RunSettings(model="test", workspace="/w", allow_commands=("pytest *",))
    events = [
        RunStarted(seq=1, ts=1.0, run_id="r", goal="test", settings=settings),
        LlmCallStarted(seq=2, ts=2.0, step=1),
        LlmResponse(
            seq=3, ts=3.0, content=(TextBlock(text="On it."), call), stop_reason="tool_use"
        ),
        ToolApprovalRequested(seq=4, ts=4.0, id=call.id, name="bash", input=command),
        # Approved by the pattern's characters, as ruizn decided before the parse.
        ToolApprovalDecided(seq=5, ts=5.0, id=call.id, approved=True, by="policy"),
    ]
    rebuild(events)  # no InvalidTransition: the log stays readable
    waiting = rebuild(events[:4])
    assert rule_decision(waiting, ToolCall(id=call.id, name="bash", input=command)) is None
