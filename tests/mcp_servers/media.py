"""A real MCP server (the `mcp` SDK's MCPServer) whose tools return media, and whose tool
list changes while a run goes on.

Run over stdio: `python tests/mcp_servers/media.py STATE_DIR`. STATE_DIR holds what outlives
the process, as a real server's world would (a browser profile, a database): `pids` (one
line per start) and `switched` (present once `switch` ran: the server then offers
`new_tool` instead of `old_tool`, after a restart too).
"""

from __future__ import annotations

import os
import struct
import sys
import zlib
from pathlib import Path

import anyio
from mcp.server.mcpserver import Audio, Context, Image, MCPServer
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)
STATE = Path(sys.argv[1]) if len(sys.argv) > 1 else None

server = MCPServer("media")


def png(width: int, height: int) -> bytes:
    """A real grayscale PNG of this size (a gradient), as a screenshot tool would send."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(
        b"\0" + bytes((x * 7 + y * 3) % 256 for x in range(width)) for y in range(height)
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


@server.tool(
    description="A screenshot of the given size.", annotations=READ_ONLY, structured_output=False
)
def screenshot(width: int, height: int) -> list[object]:
    return [f"a {width}x{height} screenshot:", Image(data=png(width, height), format="png")]


@server.tool(
    description="A Windows bitmap (a type the model cannot take).",
    annotations=READ_ONLY,
    structured_output=False,
)
def bitmap() -> list[object]:
    return [Image(data=b"BM" + bytes(64), format="bmp")]


@server.tool(description="A short sound.", annotations=READ_ONLY, structured_output=False)
def sound() -> list[object]:
    return ["a beep:", Audio(data=b"RIFF" + bytes(40), format="wav")]


def old_tool(text: str) -> str:
    return f"old: {text}"


def new_tool(text: str, times: int = 1) -> str:
    return f"new: {text * times}"


def clash_a() -> str:
    return "a"


def _offer(switched: bool) -> None:
    if switched:
        server.add_tool(new_tool, description="The new tool.", annotations=READ_ONLY)
    else:
        server.add_tool(old_tool, description="The old tool.", annotations=READ_ONLY)


@server.tool(
    description="Replace old_tool by new_tool (or, with clash, add two tools that would share"
    " one API name), and tell the client the tool list changed.",
    annotations=READ_ONLY,
)
async def switch(ctx: Context, clash: bool = False) -> str:
    if clash:
        server.add_tool(clash_a, name="x.y", annotations=READ_ONLY)
        server.add_tool(clash_a, name="x_y", annotations=READ_ONLY)
    else:
        server.remove_tool("old_tool")
        _offer(switched=True)
        if STATE is not None:
            (STATE / "switched").write_text("yes\n")
    # The 2026-07-28 protocol's way: an event on the listen streams clients opened. A moment
    # to let it reach the client before the answer does, as a server that announces its
    # change first would.
    await ctx.notify_tools_changed()
    await anyio.sleep(0.3)
    return "switched"


def main() -> None:
    if STATE is not None:
        STATE.mkdir(parents=True, exist_ok=True)
        with (STATE / "pids").open("a") as pids:
            pids.write(f"{os.getpid()}\n")
    _offer(switched=STATE is not None and (STATE / "switched").exists())
    server.run()


if __name__ == "__main__":
    main()
