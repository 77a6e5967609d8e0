"""`read_file`: read a text file inside the workspace, and nothing else.

The path is checked as given (no absolute path, no `..`), then resolved and checked again
(a symlink may not lead outside), then the target must be a regular file before it is
opened (a FIFO would block the open forever, a device would never end). At most
`max_bytes + 1` bytes are read, so a huge file costs no more memory than a small one.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath
from typing import ClassVar

from ruizn.effects.tools import DEFAULT_TIMEOUT, BlockingTool, ToolInputError
from ruizn.state import JsonObject, ToolResult

MAX_BYTES = 512 * 1024
TRUNCATED = "\n[truncated]"
_BINARY_PROBE = 8192


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
        self, workspace: Path, *, max_bytes: int = MAX_BYTES, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        super().__init__(timeout=timeout)
        self.workspace = Path(os.path.realpath(workspace))
        self.max_bytes = max_bytes

    def run(self, input: JsonObject) -> ToolResult | str:
        given = input["path"]
        target = self._resolve(given)
        shown = _shown(given)
        try:
            info = os.stat(target)
        except (FileNotFoundError, NotADirectoryError):
            # Raised, like every refusal here, so invoke_tool shortens a 4 KB path.
            raise FileNotFoundError(errno.ENOENT, "no such file", shown) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ToolInputError(f"{shown}: symlink loop") from None
            if exc.errno == errno.ENAMETOOLONG:
                raise ToolInputError("path is too long") from None
            raise
        if stat.S_ISDIR(info.st_mode):
            raise ToolInputError(f"{shown} is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise ToolInputError(f"{shown} is not a regular file (a pipe, socket or device)")
        data = self._read_capped(target, shown)
        if b"\0" in data[:_BINARY_PROBE]:
            size = f"{info.st_size} bytes"
            raise ToolInputError(f"{shown} is a binary file ({size}); read_file returns text only")
        if len(data) > self.max_bytes:
            return _decode(_whole_chars(data[: self.max_bytes])) + TRUNCATED
        return _decode(data)

    def _resolve(self, given: str) -> str:
        if not given:
            raise ToolInputError("path must not be empty")
        if "\0" in given:
            raise ToolInputError("path must not contain a NUL byte")
        try:
            given.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate, which JSON can carry ("\ud800")
            raise ToolInputError("path is not valid Unicode text") from None
        pure = PurePosixPath(given)
        if pure.is_absolute():
            raise PermissionError(
                "absolute paths are not allowed; give a path relative to the workspace"
            )
        if ".." in pure.parts:
            raise PermissionError(f"{_shown(given)}: '..' is not allowed in a path")
        # realpath follows symlink chains and stops (without hanging) on a loop.
        resolved = os.path.realpath(self.workspace / pure)
        if not Path(resolved).is_relative_to(self.workspace):
            raise PermissionError(f"{_shown(given)} resolves outside the workspace")
        return resolved

    def _read_capped(self, target: str, shown: str) -> bytes:
        # O_NONBLOCK: a FIFO swapped in after the check still cannot block the open.
        # O_NOFOLLOW: nor can a symlink swapped in for the file lead elsewhere.
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError as exc:
            # Name the path as the model gave it, not the absolute one.
            if exc.errno == errno.ELOOP:
                raise PermissionError(f"{shown} became a symlink; not followed") from None
            if exc.errno == errno.ENOENT:  # removed since the stat
                raise FileNotFoundError(exc.errno, "no such file", shown) from None
            raise type(exc)(exc.errno, exc.strerror, shown) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ToolInputError(f"{shown} is not a regular file")
            limit = self.max_bytes + 1
            chunks: list[bytes] = []
            got = 0
            while got < limit:
                chunk = os.read(fd, min(limit - got, 65536))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)


def _shown(given: str) -> str:
    """The path for an error message: one line, so a newline in a name is escaped."""
    return given if given.isprintable() else repr(given)


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
