"""Nothing the model (or a goal, or an API error) says reaches a terminal as a control code.

The CLI runs as a subprocess whose stdout and stderr are the slave side of a real
pseudo-terminal, in raw mode so the bytes read from the master are exactly the bytes the
process wrote (no \\n -> \\r\\n translation to confuse the check). Colour is on, as it is
for a person at a terminal: the only escape sequences allowed through are ruizn's own SGR
colour codes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.cli.conftest import cli_env, only_log, read_events, run_cli
from tests.cli.terminals import run_on_pty
from tests.fakeapi import HttpError, Stream, Text, ToolUse

# Each escape class of issue 10.
CLIPBOARD = "\x1b]52;c;ZXZpbA==\x07"
TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
HIDE = "\x1b[8m"
OVERWRITE = "\r[tool] ok · 1 B"
C1_CSI = "\x9b2J"
BIDI = "\u202e"
BACKSPACE_DEL = "\x08\x7f"
EVIL = CLIPBOARD + TITLE + CLEAR + HIDE + OVERWRITE + C1_CSI + BIDI + BACKSPACE_DEL

# What a terminal acts on, written out here independently of ruizn.terminal.
ACTIVE = frozenset(
    chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F),
                     *range(0x2066, 0x206A))
) - {"\n", "\t"}  # fmt: skip
OWN_SGR = re.compile(r"\x1b\[(?:0|2|31|32)m")


def assert_inert(shown: str) -> None:
    """Only ruizn's colour codes may act; every other control character must be shown."""
    rest = OWN_SGR.sub("", shown)
    acting = sorted({f"U+{ord(c):04X}" for c in rest if c in ACTIVE})
    assert not acting, f"control characters reached the terminal: {acting}\n{shown!r}"


def pty_env(base_url: str) -> dict[str, str]:
    env = cli_env(base_url, COLUMNS="400")
    del env["NO_COLOR"]  # a person at a terminal gets colour; it must survive
    return env


def hostile_script() -> list[Any]:
    return [
        HttpError(500, "api_error", "boom", {"retry-after": "0"}),
        Stream(
            (
                Text(f"Reading. {EVIL} done\n", chunk=3),  # escapes cut across deltas
                ToolUse("toolu_evil_name", f"read_file{TITLE}{CLEAR}", {"path": "README.md"}),
                ToolUse("toolu_evil_input", "read_file", {"path": f"no{CLIPBOARD}{C1_CSI}.md"}),
            ),
            stop_reason="tool_use",
        ),
        HttpError(400, "invalid_request_error", f"bad {EVIL} request"),
    ]


def test_a_hostile_run_reaches_the_terminal_inert_live_and_in_runs_show_replay(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(hostile_script())
    env = pty_env(server.base_url)
    goal = f"summarise {TITLE}{HIDE}{OVERWRITE}{BIDI}"

    code, live = run_on_pty(["run", "--goal", goal], workspace, env)
    assert code == 1, live
    assert_inert(live)
    # Everything was shown, visibly, in ruizn's colours.
    assert OWN_SGR.search(live)
    assert "[retry]" in live
    assert "␛]52;c;ZXZpbA==␇␛]0;pwned␇␛[2J␛[8m␍[tool] ok · 1 B\\x9b2J\\u202e␈␡" in live
    assert "read_file␛]0;pwned␇␛[2J" in live  # the tool name in its [tool] line
    assert "[run] error: invalid request: bad ␛]52;c;" in OWN_SGR.sub("", live)

    # The log keeps the exact text.
    log = only_log(workspace)
    events = read_events(log)
    assert events[0]["goal"] == goal
    assert EVIL in "".join(e["text"] for e in events if e["type"] == "llm_token")
    # The API's error text is kept as one line (whitespace folded), its control codes intact.
    assert " ".join(EVIL.split()) in events[-1]["error"]

    run_id = log.parent.name
    for command in (["runs"], ["show", run_id], ["replay", run_id]):
        code, shown = run_on_pty(command, workspace, env)
        assert code == 0, shown
        assert_inert(shown)
    _, listed = run_on_pty(["runs"], workspace, env)
    # `runs` puts a goal on one line: the CR is whitespace there, the rest is shown.
    assert "summarise ␛]0;pwned␇␛[8m [tool] ok · 1 B\\u202e" in listed
    _, summary = run_on_pty(["show", run_id], workspace, env)
    assert "summarise ␛]0;pwned␇" in summary
    assert "bad ␛]52;c;" in summary


def test_replay_shows_the_hostile_run_byte_for_byte_as_it_was_shown_live(
    workspace: Path, server_factory: Any
) -> None:
    """Sanitising does not depend on stdout being a terminal: a piped transcript and its
    replay are the same bytes, and both are inert."""
    server = server_factory(hostile_script())
    live = run_cli(["run", "--goal", "go"], workspace=workspace, base_url=server.base_url)
    assert live.code == 1, live.stderr
    replayed = run_cli(["replay", str(live.log_path)], workspace=workspace)
    assert replayed.code == 0, replayed.stderr
    assert replayed.stdout == live.stdout
    assert "␛]52;c;" in live.stdout
    assert not set(live.stdout) & ACTIVE
    assert not set(live.stderr) & ACTIVE
