"""How a finished tool call is shown: a command by its exit code, never `ok` when it failed."""

from __future__ import annotations

import io

from ruizn.cli.printer import StdoutPrinter
from ruizn.events import ToolCallFinished, ToolCallStarted
from ruizn.state import ErrorType, ToolResult


def _shown(result: ToolResult | str, name: str = "bash") -> str:
    out = io.StringIO()
    printer = StdoutPrinter(out)
    printer(ToolCallStarted(seq=2, ts=0.0, id="toolu_1", name=name, input={"command": "x"}))
    if isinstance(result, str):
        result = ToolResult.ok(result)
    printer(ToolCallFinished(seq=3, ts=0.0, id="toolu_1", result=result))
    return out.getvalue().splitlines()[-1]


def test_a_command_that_exits_non_zero_shows_its_code_and_never_ok() -> None:
    failed = ToolResult(
        content="boom\n[exit code 1 · 0.4s]", is_error=True, error_type=ErrorType.EXIT_STATUS
    )
    line = _shown(failed)
    assert line == "[tool] bash exit 1 · 5 B · 0.4s"
    assert " ok" not in line


def test_a_command_that_succeeds_shows_exit_0_with_its_size_and_time() -> None:
    assert _shown("hello\n[exit code 0 · 0.1s]") == "[tool] bash exit 0 · 6 B · 0.1s"


def test_other_tools_keep_their_lines() -> None:
    assert _shown("# Demo\n", name="read_file") == "[tool] read_file ok · 7 B"
    denied = ToolResult.error(ErrorType.DENIED, "the user denied this call")
    assert _shown(denied) == "[tool] bash error · denied · the user denied this call"


def _file_line(
    tool_input: dict[str, object], result: str, *, terminal: bool, name: str = "edit_file"
) -> str:
    out = io.StringIO()
    printer = StdoutPrinter(out, live=terminal)
    printer(ToolCallStarted(seq=2, ts=0.0, id="toolu_1", name=name, input=tool_input))
    printer(ToolCallFinished(seq=3, ts=0.0, id="toolu_1", result=ToolResult.ok(result)))
    return out.getvalue().splitlines()[-1]


def test_a_file_change_shows_its_diff_stat_at_a_terminal_and_its_size_when_piped() -> None:
    edit = {"path": "a.py", "old_text": "x = 1\ny = 2", "new_text": "x = 1\ny = 3\nz = 4"}
    said = "edited a.py: replaced 2 occurrences"
    assert _file_line(edit, said, terminal=True) == "[tool] edit_file ok · +4 -2"
    assert _file_line(edit, said, terminal=False) == "[tool] edit_file ok · 35 B"
    created = {"path": "b.txt", "content": "one\ntwo\nthree"}
    line = _file_line(created, "created b.txt (13 bytes)", terminal=True, name="write_file")
    assert line == "[tool] write_file ok · new file · +3"
    # a file replaced whole: its old text is not in the log, so its size as before
    line = _file_line(created, "replaced b.txt (13 bytes)", terminal=True, name="write_file")
    assert line == "[tool] write_file ok · 25 B"


def test_a_running_commands_lines_are_redrawn_in_place_and_go_when_it_ends() -> None:
    import pyte

    out = io.StringIO()
    printer = StdoutPrinter(out, live=True)
    live = printer.command_output
    assert live is not None
    printer(ToolCallStarted(seq=2, ts=0.0, id="toolu_1", name="bash", input={"command": "x"}))
    live.running("fg_1", "".join(f"step {n}\n" for n in range(1, 9)))
    live.running("fg_1", "".join(f"step {n}\n" for n in range(1, 10)) + "\x1b]0;title\x07 9½")
    printer(ToolCallStarted(seq=3, ts=0.0, id="toolu_2", name="read_file", input={}))

    def screen() -> list[str]:
        shown = pyte.Screen(80, 24)
        pyte.Stream(shown).feed(out.getvalue().replace("\n", "\r\n"))
        return [line.rstrip() for line in shown.display if line.strip()]

    assert screen() == [
        '[tool] bash {"command": "x"}',
        "[tool] read_file {}",  # a line written while it runs goes above its lines
        "  │ step 6",
        "  │ step 7",
        "  │ step 8",
        "  │ step 9",
        "  │ ␛]0;title␇ 9½",  # escaped: the terminal's title is not touched
    ]
    live.ended("fg_1")
    assert screen() == ['[tool] bash {"command": "x"}', "[tool] read_file {}"]
