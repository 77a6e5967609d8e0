"""A stdio server's stderr: a pipe drained into a capped file (head and tail kept)."""

from __future__ import annotations

import contextlib
import math
import os
import stat
import time
from pathlib import Path
from typing import IO

import anyio
import anyio.abc

from ruizn.effects.mcp.text import (
    describe,
)
from ruizn.effects.runlog.folder import make_root

# What each start of the servers may add to a server's stderr file: its first and last
# STDERR_KEEP bytes, and one line between them saying how many were dropped.
STDERR_KEEP = 512 * 1024


# The tail of that file lives in memory and is written out at most this often (and at the end).
_STDERR_FLUSH_SECONDS = 1.0


# How much of a connection's latest stderr is kept to quote its last line.
_RECENT_STDERR = 4096


def open_stderr_file(folder: Path, name: str) -> int:
    """An fd for appending to `folder/name`, opened like hostile input: neither the folder
    nor the one that holds it may be a link (a planted `.mcp` or run folder would send the
    file elsewhere), and nothing is created through one; the file may not be a link
    (O_NOFOLLOW) and must be a regular file (a FIFO would hang, a device eat or spew), and
    no open blocks (O_NONBLOCK)."""
    make_root(folder.parent.parent)
    here = os.open(folder.parent.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for step in (folder.parent, folder):
            with contextlib.suppress(FileExistsError):
                os.mkdir(step.name, 0o700, dir_fd=here)
            try:
                inner = os.open(step.name, _NO_LINK_FOLDER, dir_fd=here)
            except OSError as exc:
                raise _not_a(exc, step, "folder") from None
            os.close(here)
            here = inner
        path = folder / name
        try:
            fd = os.open(name, _NO_LINK_FILE, 0o600, dir_fd=here)
        except OSError as exc:
            raise _not_a(exc, path, "file") from None
    finally:
        os.close(here)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _StderrFileRefused(f"{path} is not a regular file")
    os.set_blocking(fd, True)
    return fd


_NO_LINK_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


_NO_LINK_FILE = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _StderrFileRefused(OSError):
    """A stderr file or folder that ruizn will not write through; the message says why."""


def _not_a(exc: OSError, path: Path, what: str) -> OSError:
    """`exc` in words when a link or another kind of file stood at `path` (O_NOFOLLOW says
    ELOOP or ENOTDIR); else `exc` itself."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return exc
    if stat.S_ISLNK(mode):
        return _StderrFileRefused(f"{path} is a symbolic link, not a {what}")
    if what == "folder" and not stat.S_ISDIR(mode):
        return _StderrFileRefused(f"{path} is not a folder")
    return exc


def open_problem(exc: OSError) -> str:
    return str(exc) if isinstance(exc, _StderrFileRefused) else describe(exc)


class StderrFile:
    """A server's stderr file, capped. What one start of the servers adds to it keeps the
    first `keep` bytes the server wrote (up to its last whole line) and the last `keep` bytes
    (from a line start), with one line between them, `[ruizn: N bytes of its stderr dropped
    here]`, so N says exactly how much is missing. The tail is held in memory and written out
    at most once a second and when the file is closed; a kill -9 of ruizn loses at most the
    last second of it. A restarted server appends to the same file. A write that fails (a
    full disk) ends the file's writing, never the server's connection."""

    def __init__(self, fd: int, *, keep: int = STDERR_KEEP) -> None:
        self._fd = fd
        self._start = self._end = os.lseek(fd, 0, os.SEEK_END)
        self._keep = keep
        self._line_end = self._start  # just past the head's last newline
        self._cut: int | None = None  # where the head ends, once it is full
        self._tail = bytearray()
        self._tail_at_line_start = True
        self._written = 0  # what the server wrote to it since it was opened
        self._dirty = False
        self._flushed_at = -math.inf
        self._failed = False

    def write(self, data: bytes) -> None:
        if self._fd < 0 or self._failed:
            return
        try:
            self._write(data)
        except OSError:
            self._failed = True

    def _write(self, data: bytes) -> None:
        self._written += len(data)
        if self._cut is None:
            head = data[: self._start + self._keep - self._end]
            _pwrite_all(self._fd, head, self._end)
            if (newline := head.rfind(b"\n")) >= 0:
                self._line_end = self._end + newline + 1
            self._end += len(head)
            data = data[len(head) :]
            if not data:
                return
            # Full: the head ends with its last whole line; the part line after it is dropped.
            self._cut = self._line_end if self._line_end > self._start else self._end
            self._tail_at_line_start = head.endswith(b"\n") or (not head and self._at_line_end())
        self._tail += data
        if len(self._tail) > self._keep:
            excess = len(self._tail) - self._keep
            self._tail_at_line_start = self._tail[excess - 1] == ord("\n")
            del self._tail[:excess]
        self._dirty = True
        if time.monotonic() - self._flushed_at >= _STDERR_FLUSH_SECONDS:
            self._flush()

    def _at_line_end(self) -> bool:
        return self._end == self._line_end

    def flush(self) -> None:
        """Write the tail out after the head, with the line that counts what is missing."""
        if self._cut is None or not self._dirty or self._fd < 0 or self._failed:
            return
        try:
            self._flush()
        except OSError:
            self._failed = True

    def _flush(self) -> None:
        cut = self._cut
        if cut is None:  # the head is not full: everything is on disk already
            return
        tail = bytes(self._tail)
        if not self._tail_at_line_start:
            tail = tail.partition(b"\n")[2]  # from its first whole line (maybe none)
        dropped = self._written - (cut - self._start) - len(tail)
        gap = b""
        if dropped:
            newline = b"" if cut == self._line_end else b"\n"
            gap = newline + f"[ruizn: {dropped} bytes of its stderr dropped here]\n".encode()
        os.ftruncate(self._fd, cut)
        _pwrite_all(self._fd, gap + tail, cut)
        self._dirty = False
        self._flushed_at = time.monotonic()

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            self.flush()
        finally:
            os.close(self._fd)
            self._fd = -1


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


class StderrPipe:
    """One server process's stderr: a pipe ruizn reads, rather than a file the server writes
    itself, so ruizn can cap the file and quote the server's last line. `child_end` is what
    the server is started with; ruizn closes its own copy once the server is running."""

    def __init__(self, sink: StderrFile) -> None:
        read, write = os.pipe()  # close-on-exec: the server gets only the end given to it
        os.set_blocking(read, False)
        self._read = read
        self.child_end: IO[str] | None = os.fdopen(write, "w")
        self._sink = sink
        self._recent = bytearray()
        self._recent_whole = True  # `_recent` starts at a line start
        self._eof = False

    def spawned(self) -> None:
        """The server has its copy of the write end (or failed to start): close ours, so the
        pipe ends when the server and whatever it started close theirs."""
        if self.child_end is not None:
            self.child_end.close()
            self.child_end = None

    async def pump(self) -> None:
        while not self._eof:
            await anyio.wait_readable(self._read)
            self.drain()

    def drain(self) -> None:
        """Copy what is in the pipe now to the file, without waiting for more."""
        while not self._eof and self._read >= 0:
            try:
                chunk = os.read(self._read, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self._eof = True
                return
            self._sink.write(chunk)
            self._recent += chunk
            if len(self._recent) > _RECENT_STDERR:
                excess = len(self._recent) - _RECENT_STDERR
                self._recent_whole = self._recent[excess - 1] == ord("\n")
                del self._recent[:excess]

    def last_line(self) -> str:
        """The last non-blank line written so far; never a line cut at its start (it could
        begin with the end of a secret, which no redactor would recognise)."""
        self.drain()
        data = bytes(self._recent)
        if not self._recent_whole:
            data = data.partition(b"\n")[2]
        lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines()]
        return next((line for line in reversed(lines) if line), "")

    def close(self) -> None:
        self.spawned()
        self.drain()
        if self._read >= 0:
            os.close(self._read)
            self._read = -1
        self._sink.flush()
