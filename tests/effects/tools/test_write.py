"""write_file and edit_file: atomic, exact, and held by the sandbox even when approved.

(The refusals every file tool shares are in test_sandbox.py.)"""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ruizn.effects.tools.base import ToolInputError
from ruizn.effects.tools.workspace import PathJail
from ruizn.effects.tools.write import EditFileTool, WriteFileTool
from ruizn.state import ToolResult
from tests.effects.tools.workspace_world import LOG_SECRET, build, call, outside_snapshot

pytestmark = pytest.mark.anyio


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return build(tmp_path)


def _temps(folder: Path) -> list[str]:
    return [name for name in os.listdir(folder) if name.startswith(".ruizn-write-")]


def test_both_change_the_workspace_and_need_approval(ws: Path) -> None:
    for tool in (WriteFileTool(ws), EditFileTool(ws)):
        assert tool.read_only is False  # a crash mid-call is answered `interrupted` on resume
        assert type(tool).needs_approval is True


# --- write_file --------------------------------------------------------------------------------


async def test_write_file_creates_a_file_and_its_folders(ws: Path) -> None:
    result = await call(WriteFileTool(ws), {"path": "new/deep/a.txt", "content": "读取 ok\n"})
    assert result == ToolResult.ok("created new/deep/a.txt (10 bytes)")
    assert (ws / "new" / "deep" / "a.txt").read_text() == "读取 ok\n"
    assert _temps(ws / "new" / "deep") == []


async def test_write_file_replaces_and_keeps_the_mode(ws: Path) -> None:
    script = ws / "run.sh"
    script.write_text("old")
    script.chmod(0o751)
    result = await call(WriteFileTool(ws), {"path": "run.sh", "content": "#!/bin/sh\n"})
    assert result == ToolResult.ok("replaced run.sh (10 bytes)")
    assert script.read_text() == "#!/bin/sh\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o751


async def test_write_file_through_a_symlink_inside_replaces_its_target(ws: Path) -> None:
    (ws / "alias.txt").symlink_to("sub/note.txt")
    result = await call(WriteFileTool(ws), {"path": "alias.txt", "content": "new note"})
    assert not result.is_error, result
    assert (ws / "alias.txt").is_symlink()
    assert (ws / "sub" / "note.txt").read_text() == "new note"


async def test_write_file_through_a_dangling_symlink_inside_creates_its_target(ws: Path) -> None:
    (ws / "later.txt").symlink_to("./sub/later.txt")
    result = await call(WriteFileTool(ws), {"path": "later.txt", "content": "made"})
    assert result == ToolResult.ok("created later.txt (4 bytes)")
    assert (ws / "later.txt").is_symlink()
    assert (ws / "sub" / "later.txt").read_text() == "made"


@pytest.mark.parametrize(
    ("path", "kind", "says"),
    [
        ("sub", "invalid_input", "sub is a directory"),
        ("sub/", "invalid_input", "names a folder"),
        (".", "invalid_input", "is a directory"),
        ("pipe", "invalid_input", "pipe is not a regular file"),
        ("README.md/x", "not_found", "no such file"),
        ("outfile", "permission_error", "resolves outside"),
        (".ruizn/runs/r2/events.jsonl", "permission_error", "log folder"),
    ],
)
async def test_write_file_refusals(
    tmp_path: Path, ws: Path, path: str, kind: str, says: str
) -> None:
    before = outside_snapshot(tmp_path)
    result = await call(WriteFileTool(ws), {"path": path, "content": "x"})
    assert result.error_type == kind, result
    assert says in result.content
    assert outside_snapshot(tmp_path) == before
    assert not (ws / ".ruizn" / "runs" / "r2").exists()
    assert (ws / "README.md").read_text() == "# Demo\n"


async def test_write_file_refuses_content_it_cannot_encode_or_too_large(ws: Path) -> None:
    bad = await call(WriteFileTool(ws), {"path": "a.txt", "content": "x\ud800"})
    assert bad.error_type == "invalid_input"
    assert "lone surrogate" in bad.content
    big = await call(WriteFileTool(ws, max_bytes=10), {"path": "a.txt", "content": "é" * 6})
    assert big.error_type == "invalid_input"
    assert "too large" in big.content
    assert not (ws / "a.txt").exists()


async def test_write_file_secret_files_only_when_allowed(ws: Path) -> None:
    refused = await call(WriteFileTool(ws), {"path": ".env.local", "content": "K=1"})
    assert refused.error_type == "permission_error"
    assert not (ws / ".env.local").exists()
    allowed = WriteFileTool(PathJail(ws, allow_secret_files=True))
    assert not (await call(allowed, {"path": ".env.local", "content": "K=1"})).is_error
    assert (ws / ".env.local").read_text() == "K=1"


def test_write_file_preview_is_a_unified_diff_and_changes_nothing(ws: Path) -> None:
    tool = WriteFileTool(ws)
    assert tool.preview({"path": "README.md", "content": "# Demo\nmore\n"}) == (
        "--- a/README.md\n+++ b/README.md\n@@ -1 +1,2 @@\n # Demo\n+more\n"
    )
    assert tool.preview({"path": "new/b.txt", "content": "x"}) == (
        "--- /dev/null\n+++ b/new/b.txt\n@@ -0,0 +1 @@\n+x\n\\ No newline at end of file\n"
    )
    assert tool.preview({"path": "README.md", "content": "# Demo\n"}) == "README.md: no change"
    (ws / "img.png").write_bytes(b"\x89PNG\0\0")
    assert "replaces a binary or non-UTF-8 file (6 bytes)" in tool.preview(
        {"path": "img.png", "content": "x"}
    )
    assert (ws / "README.md").read_text() == "# Demo\n"
    assert not (ws / "new").exists()
    with pytest.raises(PermissionError):  # the refusals run would give
        tool.preview({"path": "../outside.txt", "content": "x"})


def test_a_long_preview_is_cut(ws: Path) -> None:
    text = WriteFileTool(ws).preview({"path": "n.txt", "content": "line\n" * 1000})
    assert text.endswith("[... 603 more diff lines]\n")


# --- atomicity ---------------------------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from ruizn.effects.tools.write import WriteFileTool

    tool = WriteFileTool(Path(sys.argv[1]), max_bytes=64 << 20)
    contents = ["A" * (16 << 20), "B" * (16 << 20)]
    print("ready", flush=True)
    i = 0
    while True:
        tool.run({"path": "big.txt", "content": contents[i % 2]})
        i += 1
    """
)


def test_kill_9_mid_write_leaves_the_old_file_or_the_new_one(ws: Path) -> None:
    contents = {b"A" * (16 << 20), b"B" * (16 << 20)}
    WriteFileTool(ws, max_bytes=64 << 20).run({"path": "big.txt", "content": "A" * (16 << 20)})
    rng = random.Random(7)
    for _ in range(5):
        child = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(ws)],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        threading.Event().wait(rng.uniform(0.05, 0.5))  # somewhere in a write, most likely
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        assert (ws / "big.txt").read_bytes() in contents
    # What a kill can leave is a temporary beside it, never the target itself.
    for name in _temps(ws):
        assert name.endswith(".tmp")


def test_a_reader_never_sees_a_half_written_file(ws: Path) -> None:
    tool = WriteFileTool(ws)
    versions = ["1" * (1 << 20), "2" * (2 << 20)]
    tool.run({"path": "f.txt", "content": versions[0]})
    stop = threading.Event()
    seen: set[str] = set()

    def reader() -> None:
        while not stop.is_set():
            seen.add((ws / "f.txt").read_text())

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(40):
            tool.run({"path": "f.txt", "content": versions[i % 2]})
    finally:
        stop.set()
        thread.join()
    assert seen <= set(versions)
    assert _temps(ws) == []


# --- edit_file ---------------------------------------------------------------------------------


async def edit(ws: Path, path: str, old: str, new: str, **extra: object) -> ToolResult:
    tool_input = {"path": path, "old_text": old, "new_text": new, **extra}
    return await call(EditFileTool(ws), tool_input)


async def test_edit_replaces_a_unique_text(ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\ny = 2\n")
    assert await edit(ws, "a.py", "y = 2", "y = 3") == ToolResult.ok(
        "edited a.py: replaced 1 occurrence"
    )
    assert (ws / "a.py").read_text() == "x = 1\ny = 3\n"


async def test_edit_refuses_a_text_that_is_not_unique_and_says_how_many(ws: Path) -> None:
    (ws / "a.py").write_text("v = 1\nv = 1\nv = 1\n")
    result = await edit(ws, "a.py", "v = 1", "v = 2")
    assert result.error_type == "invalid_input"
    assert "old_text occurs 3 times in a.py" in result.content
    assert (ws / "a.py").read_text() == "v = 1\nv = 1\nv = 1\n"
    assert await edit(ws, "a.py", "v = 1", "v = 2", replace_all=True) == ToolResult.ok(
        "edited a.py: replaced 3 occurrences"
    )
    assert (ws / "a.py").read_text() == "v = 2\nv = 2\nv = 2\n"


async def test_edit_refuses_a_missing_text(ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\n")
    result = await edit(ws, "a.py", "x  = 1", "x = 2")
    assert result.error_type == "invalid_input"
    assert "old_text was not found in a.py" in result.content
    assert (ws / "a.py").read_text() == "x = 1\n"


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [("", "x", "must not be empty"), ("same", "same", "nothing would change")],
)
async def test_edit_refuses_pointless_edits(ws: Path, old: str, new: str, says: str) -> None:
    (ws / "a.py").write_text("same\n")
    result = await edit(ws, "a.py", old, new)
    assert result.error_type == "invalid_input"
    assert says in result.content


async def test_edit_of_a_missing_file_is_not_found(ws: Path) -> None:
    assert await edit(ws, "nope.py", "a", "b") == ToolResult(
        content="no such file: nope.py", is_error=True, error_type="not_found"
    )


async def test_edit_keeps_crlf_line_endings_when_the_model_quotes_lf(ws: Path) -> None:
    (ws / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    assert not (await edit(ws, "w.txt", "one\ntwo\n", "uno\ndos\ntres\n")).is_error
    assert (ws / "w.txt").read_bytes() == b"uno\r\ndos\r\ntres\r\nthree\r\n"


async def test_edit_keeps_every_byte_outside_the_edit(ws: Path) -> None:
    original = "\ufeffmixed\r\nends\nhere\r\n\ttab \u2028 sep\n"
    (ws / "m.txt").write_bytes(original.encode())
    assert not (await edit(ws, "m.txt", "ends", "END")).is_error
    assert (ws / "m.txt").read_bytes() == original.replace("ends", "END").encode()


async def test_edit_refuses_non_utf8_and_binary_files_untouched(ws: Path) -> None:
    (ws / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    result = await edit(ws, "latin1.txt", "caf", "CAF")
    assert result.error_type == "invalid_input"
    assert "not valid UTF-8" in result.content
    assert (ws / "latin1.txt").read_bytes() == "café\n".encode("latin-1")
    (ws / "b.bin").write_bytes(b"\0abc")
    result = await edit(ws, "b.bin", "abc", "x")
    assert result.error_type == "invalid_input"
    assert "binary" in result.content


async def test_edit_through_a_symlink_inside_edits_the_target(ws: Path) -> None:
    (ws / "alias.txt").symlink_to("sub/note.txt")
    assert not (await edit(ws, "alias.txt", "a note", "the note")).is_error
    assert (ws / "alias.txt").is_symlink()
    assert (ws / "sub" / "note.txt").read_text() == "the note\n"


def test_edit_preview_is_the_diff_of_the_edit(ws: Path) -> None:
    (ws / "a.py").write_text("x = 1\ny = 2\n")
    preview = EditFileTool(ws).preview({"path": "a.py", "old_text": "y = 2", "new_text": "y = 3"})
    assert preview == "--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3\n"
    assert (ws / "a.py").read_text() == "x = 1\ny = 2\n"
    (ws / "b.py").write_text("z\nz\n")
    with pytest.raises(ToolInputError, match="occurs 2 times"):  # the refusal run would give
        EditFileTool(ws).preview({"path": "b.py", "old_text": "z", "new_text": "w"})


async def test_writes_do_not_block_the_event_loop(ws: Path) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0.001)

    async with anyio.create_task_group() as group:
        group.start_soon(tick)
        for _ in range(20):
            await call(WriteFileTool(ws), {"path": "t.txt", "content": "x" * (1 << 20)})
        group.cancel_scope.cancel()
    assert ticks > 20


# --- property: no path made of these pieces ever writes outside ---------------------------------

_PIECES = ["new.txt", "..", ".", "", "sub", "out", "outabs", "outfile", "chain", "loop", "logs"]


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=5), st.booleans())
def test_no_path_ever_writes_outside_the_workspace(
    tmp_path: Path, pieces: list[str], edit: bool
) -> None:
    world = tmp_path / "prop"
    if not world.exists():
        world.mkdir()
        build(world)
    before = outside_snapshot(world)
    path = "/".join(pieces)
    if edit:
        tool_input = {"path": path, "old_text": "top secret", "new_text": "changed"}
        tool: WriteFileTool | EditFileTool = EditFileTool(world / "ws")
    else:
        tool_input = {"path": path, "content": "changed"}
        tool = WriteFileTool(world / "ws")
    result = anyio.run(call, tool, tool_input)
    assert isinstance(result, ToolResult)
    assert outside_snapshot(world) == before, path
    assert (world / "ws" / ".ruizn" / "runs" / "r1" / "events.jsonl").read_text() == LOG_SECRET
