"""read_file under attack: every attempt gets an error result that says why, or correct text."""

from __future__ import annotations

import errno
import os
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ruizn.effects.tools.base import ToolRegistry, invoke_tool
from ruizn.effects.tools.read import MAX_BYTES, TRUNCATED, ReadFileTool
from ruizn.state import JsonObject, ToolCall, ToolResult

pytestmark = pytest.mark.anyio

SECRET = "top secret, outside the workspace"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("# Demo\n", encoding="utf-8")
    (tmp_path / "outside.txt").write_text(SECRET, encoding="utf-8")
    (tmp_path / "outside_dir").mkdir()
    (tmp_path / "outside_dir" / "inner.txt").write_text(SECRET, encoding="utf-8")
    return workspace


async def read(ws: Path, path: Any, tool: ReadFileTool | None = None) -> ToolResult:
    registry = ToolRegistry([tool or ReadFileTool(ws)])
    with anyio.fail_after(5):  # nothing here may hang
        return await invoke_tool(registry, ToolCall(id="t", name="read_file", input={"path": path}))


def refused(result: ToolResult, kind: str, says: str) -> None:
    assert result.is_error, result
    assert result.error_type == kind, result
    assert says in result.content, result
    assert SECRET not in result.content


# --- escaping the workspace --------------------------------------------------------------------


async def test_dotdot_is_refused(ws: Path) -> None:
    refused(await read(ws, "../outside.txt"), "permission_error", "'..' is not allowed in a path")


async def test_dotdot_after_a_subdirectory_is_refused(ws: Path) -> None:
    refused(await read(ws, "a/../../outside.txt"), "permission_error", "'..' is not allowed")


async def test_dotdot_that_stays_inside_is_allowed(ws: Path) -> None:
    # Changed promise (issue 10's sandbox): `..` is resolved physically and allowed while it
    # stays inside; only a climb above the root is refused (the tests above).
    (ws / "sub").mkdir()
    assert await read(ws, "sub/../README.md") == ToolResult.ok("# Demo\n")


async def test_dotdot_follows_the_directory_actually_reached_like_the_kernel(ws: Path) -> None:
    (ws / "docs" / "deep").mkdir(parents=True)
    (ws / "docs" / "note.md").write_text("note")
    (ws / "in").symlink_to("docs/deep")
    assert await read(ws, "in/../note.md") == ToolResult.ok("note")


async def test_dotdot_through_a_symlink_to_the_root_cannot_climb_out(ws: Path) -> None:
    (ws / "top").symlink_to(".")
    refused(await read(ws, "top/../outside.txt"), "permission_error", "'..' is not allowed")


async def test_absolute_path_is_refused(ws: Path) -> None:
    refused(await read(ws, "/etc/passwd"), "permission_error", "absolute paths are not allowed")


async def test_absolute_path_into_the_workspace_is_refused_too(ws: Path) -> None:
    refused(
        await read(ws, str(ws / "README.md")), "permission_error", "absolute paths are not allowed"
    )


async def test_symlink_pointing_outside_is_refused(ws: Path) -> None:
    (ws / "link").symlink_to(ws.parent / "outside.txt")
    refused(await read(ws, "link"), "permission_error", "link resolves outside the workspace")


async def test_relative_symlink_climbing_out_is_refused(ws: Path) -> None:
    (ws / "link").symlink_to("../outside.txt")
    refused(await read(ws, "link"), "permission_error", "resolves outside the workspace")


async def test_path_through_a_symlinked_directory_outside_is_refused(ws: Path) -> None:
    (ws / "out").symlink_to(ws.parent / "outside_dir")
    refused(await read(ws, "out/inner.txt"), "permission_error", "resolves outside the workspace")


async def test_symlink_chain_inside_inside_outside_is_refused(ws: Path) -> None:
    (ws / "c").symlink_to(ws.parent / "outside.txt")
    (ws / "b").symlink_to(ws / "c")
    (ws / "a").symlink_to("b")
    refused(await read(ws, "a"), "permission_error", "a resolves outside the workspace")


async def test_symlink_loop_is_refused_without_hanging(ws: Path) -> None:
    (ws / "a").symlink_to("b")
    (ws / "b").symlink_to("a")
    refused(await read(ws, "a"), "invalid_input", "a: symlink loop")


async def test_path_through_a_symlink_loop_is_refused(ws: Path) -> None:
    (ws / "a").symlink_to("b")
    (ws / "b").symlink_to("a")
    refused(await read(ws, "a/file.txt"), "invalid_input", "symlink loop")


async def test_symlink_to_dev_zero_is_refused(ws: Path) -> None:
    (ws / "zero").symlink_to("/dev/zero")
    refused(await read(ws, "zero"), "permission_error", "zero resolves outside the workspace")


# --- things that are not regular files ---------------------------------------------------------


async def test_directory_is_refused(ws: Path) -> None:
    (ws / "sub").mkdir()
    refused(await read(ws, "sub"), "invalid_input", "sub is a directory, not a file")


async def test_the_workspace_itself_is_a_directory(ws: Path) -> None:
    refused(await read(ws, "."), "invalid_input", "is a directory")


async def test_fifo_is_refused_without_hanging(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    with anyio.fail_after(5):
        result = await read(ws, "pipe")
    refused(result, "invalid_input", "pipe is not a regular file")


async def test_missing_file_is_not_found(ws: Path) -> None:
    result = await read(ws, "nope.md")
    assert result == ToolResult(
        content="no such file: nope.md", is_error=True, error_type="not_found"
    )


async def test_dangling_symlink_is_not_found(ws: Path) -> None:
    (ws / "dangling").symlink_to("nowhere.txt")
    refused(await read(ws, "dangling"), "not_found", "no such file: dangling")


async def test_path_through_a_regular_file_is_not_found(ws: Path) -> None:
    result = await read(ws, "README.md/x")
    refused(result, "not_found", "no such file: README.md/x")
    assert str(ws) not in result.content


# --- permissions -------------------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file; simulated below")
async def test_unreadable_file_is_a_permission_error(ws: Path) -> None:
    secret = ws / "secret.txt"
    secret.write_text("x")
    secret.chmod(0)
    try:
        result = await read(ws, "secret.txt")
    finally:
        secret.chmod(0o600)
    assert result == ToolResult(
        content="Permission denied: secret.txt", is_error=True, error_type="permission_error"
    )


def _failing_open(monkeypatch: pytest.MonkeyPatch, name: str, err: int, message: str) -> None:
    """Make read_file's own os.open of `name` fail with `err`; other opens pass through."""
    real_open = os.open

    def fake(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(name):
            raise OSError(err, message, str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake)


# CI runs as root, which reads a chmod 000 file, so here the OS's refusal is simulated.
async def test_os_refusing_the_open_is_a_permission_error_even_as_root(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "secret.txt").write_text("x")
    _failing_open(monkeypatch, "secret.txt", errno.EACCES, "Permission denied")
    result = await read(ws, "secret.txt")
    # the path as the model gave it, not the absolute one
    assert result == ToolResult(
        content="Permission denied: secret.txt", is_error=True, error_type="permission_error"
    )
    assert (await read(ws, "README.md")).content == "# Demo\n"  # the others still open


async def test_symlink_swapped_in_after_the_checks_is_not_followed(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # O_NOFOLLOW makes the open fail with ELOOP if the file became a symlink meanwhile.
    (ws / "swapped.txt").write_text("x")
    _failing_open(monkeypatch, "swapped.txt", errno.ELOOP, "Too many levels of symbolic links")
    refused(await read(ws, "swapped.txt"), "permission_error", "swapped.txt became a symlink")


async def test_file_removed_after_the_checks_is_not_found(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws / "gone.txt").write_text("x")
    _failing_open(monkeypatch, "gone.txt", errno.ENOENT, "No such file or directory")
    result = await read(ws, "gone.txt")
    assert result == ToolResult(
        content="no such file: gone.txt", is_error=True, error_type="not_found"
    )


async def test_a_permission_error_raised_by_a_subclass_is_a_permission_error(ws: Path) -> None:
    class Locked(ReadFileTool):
        def _read_capped(self, target: str, given: str) -> bytes:
            raise PermissionError(13, "Permission denied", given)

    result = await read(ws, "README.md", tool=Locked(ws))
    assert result == ToolResult(
        content="Permission denied: README.md", is_error=True, error_type="permission_error"
    )


# --- content -----------------------------------------------------------------------------------


async def test_binary_content_is_refused(ws: Path) -> None:
    (ws / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    refused(
        await read(ws, "img.png"),
        "invalid_input",
        "img.png is a binary file (16 bytes); read_file returns text only",
    )


async def test_invalid_utf8_is_ok_with_replacement_chars(ws: Path) -> None:
    (ws / "latin1.txt").write_bytes("café ok \xff".encode("latin-1"))
    assert await read(ws, "latin1.txt") == ToolResult.ok("caf\ufffd ok \ufffd")


async def test_empty_file_is_ok_and_empty(ws: Path) -> None:
    (ws / "empty.txt").write_bytes(b"")
    assert await read(ws, "empty.txt") == ToolResult.ok("")


def _text_of(size: int) -> str:
    """Mixed ASCII and 3-byte text that encodes to exactly `size` bytes."""
    text = ("line 读取 %d\n" * (size // 10)) % tuple(range(size // 10))
    text = text.encode()[:size].decode("utf-8", errors="ignore")
    return text + "x" * (size - len(text.encode()))


async def test_exactly_512_kib_is_not_truncated_and_identical(ws: Path) -> None:
    text = _text_of(MAX_BYTES)
    assert len(text.encode()) == MAX_BYTES
    (ws / "exact.txt").write_text(text, encoding="utf-8")
    result = await read(ws, "exact.txt")
    assert result == ToolResult.ok(text)
    assert not result.content.endswith(TRUNCATED)


async def test_512_kib_plus_one_keeps_the_first_512_kib_then_the_marker(ws: Path) -> None:
    text = _text_of(MAX_BYTES)
    (ws / "big.txt").write_text(text + "!", encoding="utf-8")
    result = await read(ws, "big.txt")
    assert result == ToolResult.ok(text + "\n[truncated]")


@pytest.mark.parametrize(
    ("char", "bytes_before_the_cut"),
    [("读", 1), ("读", 2), ("é", 1), ("🙂", 1), ("🙂", 2), ("🙂", 3)],
)
async def test_multibyte_char_straddling_the_cut_is_dropped_whole(
    ws: Path, char: str, bytes_before_the_cut: int
) -> None:
    head = "a" * (MAX_BYTES - bytes_before_the_cut)
    (ws / "cut.txt").write_text(head + char + "tail", encoding="utf-8")
    result = await read(ws, "cut.txt")
    assert result == ToolResult.ok(head + TRUNCATED)
    assert "\ufffd" not in result.content


@pytest.mark.parametrize("char", ["读", "é", "🙂"])
async def test_multibyte_char_ending_exactly_at_the_cut_is_kept(ws: Path, char: str) -> None:
    head = "a" * (MAX_BYTES - len(char.encode()))
    (ws / "cut.txt").write_text(head + char + "tail", encoding="utf-8")
    assert await read(ws, "cut.txt") == ToolResult.ok(head + char + TRUNCATED)


async def test_100_mb_file_is_truncated_with_bounded_memory(ws: Path) -> None:
    lines = (b"x" * 63 + b"\n") * 128  # exactly the 8 KiB binary probe, all text
    huge = ws / "huge.log"
    with huge.open("wb") as f:
        f.write(lines)
        f.truncate(100 * 1024 * 1024)  # sparse: 100 MB that cost nothing to write
    tool = ReadFileTool(ws)
    tracemalloc.start()
    try:
        result = await read(ws, "huge.log", tool=tool)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not result.is_error, result
    assert result.content.startswith(lines.decode())
    assert result.content.endswith(TRUNCATED)
    assert len(result.content) == MAX_BYTES + len(TRUNCATED)
    # past the probe it is NUL bytes (the sparse hole), passed on as text: only 8 KiB is probed
    assert result.content[len(lines) : MAX_BYTES] == "\0" * (MAX_BYTES - len(lines))
    assert peak < 4 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"


async def test_chinese_file_name_and_content_are_read_correctly(ws: Path) -> None:
    (ws / "文档").mkdir()
    (ws / "文档" / "说明.md").write_text("读取当前目录下的 README.md。\n完成。", encoding="utf-8")
    assert await read(ws, "文档/说明.md") == ToolResult.ok("读取当前目录下的 README.md。\n完成。")


# --- the path itself ---------------------------------------------------------------------------


async def test_path_with_a_nul_byte_is_refused(ws: Path) -> None:
    refused(await read(ws, "README.md\x00.txt"), "invalid_input", "must not contain a NUL byte")


@pytest.mark.parametrize("path", [5, None, ["a"], {"p": 1}, True, 1.5])
async def test_path_that_is_not_a_string_is_invalid_input_via_the_schema(
    ws: Path, path: Any
) -> None:
    refused(
        await read(ws, path),
        "invalid_input",
        f"invalid input for read_file at path: {path!r} is not",
    )


async def test_empty_path_is_refused(ws: Path) -> None:
    refused(await read(ws, ""), "invalid_input", "path must not be empty")


async def test_path_with_a_lone_surrogate_is_invalid_input(ws: Path) -> None:
    refused(await read(ws, "bad\ud800.txt"), "invalid_input", "path")


async def test_path_too_long_is_invalid_input(ws: Path) -> None:
    result = await read(ws, "a" * 300)
    refused(result, "invalid_input", "too long")
    assert str(ws) not in result.content


async def test_bad_paths_are_errors_not_crashes(ws: Path) -> None:
    """Paths the OS itself rejects are error results, never exceptions."""
    for path in ["README.md/x", "bad\ud800.txt", "a" * 300, "/".join(["a"] * 3000)]:
        result = await read(ws, path)
        assert result.is_error, (path[:20], result)


async def test_a_newline_in_a_path_is_escaped_so_the_error_stays_one_line(ws: Path) -> None:
    result = await read(ws, "no\nsuch.md")
    assert result == ToolResult(
        content="no such file: 'no\\nsuch.md'", is_error=True, error_type="not_found"
    )


async def test_a_file_with_a_newline_in_its_name_is_still_read(ws: Path) -> None:
    (ws / "two\nlines.txt").write_text("ok")
    assert await read(ws, "two\nlines.txt") == ToolResult.ok("ok")


async def test_a_long_missing_path_gives_a_short_error(ws: Path) -> None:
    path = "/".join(["d" * 200] * 20)  # 4 KB: within PATH_MAX, every name within NAME_MAX
    result = await read(ws, path)
    assert result.error_type == "not_found"
    assert result.content.startswith("no such file: ddd")
    assert len(result.content) <= 300


async def test_symlink_inside_the_workspace_to_a_file_inside_is_allowed(ws: Path) -> None:
    (ws / "docs").mkdir()
    (ws / "docs" / "guide.md").write_text("guide")
    (ws / "alias.md").symlink_to("docs/guide.md")
    (ws / "docs" / "up.md").symlink_to("../README.md")  # climbs, but stays inside
    (ws / "abs.md").symlink_to(ws / "docs" / "guide.md")
    assert await read(ws, "alias.md") == ToolResult.ok("guide")
    assert await read(ws, "docs/up.md") == ToolResult.ok("# Demo\n")
    assert await read(ws, "abs.md") == ToolResult.ok("guide")


async def test_workspace_reached_through_a_symlink_still_reads(tmp_path: Path, ws: Path) -> None:
    (tmp_path / "ws_link").symlink_to(ws)
    assert await read(tmp_path / "ws_link", "README.md") == ToolResult.ok("# Demo\n")
    refused(await read(tmp_path / "ws_link", "../outside.txt"), "permission_error", "'..' is not")


# --- the event loop ----------------------------------------------------------------------------


async def test_reading_does_not_block_the_event_loop(ws: Path) -> None:
    (ws / "big.txt").write_bytes(b"z" * (MAX_BYTES + 10))
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0.01)

    class SlowDisk(ReadFileTool):
        def run(self, input: JsonObject) -> ToolResult | str:
            time.sleep(0.3)  # blocking I/O, in the worker thread
            return super().run(input)

    slow = SlowDisk(ws)
    slow.in_place = False  # a network mount (see test_mounts.py): the read may hang
    async with anyio.create_task_group() as group:
        group.start_soon(tick)
        result = await read(ws, "big.txt", tool=slow)
        group.cancel_scope.cancel()
    assert result.content == "z" * MAX_BYTES + TRUNCATED
    assert ticks >= 15  # ~30 in 0.3 s


async def test_a_local_workspace_is_read_in_place_and_a_remote_one_in_a_thread(ws: Path) -> None:
    threads: list[str] = []

    class Watched(ReadFileTool):
        def run(self, input: JsonObject) -> ToolResult | str:
            threads.append(threading.current_thread().name)
            return super().run(input)

    local = Watched(ws)
    assert local.in_place  # tmp_path is on this machine's disk or in its memory
    remote = Watched(ws)
    remote.in_place = False
    assert await read(ws, "README.md", tool=local) == ToolResult.ok("# Demo\n")
    assert await read(ws, "README.md", tool=remote) == ToolResult.ok("# Demo\n")
    assert threads[0] == threading.current_thread().name
    assert threads[1] != threading.current_thread().name


# --- property: no path made of these pieces ever reads outside ---------------------------------

_PIECES = ["README.md", "..", ".", "", "sub", "in", "out", "loop", "outside.txt", "/"]


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=6))
def test_no_path_ever_reads_outside_the_workspace(tmp_path: Path, pieces: list[str]) -> None:
    ws = tmp_path / "prop_ws"
    if not ws.exists():
        ws.mkdir()
        (ws / "README.md").write_text("# Demo\n")
        (tmp_path / "outside.txt").write_text(SECRET)
        (ws / "sub").mkdir()
        (ws / "in").symlink_to("sub")
        (ws / "sub" / "README.md").symlink_to("../README.md")
        (ws / "out").symlink_to("..")
        (ws / "loop").symlink_to("loop")
    path = "/".join(pieces)

    async def call() -> ToolResult:
        return await read(ws, path)

    result = anyio.run(call)
    assert isinstance(result, ToolResult)
    assert SECRET not in result.content
    if not result.is_error:
        assert result.content == "# Demo\n", path
