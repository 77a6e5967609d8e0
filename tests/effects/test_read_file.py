"""read_file under attack: every attempt gets an error result or a correct truncated text."""

from __future__ import annotations

import os
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from ruizn.effects.read_file import MAX_BYTES, TRUNCATED, ReadFileTool
from ruizn.effects.tools import ToolRegistry, invoke_tool
from ruizn.state import ToolCall, ToolResult

pytestmark = pytest.mark.anyio


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("# Demo\n", encoding="utf-8")
    (tmp_path / "outside.txt").write_text("secret", encoding="utf-8")
    return workspace


async def read(ws: Path, path: Any) -> ToolResult:
    registry = ToolRegistry([ReadFileTool(ws)])
    with anyio.fail_after(5):  # nothing here may hang
        return await invoke_tool(registry, ToolCall(id="t", name="read_file", input={"path": path}))


def _refused(result: ToolResult, kind: str, says: str) -> None:
    assert result.is_error, result
    assert result.error_type == kind, result
    assert says in result.content


async def test_dotdot_is_refused(ws: Path) -> None:
    _refused(await read(ws, "../outside.txt"), "permission_error", "'..' is not allowed")


async def test_dotdot_inside_a_path_is_refused(ws: Path) -> None:
    _refused(await read(ws, "a/../../outside.txt"), "permission_error", "'..'")


async def test_absolute_path_is_refused(ws: Path) -> None:
    _refused(await read(ws, "/etc/passwd"), "permission_error", "absolute paths are not allowed")


async def test_symlink_pointing_outside_is_refused(ws: Path) -> None:
    (ws / "link").symlink_to(ws.parent / "outside.txt")
    _refused(await read(ws, "link"), "permission_error", "resolves outside the workspace")


async def test_symlink_chain_leading_outside_is_refused(ws: Path) -> None:
    (ws / "c").symlink_to(ws.parent / "outside.txt")
    (ws / "b").symlink_to(ws / "c")
    (ws / "a").symlink_to("b")
    _refused(await read(ws, "a"), "permission_error", "resolves outside the workspace")


async def test_symlink_loop_is_refused(ws: Path) -> None:
    (ws / "x").symlink_to("y")
    (ws / "y").symlink_to("x")
    result = await read(ws, "x")
    assert result.is_error
    assert result.error_type in ("invalid_input", "permission_error")


async def test_directory_is_refused(ws: Path) -> None:
    (ws / "sub").mkdir()
    _refused(await read(ws, "sub"), "invalid_input", "is a directory")


async def test_fifo_is_refused_without_hanging(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    _refused(await read(ws, "pipe"), "invalid_input", "not a regular file")


async def test_symlink_to_dev_zero_is_refused(ws: Path) -> None:
    (ws / "zero").symlink_to("/dev/zero")
    _refused(await read(ws, "zero"), "permission_error", "outside the workspace")


async def test_permission_denied_by_the_os_is_a_permission_error(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # CI runs as root, which reads a chmod 000 file, so make the OS refuse the open itself.
    (ws / "secret.txt").write_text("x")
    real_open = os.open

    def deny(path: Any, flags: int, *args: Any) -> int:
        if str(path).endswith("secret.txt"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", deny)
    _refused(await read(ws, "secret.txt"), "permission_error", "Permission denied")


async def test_binary_content_is_refused(ws: Path) -> None:
    (ws / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    _refused(await read(ws, "img.png"), "invalid_input", "binary file (16 bytes)")


async def test_invalid_utf8_is_replaced_not_a_crash(ws: Path) -> None:
    (ws / "latin1.txt").write_bytes("caf\xe9 ok".encode("latin-1"))
    assert await read(ws, "latin1.txt") == ToolResult.ok("caf\ufffd ok")


async def test_empty_file_is_empty_content(ws: Path) -> None:
    (ws / "empty.txt").write_bytes(b"")
    assert await read(ws, "empty.txt") == ToolResult.ok("")


async def test_exactly_512_kib_is_not_truncated(ws: Path) -> None:
    (ws / "exact.txt").write_bytes(b"a" * MAX_BYTES)
    result = await read(ws, "exact.txt")
    assert result.content == "a" * MAX_BYTES


async def test_512_kib_plus_one_is_truncated_with_a_marker(ws: Path) -> None:
    (ws / "big.txt").write_bytes(b"b" * MAX_BYTES + b"c")
    result = await read(ws, "big.txt")
    assert not result.is_error
    assert result.content == "b" * MAX_BYTES + TRUNCATED


async def test_multibyte_char_at_the_cut_is_dropped_whole(ws: Path) -> None:
    data = b"a" * (MAX_BYTES - 1) + "读".encode() + b"tail"
    (ws / "cjk.txt").write_bytes(data)
    result = await read(ws, "cjk.txt")
    assert result.content == "a" * (MAX_BYTES - 1) + TRUNCATED
    assert "\ufffd" not in result.content


async def test_100_mb_file_is_read_with_bounded_memory(ws: Path) -> None:
    huge = ws / "huge.log"
    with huge.open("wb") as f:
        f.write(b"line of text\n" * 1000)  # text past the 8 KiB binary probe
        f.truncate(100 * 1024 * 1024)  # sparse: cheap to make
    tracemalloc.start()
    try:
        result = await read(ws, "huge.log")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # past the first 8 KiB it is NUL bytes, so only the probe decides: text, then cut
    assert result.content.endswith(TRUNCATED)
    assert peak < 4 * 1024 * 1024


async def test_nul_byte_in_path_is_refused(ws: Path) -> None:
    _refused(await read(ws, "README.md\x00.txt"), "invalid_input", "NUL byte")


@pytest.mark.parametrize("path", [5, None, ["README.md"], {"p": 1}])
async def test_path_that_is_not_a_string_is_invalid_input(ws: Path, path: Any) -> None:
    _refused(await read(ws, path), "invalid_input", "is not of type 'string'")


async def test_empty_path_is_refused(ws: Path) -> None:
    _refused(await read(ws, ""), "invalid_input", "must not be empty")


async def test_missing_file_is_not_found(ws: Path) -> None:
    _refused(await read(ws, "nope.md"), "not_found", "no such file: nope.md")


async def test_symlink_inside_the_workspace_is_followed(ws: Path) -> None:
    (ws / "docs").mkdir()
    (ws / "docs" / "guide.md").write_text("guide")
    (ws / "alias.md").symlink_to("docs/guide.md")
    assert await read(ws, "alias.md") == ToolResult.ok("guide")


async def test_chinese_name_and_content(ws: Path) -> None:
    (ws / "说明.md").write_text("读取当前目录下的 README.md", encoding="utf-8")
    assert await read(ws, "说明.md") == ToolResult.ok("读取当前目录下的 README.md")


async def test_reading_does_not_block_the_event_loop(ws: Path) -> None:
    (ws / "big.txt").write_bytes(b"z" * (MAX_BYTES + 10))
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.lowlevel.checkpoint()

    class Slow(ReadFileTool):
        def run(self, input: dict[str, Any]) -> ToolResult | str:
            time.sleep(0.2)  # a slow disk
            return super().run(input)

    registry = ToolRegistry([Slow(ws)])
    async with anyio.create_task_group() as group:
        group.start_soon(tick)
        result = await invoke_tool(
            registry, ToolCall(id="t", name="read_file", input={"path": "big.txt"})
        )
        group.cancel_scope.cancel()
    assert result.content.endswith(TRUNCATED)
    assert ticks > 50
