"""The sandbox under attack, for every file tool: each refusal, secrets, the log folder, a
directory swapped for a symlink in a tight loop, and a 1 MB path."""

from __future__ import annotations

import contextlib
import ctypes
import fnmatch
import os
import stat
import threading
import time
from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ruizn.effects.tools.read import ReadFileTool
from ruizn.effects.tools.workspace import PathJail
from ruizn.secretfiles import SECRET_FILE_PATTERNS
from ruizn.state import ToolResult
from tests.effects.tools.workspace_world import (
    KEY,
    LOG_SECRET,
    SECRET,
    all_tools,
    build,
    call,
    input_for,
    leaks,
    outside_snapshot,
)

pytestmark = pytest.mark.anyio

TOOLS = ("read_file", "list_dir", "glob", "grep", "write_file", "edit_file")
PATH_TOOLS = ("read_file", "grep", "write_file", "edit_file")  # tools given a file path

# (case, file path, folder path, error_type, the refusal says)
REFUSALS = [
    ("dotdot", "../outside.txt", "../outside_dir", "permission_error", "'..'"),
    ("dotdot_deep", "sub/../../outside.txt", "sub/../..", "permission_error", "'..'"),
    ("absolute", "/etc/passwd", "/etc", "permission_error", "absolute paths"),
    ("symlink_dir_out", "out/inner.txt", "out", "permission_error", "resolves outside"),
    ("abs_symlink_out", "outabs/inner.txt", "outabs", "permission_error", "resolves outside"),
    ("chain_out", "chain", "chaindir", "permission_error", "resolves outside"),
    ("log_folder", ".ruizn/runs/r1/events.jsonl", ".ruizn/runs", "permission_error", "log folder"),
    ("log_via_symlink", "logs/r1/events.jsonl", "logs", "permission_error", "log folder"),
    ("loop", "loop", "loop", "invalid_input", "symlink loop"),
    ("fifo", "pipe", "pipe", "invalid_input", "pipe"),
    ("nul", "a\0b", "a\0b", "invalid_input", "NUL"),
    ("one_mb", "a/" * 500_000 + "x", "a/" * 500_000, "invalid_input", "too long"),
    ("too_deep", "/".join(["a"] * 300), "/".join(["a"] * 300), "invalid_input", "too deep"),
]
SECRETS = [
    (".env", "secret"),
    ("keys/server.pem", "secret"),
    ("innocent.txt", "secret"),  # a harmless name leading to .env
]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return build(tmp_path)


@pytest.mark.parametrize("tool_name", TOOLS)
@pytest.mark.parametrize("refusal", REFUSALS, ids=[r[0] for r in REFUSALS])
async def test_every_tool_refuses(
    tmp_path: Path, ws: Path, tool_name: str, refusal: tuple[str, str, str, str, str]
) -> None:
    case, file_path, dir_path, kind, says = refusal
    before = outside_snapshot(tmp_path)
    tool = all_tools(ws)[tool_name]
    result = await call(tool, input_for(tool_name, file_path, dir_path))
    assert result.is_error, (case, result)
    assert result.error_type == kind, (case, result)
    assert says in result.content, (case, result)
    assert not leaks(result)
    assert str(tmp_path) not in result.content  # never the absolute path
    assert len(result.content) <= 300
    assert outside_snapshot(tmp_path) == before
    assert (ws / ".ruizn" / "runs" / "r1" / "events.jsonl").read_text() == LOG_SECRET


@pytest.mark.parametrize("tool_name", PATH_TOOLS)
@pytest.mark.parametrize(("path", "says"), SECRETS)
async def test_secret_files_are_refused_by_every_tool(
    ws: Path, tool_name: str, path: str, says: str
) -> None:
    tool = all_tools(ws)[tool_name]
    result = await call(tool, input_for(tool_name, path, path))
    assert result.error_type == "permission_error", result
    assert says in result.content
    assert "--allow-secret-files" in result.content
    assert not leaks(result)
    assert KEY in (ws / ".env").read_text()  # not written either


async def test_secret_files_are_read_when_allowed(ws: Path) -> None:
    tools = all_tools(PathJail(ws, allow_secret_files=True))
    assert KEY in (await call(tools["read_file"], {"path": ".env"})).content
    assert KEY in (await call(tools["read_file"], {"path": "innocent.txt"})).content
    grep = await call(tools["grep"], {"pattern": "sk-ant", "path": "."})
    assert f"keys/server.pem:1:{KEY}" in grep.content  # .env is hidden: named, it is searched
    grep = await call(tools["grep"], {"pattern": "sk-ant", "path": ".env"})
    assert grep.content == f".env:1:ANTHROPIC_API_KEY={KEY}"
    edited = await call(tools["edit_file"], {"path": ".env", "old_text": KEY, "new_text": "x"})
    assert not edited.is_error, edited
    assert (ws / ".env").read_text() == "ANTHROPIC_API_KEY=x\n"


async def test_grep_over_the_workspace_skips_secret_files_and_says_so(ws: Path) -> None:
    result = await call(all_tools(ws)["grep"], {"pattern": "sk-ant"})
    assert not leaks(result)
    assert "no matches" in result.content
    # keys/server.pem; .env is hidden (skipped) and innocent.txt a symlink (never followed).
    assert "[skipped: 1 secret files]" in result.content


async def test_the_log_folder_is_invisible_to_walks(ws: Path) -> None:
    tools = all_tools(ws)
    listing = await call(tools["list_dir"], {"path": "."})
    names = [line.split(maxsplit=2)[2] for line in listing.content.splitlines()[1:]]
    assert not [name for name in names if name.startswith(".ruizn")], names
    assert "logs -> .ruizn/runs" in names  # the symlink is listed, never entered
    everything = await call(tools["glob"], {"pattern": "**"})
    hidden = await call(tools["glob"], {"pattern": ".*/**"})
    for result in (everything, hidden):
        assert ".ruizn" not in result.content
        assert "events.jsonl" not in result.content
    found = await call(tools["grep"], {"pattern": "past run"})
    assert found.content.startswith("no matches")


async def test_a_log_dir_elsewhere_in_the_workspace_is_excluded_too(ws: Path) -> None:
    (ws / "my-logs" / "r2").mkdir(parents=True)
    (ws / "my-logs" / "r2" / "events.jsonl").write_text(LOG_SECRET)
    tools = all_tools(PathJail(ws, exclude=[ws / "my-logs"]))
    for tool_name in ("read_file", "write_file", "edit_file", "grep"):
        tool_input = input_for(tool_name, "my-logs/r2/events.jsonl", "")
        result = await call(tools[tool_name], tool_input)
        assert result.error_type == "permission_error", (tool_name, result)
    listing = await call(tools["list_dir"], {"path": "."})
    assert "my-logs" not in listing.content
    assert (await call(tools["list_dir"], {"path": "my-logs"})).error_type == "permission_error"
    assert "my-logs" not in (await call(tools["glob"], {"pattern": "**"})).content
    assert (ws / "my-logs" / "r2" / "events.jsonl").read_text() == LOG_SECRET


async def test_a_log_dir_outside_the_workspace_changes_nothing(tmp_path: Path, ws: Path) -> None:
    sandbox = PathJail(ws, exclude=[tmp_path / "elsewhere"])
    assert sandbox.excluded == frozenset({(".ruizn",)})


# --- a 1 MB path -------------------------------------------------------------------------------


def _tool_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("tool-")]


@pytest.mark.parametrize("tool_name", TOOLS)
async def test_a_1_mb_path_is_refused_at_once_and_leaves_no_thread(
    ws: Path, tool_name: str
) -> None:
    tool = all_tools(ws)[tool_name]
    tool.timeout = 60  # a refusal must come from the length check, never the timeout
    huge = "a/" * 500_000
    result = await call(tool, input_for(tool_name, huge + "x", huge))
    assert result.error_type == "invalid_input", result
    assert "too long" in result.content
    for thread in _tool_threads():  # the worker has nothing left to do but exit
        thread.join(timeout=5)
    assert _tool_threads() == []


# --- the directory-swap race -------------------------------------------------------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _swapper(ws: Path, stop: threading.Event, swaps: list[int]) -> None:
    """Swap ws/d (a real folder) and ws/d_alt (a symlink to the outside) as fast as possible."""
    libc = ctypes.CDLL(None, use_errno=True)
    a, b = bytes(ws / "d"), bytes(ws / "d_alt")
    exchange = getattr(libc, "renameat2", None)
    while not stop.is_set():
        if exchange is not None and exchange(_AT_FDCWD, a, _AT_FDCWD, b, _RENAME_EXCHANGE) == 0:
            swaps[0] += 1
            continue
        # No renameat2: three renames, so `d` is briefly missing.
        os.rename(a, ws / "d_tmp")
        os.rename(b, a)
        os.rename(ws / "d_tmp", b)
        swaps[0] += 1


def test_a_folder_swapped_for_a_symlink_out_never_leads_any_tool_outside(tmp_path: Path) -> None:
    ws = build(tmp_path)
    (ws / "d").mkdir()
    (ws / "d" / "inner.txt").write_text("inside\n")
    (ws / "d_alt").symlink_to(tmp_path / "outside_dir")
    before = outside_snapshot(tmp_path)
    tools = all_tools(ws)
    calls = [
        ("read_file", {"path": "d/inner.txt"}),
        ("list_dir", {"path": "d"}),
        ("glob", {"pattern": "d/*"}),
        ("glob", {"pattern": "**/*.txt"}),
        ("grep", {"pattern": "inside|secret", "path": "d"}),
        ("grep", {"pattern": "inside|secret", "path": "d/inner.txt"}),
        ("write_file", {"path": "d/new.txt", "content": "written"}),
        ("edit_file", {"path": "d/inner.txt", "old_text": "inside", "new_text": "inside"}),
    ]
    ok = {name: 0 for name, _ in calls}
    refused = 0
    stop, swaps = threading.Event(), [0]
    swapper = threading.Thread(target=_swapper, args=(ws, stop, swaps), daemon=True)
    swapper.start()
    try:
        end = time.monotonic() + 4
        while time.monotonic() < end:
            for name, tool_input in calls:
                result = anyio.run(call, tools[name], tool_input)
                assert not leaks(result), (name, result)
                assert "only_outside" not in result.content, (name, result)
                if result.is_error:
                    refused += 1
                else:
                    ok[name] += 1
    finally:
        stop.set()
        swapper.join()
    assert outside_snapshot(tmp_path) == before  # no write, rename or temp file outside
    assert swaps[0] > 1000, swaps
    assert refused > 0
    assert ok["read_file"] > 0, ok
    assert ok["write_file"] > 0, ok
    # The folder is inside at the end of an even number of swaps or the other way round;
    # either way its files are the workspace's own.
    real = ws / "d" if (ws / "d").is_dir() and not (ws / "d").is_symlink() else ws / "d_alt"
    assert (real / "inner.txt").read_text() == "inside\n"


def test_the_race_test_catches_a_resolve_then_open_sandbox(tmp_path: Path) -> None:
    """The same race against a checker that resolves first and opens after (the old read_file)
    leaks: so the test above would fail on the old design."""
    ws = build(tmp_path)
    (ws / "d").mkdir()
    (ws / "d" / "inner.txt").write_text("inside\n")
    (ws / "d_alt").symlink_to(tmp_path / "outside_dir")

    def old_read(path: str) -> str:
        resolved = os.path.realpath(ws / path)
        if not Path(resolved).is_relative_to(ws):
            raise PermissionError(path)
        with open(os.path.join(ws, path)) as f:  # the check and the open see different trees
            return f.read()

    stop, swaps = threading.Event(), [0]
    swapper = threading.Thread(target=_swapper, args=(ws, stop, swaps), daemon=True)
    swapper.start()
    leaked = 0
    try:
        end = time.monotonic() + 4
        while time.monotonic() < end and not leaked:
            with contextlib.suppress(OSError):
                leaked += SECRET in old_read("d/inner.txt")
    finally:
        stop.set()
        swapper.join()
    assert leaked


# --- the PathJail itself ------------------------------------------------------------------------


def test_the_sandbox_keeps_the_workspace_it_was_opened_on(tmp_path: Path) -> None:
    ws = build(tmp_path)
    sandbox = PathJail(ws)
    ws.rename(tmp_path / "moved")
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "README.md").write_text("impostor")
    assert ReadFileTool(sandbox).run({"path": "README.md"}) == "# Demo\n"


async def test_absolute_symlinks_that_stay_inside_work(ws: Path) -> None:
    (ws / "abs_sub").symlink_to(ws / "sub")
    tools = all_tools(ws)
    assert (await call(tools["read_file"], {"path": "abs_sub/note.txt"})) == ToolResult.ok(
        "a note\n"
    )
    listing = await call(tools["list_dir"], {"path": "abs_sub"})
    assert "note.txt" in listing.content


def _make_device(path: Path) -> bool:
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero: never ends
    except PermissionError:
        return False
    return True


@pytest.mark.skipif(not hasattr(os, "mknod"), reason="no mknod on this OS")
async def test_a_device_inside_the_workspace_is_refused_by_every_tool(ws: Path) -> None:
    if not _make_device(ws / "zero"):
        pytest.skip("mknod needs CAP_MKNOD; the FIFO cases cover the same check")
    tools = all_tools(ws)
    for tool_name in ("read_file", "grep", "write_file", "edit_file"):
        result = await call(tools[tool_name], input_for(tool_name, "zero", "zero"))
        assert result.error_type == "invalid_input", (tool_name, result)
        assert "not a regular file" in result.content
    assert (ws / "zero").is_char_device()  # not replaced by write_file
    grep = await call(tools["grep"], {"pattern": "x"})  # walked past, never opened
    assert not grep.is_error


_SECRET_WS = Path(__file__).parent  # any folder: only names are matched


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=30),
        st.sampled_from(
            [
                ".env",
                ".env.local",
                "a.env",
                "x.pem",
                "key",
                ".key",
                "id_rsa.pub",
                "id_rsa",
                "credentials",
                "credentials.json",
                "credentials.yaml",
                ".pgpass",
                "a\nb.pem",
                ".ENV",
                "id_ed25519",
                "x.p12",
                ".netrc.bak",
                "x.pem\n",
            ]
        ),
    )
)
def test_a_name_is_secret_exactly_when_a_pattern_matches_it(name: str) -> None:
    # One expression stands for the list: it must match what fnmatchcase matches, nothing else.
    expected = any(fnmatch.fnmatchcase(name, pattern) for pattern in SECRET_FILE_PATTERNS)
    with PathJail(_SECRET_WS) as sandbox:
        assert sandbox.is_secret(name) == expected
