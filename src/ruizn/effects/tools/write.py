"""Tools that change the workspace: `write_file` and `edit_file` (issue 13), on the PathJail.

Both resolve through the same PathJail as read_file (so `..` above the root, absolute paths,
symlinks leading out, the log folder and secret files are refused however the call was
approved), and both replace a file atomically: the new bytes go to a temporary file in the
same folder (created through the folder's descriptor), are fsynced, renamed over the target
with `renameat` on that same descriptor, and the folder is fsynced. A reader, or a crash at
any moment, sees the old file or the new one, never half of it. A crash can leave a
temporary `.ruizn-write-*.tmp` beside the target; it is never the target.

Choices:
- A symlink (inside the workspace) as the target: the file it leads to is replaced, not
  the link. A FIFO, device or folder as the target is refused, and never opened.
- `write_file` makes missing folders on the way, and keeps an existing file's mode.
- `edit_file` edits UTF-8 text only: a binary file (NUL in the first 8 KiB) or one that is not
  valid UTF-8 is refused (`write_file` can still replace it whole). Everything outside the
  replaced text is kept byte for byte, BOM and line endings included. Line endings: if
  `old_text` is not found as given and the file uses CRLF, `old_text` and `new_text` are
  tried with their LF line ends turned into CRLF, so a model quoting lines without `\r` edits a
  CRLF file and the file stays CRLF throughout.
- Neither is read-only: a crash mid-call means resume answers `interrupted`, never a second
  write. Both have `needs_approval = True` and a `preview(input)` giving the unified diff for
  an approval prompt. `preview` reads the workspace (blocking I/O: call it off the event loop)
  and raises the same refusals `run` would.
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import os
import secrets
import stat
from typing import ClassVar

from ruizn.defaults import DEFAULT_TOOL_TIMEOUT
from ruizn.effects.tools.base import BlockingTool, ToolInputError
from ruizn.effects.tools.read import jail_of
from ruizn.effects.tools.workspace import (
    Entry,
    PathJail,
    open_child_file,
    read_capped,
    refuse_non_regular,
    shown,
)
from ruizn.state import JsonObject, ToolResult

MAX_WRITE_BYTES = 10 * 1024 * 1024
MAX_EDIT_BYTES = 10 * 1024 * 1024
# A diff for a human to read at a prompt: past this it is summarised.
MAX_DIFF_LINES = 400
_MAX_DIFF_INPUT = 1024 * 1024
_BINARY_PROBE = 8192


class _ChangingTool(BlockingTool):
    read_only = False
    needs_approval = True

    def __init__(
        self,
        workspace: PathJail | os.PathLike[str] | str,
        *,
        max_bytes: int = MAX_WRITE_BYTES,
        timeout: float = DEFAULT_TOOL_TIMEOUT,
    ) -> None:
        super().__init__(timeout=timeout)
        self.jail = jail_of(workspace)
        self.max_bytes = max_bytes

    def _resolve(self, given: object, *, create_dirs: bool) -> Entry:
        if isinstance(given, str) and given.endswith("/"):
            raise ToolInputError(f"{shown(given)} names a folder; give a file path")
        if not isinstance(given, str):
            raise ToolInputError("path must be a string")
        entry = self.jail.resolve_entry(given, missing_ok=True, create_dirs=create_dirs)
        if entry.info is not None:
            try:
                refuse_non_regular(entry.info, shown(given))
            except ToolInputError:
                os.close(entry.dir_fd)
                raise
        return entry

    def _read_old(self, entry: Entry, say: str, limit: int) -> bytes | None:
        """The target's bytes (at most `limit` + 1), or None when there is no file yet."""
        if entry.info is None:
            return None
        fd, _ = open_child_file(entry.dir_fd, entry.name, entry.info, say)
        try:
            return read_capped(fd, limit + 1)
        finally:
            os.close(fd)


class WriteFileTool(_ChangingTool):
    name = "write_file"
    description = (
        "Create or replace a file in the workspace with the given text (UTF-8). Missing"
        " folders are made. The replacement is atomic. `path` is relative to the workspace."
    )
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace."},
            "content": {"type": "string", "description": "The whole new content."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }

    def run(self, input: JsonObject) -> ToolResult | str:
        given, data = input["path"], self._encode(input["content"])
        say = shown(given)
        entry = self._resolve(given, create_dirs=True)
        try:
            existed = entry.info is not None
            mode = stat.S_IMODE(entry.info.st_mode) if entry.info is not None else None
            atomic_write(entry.dir_fd, entry.name, data, mode=mode, say=say)
        finally:
            os.close(entry.dir_fd)
        return f"{'replaced' if existed else 'created'} {say} ({len(data):,} bytes)"

    def preview(self, input: JsonObject) -> str:
        given, data = input["path"], self._encode(input["content"])
        say = shown(given)
        try:
            entry = self._resolve(given, create_dirs=False)
        except FileNotFoundError:  # a folder on the way is missing: it would be made
            return _diff(say, None, data)
        try:
            return _diff(say, self._read_old(entry, say, _MAX_DIFF_INPUT), data)
        finally:
            os.close(entry.dir_fd)

    def _encode(self, content: object) -> bytes:
        if not isinstance(content, str):
            raise ToolInputError("content must be a string")
        if len(content) > self.max_bytes:
            raise ToolInputError(f"content is too large (the limit is {self.max_bytes:,} bytes)")
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolInputError("content is not valid Unicode text (a lone surrogate)") from None
        if len(data) > self.max_bytes:
            raise ToolInputError(f"content is too large (the limit is {self.max_bytes:,} bytes)")
        return data


class EditFileTool(_ChangingTool):
    name = "edit_file"
    description = (
        "Replace exact text in a UTF-8 text file of the workspace. `old_text` must occur"
        " exactly once (whitespace included) unless `replace_all` is true. Line endings of the"
        " file are kept."
    )
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path relative to the workspace."},
            "old_text": {"type": "string", "description": "The exact text to replace."},
            "new_text": {"type": "string", "description": "The text to put in its place."},
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence (default false: exactly one).",
            },
        },
        "required": ["path", "old_text", "new_text"],
        "additionalProperties": False,
    }

    def run(self, input: JsonObject) -> ToolResult | str:
        say = shown(input["path"])
        entry = self._resolve(input["path"], create_dirs=False)
        try:
            _, new, count = self._plan(entry, say, input)
            # _plan refused a missing file, so info is there.
            mode = stat.S_IMODE(entry.info.st_mode) if entry.info is not None else None
            atomic_write(entry.dir_fd, entry.name, new.encode("utf-8"), mode=mode, say=say)
        finally:
            os.close(entry.dir_fd)
        return f"edited {say}: replaced {count} occurrence{'s' if count != 1 else ''}"

    def preview(self, input: JsonObject) -> str:
        say = shown(input["path"])
        entry = self._resolve(input["path"], create_dirs=False)
        try:
            old, new, _ = self._plan(entry, say, input)
        finally:
            os.close(entry.dir_fd)
        return _diff(say, old.encode("utf-8"), new.encode("utf-8"))

    def _plan(self, entry: Entry, say: str, input: JsonObject) -> tuple[str, str, int]:
        """The file's text, its text after the edit, and how many places changed."""
        old_text, new_text = input["old_text"], input["new_text"]
        if not old_text:
            raise ToolInputError("old_text must not be empty (use write_file to create a file)")
        if old_text == new_text:
            raise ToolInputError("old_text and new_text are the same: nothing would change")
        data = self._read_old(entry, say, MAX_EDIT_BYTES)
        if data is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", say)
        if len(data) > MAX_EDIT_BYTES:
            raise ToolInputError(
                f"{say} is too large to edit (over {MAX_EDIT_BYTES:,} bytes); use write_file"
            )
        if b"\0" in data[:_BINARY_PROBE]:
            raise ToolInputError(f"{say} is a binary file; edit_file edits text only")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolInputError(
                f"{say} is not valid UTF-8 text; edit_file edits UTF-8 only"
                " (write_file can replace it whole)"
            ) from None
        after, count = replace_text(text, old_text, new_text, say, bool(input.get("replace_all")))
        return text, after, count


def replace_text(text: str, old: str, new: str, say: str, replace_all: bool) -> tuple[str, int]:
    """`text` with `old` replaced by `new` (once, or everywhere), and the count; see above."""
    count = text.count(old)
    if count == 0 and "\r\n" in text and "\n" in old and "\r" not in old:
        crlf_old = old.replace("\n", "\r\n")
        crlf_count = text.count(crlf_old)
        if crlf_count:
            old, count = crlf_old, crlf_count
            new = new.replace("\r\n", "\n").replace("\n", "\r\n")
    if count == 0:
        raise ToolInputError(
            f"old_text was not found in {say}; it must match exactly, whitespace included"
        )
    if count > 1 and not replace_all:
        raise ToolInputError(
            f"old_text occurs {count} times in {say}; include more surrounding text to make it"
            " unique, or set replace_all"
        )
    return text.replace(old, new) if replace_all else text.replace(old, new, 1), count


def atomic_write(dir_fd: int, name: str, data: bytes, *, mode: int | None, say: str) -> None:
    """Replace `name` in `dir_fd` with `data`: the old file or the new one, never half."""
    temp = f".ruizn-write-{secrets.token_hex(6)}.tmp"
    # O_EXCL|O_NOFOLLOW: the temp name is ours, never something that was already there.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(temp, flags, 0o666 if mode is None else 0o600, dir_fd=dir_fd)
    except OSError as exc:
        raise _named(exc, say) from None
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if mode is not None:
                os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        # The rename may have happened, or the folder may be gone.
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        if isinstance(exc, OSError):
            raise _named(exc, say) from None
        raise
    # The rename is durable only once the folder's entry is on disk.
    os.fsync(dir_fd)


def _named(exc: OSError, say: str) -> OSError:
    """The OS's error, naming the path as the model gave it (never the temp or absolute one)."""
    if exc.errno == errno.EISDIR:
        return IsADirectoryError(exc.errno, "is a directory", say)
    return type(exc)(exc.errno, exc.strerror, say)


def _diff(say: str, old: bytes | None, new: bytes) -> str:
    """A unified diff of the change, for a human at an approval prompt; summarised if huge."""
    if (old is not None and len(old) > _MAX_DIFF_INPUT) or len(new) > _MAX_DIFF_INPUT:
        was = "a new file" if old is None else f"{len(old):,}+ bytes"
        return f"{say}: {was} -> {len(new):,} bytes (too large to show as a diff)"
    if old is not None and (b"\0" in old[:_BINARY_PROBE] or not _is_utf8(old)):
        return (
            f"{say}: replaces a binary or non-UTF-8 file ({len(old):,} bytes)"
            f" with {len(new):,} bytes of text"
        )
    before = [] if old is None else _lines(old.decode("utf-8"))
    lines = list(
        difflib.unified_diff(
            before,
            _lines(new.decode("utf-8")),
            fromfile="/dev/null" if old is None else f"a/{say}",
            tofile=f"b/{say}",
        )
    )
    if not lines:
        return f"{say}: no change"
    text = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
        for line in lines[:MAX_DIFF_LINES]
    )
    if len(lines) > MAX_DIFF_LINES:
        text += f"[... {len(lines) - MAX_DIFF_LINES} more diff lines]\n"
    return text


def _lines(text: str) -> list[str]:
    """Lines split on \n only, each keeping its end (splitlines would split on \f too)."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
