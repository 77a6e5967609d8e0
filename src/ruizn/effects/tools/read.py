"""`read_file`: read a text file inside the workspace, and nothing else.

The path is resolved and opened in one step by the workspace `PathJail` (component by
component, relative to directory descriptors, symlinks followed only while they stay
inside), and the target must be a regular file before it is opened (a FIFO would block the
open forever, a device would never end). At most `max_bytes + 1` bytes are read, so a huge
file costs no more memory than a small one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from ruizn.defaults import DEFAULT_TOOL_TIMEOUT
from ruizn.effects.tools.base import BlockingTool, ToolInputError
from ruizn.effects.tools.mounts import local_tree
from ruizn.effects.tools.workspace import PathJail, shown
from ruizn.state import JsonObject, ToolResult

MAX_BYTES = 512 * 1024
TRUNCATED = "\n[truncated]"
_BINARY_PROBE = 8192


def jail_of(where: PathJail | str | os.PathLike[str]) -> PathJail:
    """Tools take a shared PathJail, or a workspace path to build a default one for."""
    return where if isinstance(where, PathJail) else PathJail(where)


class ReadFileTool(BlockingTool):
    name = "read_file"
    description = (
        "Read a UTF-8 text file in the workspace. `path` is relative to the workspace root."
        f" Files over {MAX_BYTES // 1024} KiB are cut and end with '[truncated]'."
    )
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace."}
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    read_only = True

    def __init__(
        self,
        workspace: PathJail | Path,
        *,
        max_bytes: int = MAX_BYTES,
        timeout: float = DEFAULT_TOOL_TIMEOUT,
    ) -> None:
        super().__init__(timeout=timeout)
        self.jail = jail_of(workspace)
        self.workspace = self.jail.root
        self.max_bytes = max_bytes
        # On local file systems a read of at most max_bytes is too short to be worth a
        # worker thread's hand-over; elsewhere (NFS, FUSE) it may hang, so it keeps the
        # thread and its timeout.
        self.in_place = local_tree(self.workspace)

    def run(self, input: JsonObject) -> ToolResult | str:
        given = input["path"]
        say = shown(given) if isinstance(given, str) else repr(given)
        data, size = self._read_capped(given, say)
        if b"\0" in data[:_BINARY_PROBE]:
            raise ToolInputError(
                f"{say} is a binary file ({size} bytes); read_file returns text only"
            )
        if len(data) > self.max_bytes:
            return _decode(_whole_chars(data[: self.max_bytes])) + TRUNCATED
        return _decode(data)

    def _read_capped(self, given: str, say: str) -> tuple[bytes, int]:
        """The first `max_bytes + 1` bytes and the size; refusals are raised (see PathJail)."""
        return self.jail.read_bytes(given, self.max_bytes + 1)


def _whole_chars(data: bytes) -> bytes:
    """Drop a UTF-8 sequence cut in half at the end (at most 3 bytes)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0b1100_0000 != 0b1000_0000:  # a lead byte or ASCII
            width = (
                1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            )
            return data[:-back] if width > back else data
    return data


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
