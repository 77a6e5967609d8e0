"""list_dir, glob and grep: what they show, what they cap, what they never touch.

(The refusals every file tool shares are in test_sandbox.py.)"""

from __future__ import annotations

import gc
import os
import re
import threading
from pathlib import Path

import pytest

from ruizn.effects.tools import search as file_tools
from ruizn.effects.tools.search import GlobTool, GrepTool, ListDirTool, builtin_read_only_tools
from ruizn.effects.tools.workspace import PathJail
from ruizn.state import ToolResult
from tests.effects.tools.workspace_world import SECRET, build, call, leaks

pytestmark = pytest.mark.anyio


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = build(tmp_path)
    (workspace / "src" / "pkg").mkdir(parents=True)
    (workspace / "src" / "pkg" / "mod.py").write_text("import os\n\ndef f():\n    return 1\n")
    (workspace / "src" / "main.py").write_text("from pkg import mod\nprint(mod.f())\n")
    (workspace / ".github").mkdir()
    (workspace / ".github" / "ci.yml").write_text("on: push\n")
    (workspace / "data.bin").write_bytes(b"\x00\x01return\x02")
    return workspace


# --- list_dir ----------------------------------------------------------------------------------


async def test_list_dir_shows_type_size_sorted_and_marks_hidden_and_secret(ws: Path) -> None:
    result = await call(ListDirTool(ws), {})
    lines = result.content.splitlines()
    assert lines[0] == ".: 18 entries"
    body = [line.split(maxsplit=2) for line in lines[1:]]
    names = [name for *_, name in body]
    assert names == sorted(names)
    assert ["file", "7", "README.md"] in body
    assert ["dir", "-", "src/"] in body
    assert ["dir", "-", ".github/  (hidden)"] in body
    size = len((ws / ".env").read_bytes())
    assert ["file", str(size), ".env  (hidden, secret: not readable)"] in body
    assert ["fifo", "-", "pipe"] in body
    assert ["symlink", "-", "out -> ../outside_dir"] in body
    # an absolute target names a place on the user's machine: masked
    assert ["symlink", "-", "outabs -> (absolute path)"] in body
    assert str(ws.parent) not in result.content


async def test_list_dir_defaults_to_the_root_and_lists_a_subfolder(ws: Path) -> None:
    assert (await call(ListDirTool(ws), {"path": "."})) == await call(ListDirTool(ws), {})
    result = await call(ListDirTool(ws), {"path": "src/"})
    assert result.content.splitlines() == [
        "src/: 2 entries",
        "file               35  main.py",
        "dir                 -  pkg/",
    ]


async def test_list_dir_of_an_empty_folder(ws: Path) -> None:
    (ws / "empty").mkdir()
    assert await call(ListDirTool(ws), {"path": "empty"}) == ToolResult.ok("empty: empty")


async def test_list_dir_of_a_file_is_invalid_input(ws: Path) -> None:
    result = await call(ListDirTool(ws), {"path": "README.md"})
    assert result.error_type == "invalid_input"
    assert "README.md is not a directory" in result.content


async def test_list_dir_follows_a_symlink_inside_but_never_out(ws: Path) -> None:
    (ws / "insub").symlink_to("sub")
    assert "note.txt" in (await call(ListDirTool(ws), {"path": "insub"})).content
    result = await call(ListDirTool(ws), {"path": "out"})
    assert result.error_type == "permission_error"
    assert "only_outside" not in result.content


async def test_list_dir_caps_at_1000_entries_and_says_how_many_were_left_out(ws: Path) -> None:
    many = ws / "many"
    many.mkdir()
    for i in range(1234):
        (many / f"f{i:04}").touch()
    lines = (await call(ListDirTool(ws), {"path": "many"})).content.splitlines()
    assert lines[0] == "many: 1234 entries"
    assert len(lines) == 1 + 1000 + 1
    assert lines[1].endswith("f0000")
    assert lines[1000].endswith("f0999")
    assert lines[-1] == "[234 more entries not shown]"


# --- glob --------------------------------------------------------------------------------------


async def test_glob_double_star_finds_nested_files_sorted(ws: Path) -> None:
    result = await call(GlobTool(ws), {"pattern": "**/*.py"})
    assert result == ToolResult.ok("src/main.py\nsrc/pkg/mod.py")


async def test_glob_single_star_stays_in_one_folder_and_marks_folders(ws: Path) -> None:
    assert (await call(GlobTool(ws), {"pattern": "src/*"})).content == "src/main.py\nsrc/pkg/"


async def test_glob_skips_hidden_names_unless_the_pattern_names_them(ws: Path) -> None:
    everything = (await call(GlobTool(ws), {"pattern": "**/*.yml"})).content
    assert everything == "no paths match **/*.yml"
    named = await call(GlobTool(ws), {"pattern": ".github/*.yml"})
    assert named.content == ".github/ci.yml"
    dotted = await call(GlobTool(ws), {"pattern": ".*"})
    assert dotted.content == ".env\n.github/"  # never .ruizn


async def test_glob_never_enters_a_symlinked_folder(ws: Path) -> None:
    result = await call(GlobTool(ws), {"pattern": "**/*.txt"})
    assert result.content.splitlines() == ["innocent.txt", "sub/note.txt"]
    for pattern in ("**", "*/*", "out*/*"):
        result = await call(GlobTool(ws), {"pattern": pattern})
        assert not leaks(result)
        assert "only_outside" not in result.content
        assert "inner.txt" not in result.content


async def test_glob_without_wildcards_checks_one_path(ws: Path) -> None:
    assert (await call(GlobTool(ws), {"pattern": "src/main.py"})).content == "src/main.py"
    assert (await call(GlobTool(ws), {"pattern": "src"})).content == "src/"
    assert (await call(GlobTool(ws), {"pattern": "nope"})).content == "no paths match nope"


async def test_glob_dotdot_after_a_wildcard_is_refused(ws: Path) -> None:
    result = await call(GlobTool(ws), {"pattern": "*/../README.md"})
    assert result.error_type == "invalid_input"
    assert "before the first wildcard" in result.content


async def test_glob_dotdot_before_the_wildcards_stays_inside(ws: Path) -> None:
    result = await call(GlobTool(ws), {"pattern": "sub/../src/*.py"})
    assert result.content == "sub/../src/main.py"


async def test_glob_caps_at_1000_sorted(ws: Path) -> None:
    many = ws / "many"
    many.mkdir()
    for i in range(1500):
        (many / f"f{i:04}.txt").touch()
    lines = (await call(GlobTool(ws), {"pattern": "many/*.txt"})).content.splitlines()
    assert len(lines) == 1001
    assert lines[:2] == ["many/f0000.txt", "many/f0001.txt"]
    assert lines[999] == "many/f0999.txt"
    assert lines[-1] == "[500 more not shown]"


async def test_a_fifo_does_not_hang_a_glob_or_a_grep(ws: Path) -> None:
    assert "pipe" in (await call(GlobTool(ws), {"pattern": "*"})).content
    assert not (await call(GrepTool(ws), {"pattern": "x"})).is_error


# --- grep --------------------------------------------------------------------------------------


async def test_grep_prints_file_line_text(ws: Path) -> None:
    result = await call(GrepTool(ws), {"pattern": r"return \d"})
    assert result == ToolResult.ok(
        "src/pkg/mod.py:4:    return 1\n[skipped: 1 binary, 1 secret files]"
    )


async def test_grep_in_a_folder_or_a_file(ws: Path) -> None:
    found = await call(GrepTool(ws), {"pattern": "mod", "path": "src"})
    assert found.content == "src/main.py:1:from pkg import mod\nsrc/main.py:2:print(mod.f())"
    one = await call(GrepTool(ws), {"pattern": "import", "path": "src/pkg/mod.py"})
    assert one.content == "src/pkg/mod.py:1:import os"


async def test_grep_glob_filters_by_name_or_by_path(ws: Path) -> None:
    (ws / "src" / "notes.md").write_text("import this\n")
    by_name = await call(GrepTool(ws), {"pattern": "import", "path": "src", "glob": "*.py"})
    assert by_name.content == "src/main.py:1:from pkg import mod\nsrc/pkg/mod.py:1:import os"
    by_path = await call(GrepTool(ws), {"pattern": "import", "glob": "src/pkg/**/*.py"})
    assert by_path.content == "src/pkg/mod.py:1:import os"


async def test_grep_skips_binary_files_and_says_so(ws: Path) -> None:
    result = await call(GrepTool(ws), {"pattern": "return", "path": "."})
    assert "data.bin" not in result.content.split("\n[")[0]
    assert "1 binary" in result.content


async def test_grep_caps_matches_per_file_and_in_total(ws: Path) -> None:
    (ws / "big").mkdir()
    for i in range(20):
        (ws / "big" / f"f{i:02}.txt").write_text("hit\n" * 50)
    result = await call(GrepTool(ws), {"pattern": "hit", "path": "big"})
    lines = result.content.splitlines()
    assert lines[:2] == ["big/f00.txt:1:hit", "big/f00.txt:2:hit"]
    assert len([line for line in lines if line.startswith("big/f00.txt:")]) == 20
    assert len([line for line in lines if ":hit" in line]) == 300  # 15 files of 20
    assert lines[-2] == (
        "[more matches not shown in 15 files (at most 20 per file):"
        " big/f00.txt, big/f01.txt, big/f02.txt, big/f03.txt, big/f04.txt ...]"
    )
    assert lines[-1] == "[search stopped at 300 matching lines; narrow the pattern, path or glob]"


@pytest.mark.parametrize("ending", ["\n", ""])
@pytest.mark.parametrize(
    "pattern", ["^beta", "beta$", "a\\s+b", "a.b", "^$", "gamma|end", "(?i)ALPHA", "^", "o$"]
)
async def test_grep_matches_like_a_line_by_line_search(ws: Path, ending: str, pattern: str) -> None:
    text = "alpha\nbeta gamma\n\nbeta\nend beta\nno" + ending
    (ws / "t.txt").write_text(text)
    lines = text.split("\n")[:-1] if ending else text.split("\n")
    result = await call(GrepTool(ws), {"pattern": pattern, "path": "t.txt"})
    expected = [
        f"t.txt:{n}:{line}" for n, line in enumerate(lines, start=1) if re.search(pattern, line)
    ]
    assert result.content == ("\n".join(expected) or "no matches")


async def test_grep_line_numbers_ignore_crlf_and_form_feeds(ws: Path) -> None:
    (ws / "win.txt").write_bytes(b"one\r\ntwo\x0cstill two\r\nthree target\r\n")
    result = await call(GrepTool(ws), {"pattern": "target", "path": "win.txt"})
    assert result.content == "win.txt:3:three target"


async def test_grep_a_catastrophic_pattern_is_linear(ws: Path) -> None:
    # (a+)+$ takes Python's re longer than the age of the universe on this line.
    (ws / "evil.txt").write_text("a" * 100_000 + "b\n")
    tool = GrepTool(ws, timeout=60)
    result = await call(tool, {"pattern": "(a+)+$", "path": "evil.txt"})
    assert result == ToolResult.ok("no matches")
    for thread in threading.enumerate():
        if thread.name == "tool-grep":
            thread.join(timeout=5)
    assert not [t for t in threading.enumerate() if t.name == "tool-grep"]


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        (r"(a)\1", "invalid escape sequence"),
        ("(?=x)", "invalid perl operator"),
        ("(", "missing )"),
        ("", "non-empty"),
        ("x" * 1001, "too long"),
    ],
)
async def test_grep_bad_patterns_are_invalid_input(
    ws: Path, pattern: str, says: str, capfd: pytest.CaptureFixture[str]
) -> None:
    result = await call(GrepTool(ws), {"pattern": pattern})
    assert result.error_type == "invalid_input", result
    assert says in result.content
    assert "RE2" in result.content or not pattern or len(pattern) > 1000
    assert capfd.readouterr().err == ""  # RE2 logs nothing on our stderr


async def test_grep_a_big_file_is_searched_in_its_first_mib(ws: Path) -> None:
    (ws / "huge.log").write_bytes(b"x\n" * (600 * 1024) + b"needle\n")
    result = await call(GrepTool(ws), {"pattern": "needle", "path": "huge.log"})
    assert result.content == "no matches\n[1 files searched in their first 1 MiB only]"


async def test_a_walk_over_its_step_cap_stops_and_says_so(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_tools, "MAX_WALK_STEPS", 5)
    for tool, tool_input in [
        (GrepTool(ws), {"pattern": "x"}),
        (GlobTool(ws), {"pattern": "**"}),
        (ListDirTool(ws), {}),
    ]:
        result = await call(tool, tool_input)
        assert not result.is_error
        assert "cut short" in result.content.splitlines()[-1], (tool.name, result)


async def test_grep_never_reads_through_a_symlink_while_walking(ws: Path) -> None:
    result = await call(GrepTool(ws), {"pattern": "top secret"})
    assert SECRET not in result.content
    assert result.content.startswith("no matches")


def test_builtin_read_only_tools_share_one_jail(ws: Path) -> None:
    jail = PathJail(ws)
    tools = builtin_read_only_tools(jail, timeout=3)
    assert [tool.name for tool in tools] == ["list_dir", "glob", "grep"]
    assert all(tool.read_only for tool in tools)
    assert all(tool.timeout == 3 for tool in tools)
    assert {id(getattr(tool, "jail", None)) for tool in tools} == {id(jail)}


def test_walks_close_every_descriptor(ws: Path) -> None:
    # Other tests' leftovers may close descriptors meanwhile (the suite shares a worker):
    # collect them first, and look for descriptors this test opened and left open.
    gc.collect()
    before = set(os.listdir("/proc/self/fd"))
    sandbox = PathJail(ws)
    for _ in range(50):
        GrepTool(sandbox).run({"pattern": "x"})
        GlobTool(sandbox).run({"pattern": "**"})
        ListDirTool(sandbox).run({"path": "src"})
        with pytest.raises(PermissionError):
            GlobTool(sandbox).run({"pattern": "out/*"})
    sandbox.close()
    gc.collect()
    assert set(os.listdir("/proc/self/fd")) - before == set()
