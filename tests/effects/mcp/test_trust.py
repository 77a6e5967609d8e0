"""What an MCP server may not do to ruizn, against a real hostile server process
(tests/mcp_servers/hostile.py): flood its stderr file, plant that file as a link or a FIFO,
smuggle terminal controls or secrets into what ruizn shows, or make two tools answer to one
name."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from ruizn.effects.mcp.config import MCPServer
from ruizn.effects.mcp.names import McpStartupError
from ruizn.effects.mcp.stderr import STDERR_KEEP, StderrFile
from ruizn.state import ToolResult
from tests.effects.mcp.conftest import gone, pids_in, toolset
from tests.mcp_servers import SERVERS

pytestmark = pytest.mark.anyio

HOSTILE = str(SERVERS / "hostile.py")
KEY = "sk-ant-hostile-test-0123456789"


def hostile(*flags: str, name: str = "hostile") -> MCPServer:
    return MCPServer.stdio(name, sys.executable, [HOSTILE, *flags])


# -- its stderr file -------------------------------------------------------------------------


async def test_a_flood_on_stderr_keeps_its_head_and_tail_within_a_megabyte(tmp_path: Path) -> None:
    async with toolset(hostile(), stderr_dir=tmp_path) as run:
        assert await run.call("mcp__hostile__flood", megabytes=6) == ToolResult.ok("flooded")
        # The server is not slowed to a stop by its own noise: it still answers.
        assert await run.call("mcp__hostile__echo", text="after") == ToolResult.ok("after")
    data = (tmp_path / "mcp-hostile.stderr").read_bytes()
    # Its first and last 512 KB, each cut back to whole lines (of 100 bytes), and the marker.
    assert 2 * STDERR_KEEP - 200 <= len(data) <= 2 * STDERR_KEEP + 100
    text = data.decode("utf-8")
    assert text.startswith("hostile server pid ")  # the head: how it started
    assert text.endswith("flood: the last line\n")  # the tail: how it ended
    [marker] = [line for line in text.splitlines() if line.startswith("[ruizn: ")]
    assert marker.endswith(" bytes of its stderr dropped here]")
    dropped = int(marker.split()[1])
    # Nothing is lost without a count: what is kept plus what was dropped is all it wrote.
    first_line = text.partition("\n")[0] + "\n"
    written = len(first_line) + 6 * 1024 * 1024 // 100 * 100 + len("flood: the last line\n")
    assert len(data) - len(marker) - 1 + dropped == written  # the marker is a line of its own


async def test_each_start_of_the_servers_appends_within_its_own_cap(tmp_path: Path) -> None:
    for _ in range(2):
        async with toolset(hostile(), stderr_dir=tmp_path) as run:
            await run.call("mcp__hostile__flood", megabytes=2)
    text = (tmp_path / "mcp-hostile.stderr").read_text(encoding="utf-8")
    assert text.count("hostile server pid ") == 2
    assert text.count("flood: the last line\n") == 2
    assert len(text) <= 2 * (2 * STDERR_KEEP + 100)


async def test_a_stderr_file_planted_as_a_link_is_refused_and_its_target_untouched(
    tmp_path: Path,
) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("mine\n", encoding="utf-8")
    folder = tmp_path / "mcp"
    folder.mkdir()
    (folder / "mcp-hostile.stderr").symlink_to(target)
    with pytest.raises(McpStartupError) as caught:
        async with toolset(hostile(), stderr_dir=folder):
            pytest.fail("a toolset must not write its stderr through a link")
    assert str(caught.value) == (
        f"MCP server hostile: cannot open a file for its stderr: {folder / 'mcp-hostile.stderr'}"
        " is a symbolic link, not a file"
    )
    assert target.read_text(encoding="utf-8") == "mine\n"


async def test_a_stderr_folder_planted_as_a_link_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "mcp").symlink_to(elsewhere)
    with pytest.raises(McpStartupError, match="is a symbolic link, not a folder"):
        async with toolset(hostile(), stderr_dir=tmp_path / "mcp" / "RUN"):
            pytest.fail("unreachable")
    assert list(elsewhere.iterdir()) == []


async def test_a_stderr_file_planted_as_a_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "mcp-hostile.stderr")
    with anyio.fail_after(20), pytest.raises(McpStartupError) as caught:
        async with toolset(hostile(), stderr_dir=tmp_path):
            pytest.fail("unreachable")
    assert str(caught.value).endswith("is not a regular file")


def cut_file(tmp_path: Path, keep: int, *chunks: bytes) -> bytes:
    path = tmp_path / "cut.stderr"
    path.write_bytes(b"old run\n")
    sink = StderrFile(os.open(path, os.O_RDWR), keep=keep)
    for chunk in chunks:
        sink.write(chunk)
    sink.close()
    return path.read_bytes()


async def test_the_cut_keeps_whole_lines_and_counts_every_byte_it_drops(tmp_path: Path) -> None:
    # Head: 10 bytes, back to its last newline; tail: the last 10, from a line start; 34 in all.
    kept = cut_file(tmp_path, 10, b"one\ntwo\nthree\n", b"four\nfive\nsix\nseven\n")
    assert kept == b"old run\none\ntwo\n[ruizn: 16 bytes of its stderr dropped here]\nsix\nseven\n"
    # Within the cap nothing changes; the line before this start is kept as it was.
    assert cut_file(tmp_path, 100, b"a\n", b"b\n") == b"old run\na\nb\n"
    # A head with no newline at all is kept as it is, and the marker starts a line of its own.
    kept = cut_file(tmp_path, 4, b"abcdefghij\nxyz\n")
    assert kept == b"old run\nabcd\n[ruizn: 7 bytes of its stderr dropped here]\nxyz\n"


async def test_a_full_disk_ends_the_files_writing_and_nothing_else() -> None:
    sink = StderrFile(os.open("/dev/full", os.O_RDWR), keep=4)
    sink.write(b"hello\nworld\n")  # ENOSPC: no exception reaches the pump or the server
    sink.write(b"more\n")
    sink.close()


# -- what ruizn shows of it ------------------------------------------------------------------


async def test_notices_and_start_up_errors_are_inert_and_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    key_file = tmp_path / "key.txt"
    key_file.write_text(KEY, encoding="utf-8")
    async with toolset(hostile("--key-file", str(key_file)), stderr_dir=tmp_path) as run:
        died = await run.call("mcp__hostile__die")
        assert "key=[redacted] the end" in died.content
        assert "\x1b" not in died.content
        await wait_for_notice(run.notices, "stopped")
    [notice] = [n for n in run.notices if "stopped" in n]
    assert "(its stderr ends: ␛]52;c;cm0gLXJmIH4K␇␛]0;pwned␇␛[2J␛[H\\x9b31m" in notice
    assert KEY not in notice
    with pytest.raises(McpStartupError) as caught:
        async with toolset(hostile("--key-file", str(key_file), "--die-at-start")):
            pytest.fail("unreachable")
    assert "key=[redacted] the end)" in str(caught.value)
    assert "\x1b" not in str(caught.value)
    # The file keeps what the server wrote, byte for byte: it is evidence, not a display.
    assert f"key={KEY}" in (tmp_path / "mcp-hostile.stderr").read_text(encoding="utf-8")


async def test_a_servers_own_secrets_are_redacted_from_what_is_shown(tmp_path: Path) -> None:
    token = "tok-0123456789-abcdef"
    key_file = tmp_path / "key.txt"
    key_file.write_text(token, encoding="utf-8")
    server = MCPServer.stdio(
        "hostile", sys.executable, [HOSTILE, "--key-file", str(key_file)], env={"GH": token}
    )
    async with toolset(server) as run:
        died = await run.call("mcp__hostile__die")
        await wait_for_notice(run.notices, "stopped")
    assert token not in died.content + " ".join(run.notices)
    assert "key=[redacted] the end" in died.content


async def wait_for_notice(notices: list[str], word: str) -> None:
    with anyio.fail_after(10):
        while not any(word in n for n in notices):  # noqa: ASYNC110
            await anyio.sleep(0.02)


# -- names -----------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--collide", "--collide-reversed"])
async def test_tools_that_map_to_one_name_are_refused_whatever_the_order(
    flag: str, tmp_path: Path
) -> None:
    with pytest.raises(McpStartupError) as caught:
        async with toolset(hostile(flag), stderr_dir=tmp_path):
            pytest.fail("a toolset with two tools under one name must not open")
    assert str(caught.value) == (
        "MCP server hostile: its tools 'x.y' and 'x_y' both become mcp__hostile__x_y;"
        " rename one of them on the server"
    )
    [pid] = pids_in(tmp_path / "mcp-hostile.stderr")
    assert gone(pid)
