"""The event writer: one JSON line per event, written and flushed at once, one writer per run.

- Each event is one write(2) of a whole line to a file opened unbuffered in append mode
  (read-write, so a lost log can be copied back out of its descriptor), so
  a reader never sees half a line unless the process died inside that write. A process
  that dies (kill -9, a crash) loses nothing it wrote.
- What a power cut keeps (fdatasync). At once, before the writer returns: run_started,
  run_finished, a person's decision, and everything so far when the runner calls `sync()`,
  which it does before any tool that is not read-only runs. Behind the loop (`_Syncer`):
  everything before each llm_call_started, so the previous step reaches the disk while the
  request is in flight; an llm_response is written only once that is done. So a power cut
  loses at most the last step whose response was kept (its read-only tools run again on
  resume, or the model is asked again) and the call in flight; never an earlier step, a
  decision, or the start of a tool that changes things (resume answers it `interrupted`).
- One writer per run: the writer holds an exclusive `flock` on the run folder's `lock`
  file for as long as it writes. The kernel drops it when the process dies, so kill -9
  never leaves a stale lock. A second writer gets `RunLocked`, naming the holder's pid.
- A new run's folder appears with its first line already in it: the folder is built under
  a hidden temporary name and renamed into place, so a signal or a full disk at start leaves
  either no run or a readable one.
- At each step end the writer checks that its path still names the file it holds open. If
  the log was deleted or replaced, it raises `LogLost` and, on close, copies everything it
  wrote to `events.recovered.jsonl` beside it (a new file renamed into place: whatever
  held that name, a planted link included, is replaced, never written through).
- A run folder is hostile input (`effects/runlog/folder.py`): the folder, its `lock` and its
  log are opened without following a link, must be regular files, and, since they are
  written, have no other name (one hard link); the lock is truncated only once it is known
  to be the run's own lock file. A folder that fails is refused (`LogWriteError`, naming the
  file and why) before a byte is read or written. No line longer than `MAX_LINE_BYTES` is
  ever written: the reader would refuse the log.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

from ruizn.effects.runlog.folder import RunFolder, UnsafeRunFile, make_root
from ruizn.effects.runlog.reader import MAX_LINE_BYTES
from ruizn.effects.runlog.sink import LogLost, LogWriteError
from ruizn.events import (
    Event,
    LlmCallStarted,
    LlmResponse,
    RunFinished,
    RunStarted,
    ToolApprovalDecided,
    ToolApprovalRequested,
)
from ruizn.serde import encode

LOCK_NAME = "lock"
RECOVERY_NAME = "events.recovered.jsonl"
# Makes what was written to a file descriptor durable (os.fdatasync, or a test's recorder).
DataSync = Callable[[int], None]
# A reader probing the lock holds it shared for microseconds; a writer that meets such a
# probe tries again for this long before it calls the run busy.
_LOCK_PATIENCE = 0.5


class RunLocked(Exception):
    """Another process is writing this run."""

    def __init__(self, run: str, pid: int | None) -> None:
        holder = f"process {pid}" if pid else "another process"
        super().__init__(f"run {run} is being written by {holder}; wait for it to end")
        self.run = run
        self.pid = pid


def _describe(exc: OSError, path: Path) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    reason = exc.strerror or str(exc)
    return f"cannot write the event log {path}: {reason}" + (f" ({name})" if name else "")


def _acquire(folder: RunFolder, run: str) -> int:
    fd = folder.open_file(LOCK_NAME, os.O_RDWR | os.O_CREAT, write=True)
    deadline = time.monotonic() + _LOCK_PATIENCE
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.01)
                continue
            pid = _pid_in(fd)
            os.close(fd)
            raise RunLocked(run, pid) from None
    # Ours now: a regular file of this run folder, with no other name, and locked by us.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _pid_in(fd: int) -> int | None:
    """The pid a lock file names (meaningful only while the lock is held)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def probe_lock(folder: RunFolder) -> tuple[bool, int | None]:
    """(live, pid): whether a writer holds the run's lock, and the pid it wrote. Raises
    `UnsafeRunFile` for a lock that is not a regular file."""
    try:
        fd = folder.open_file(LOCK_NAME, os.O_RDONLY, write=False)
    except FileNotFoundError:
        return False, None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True, _pid_in(fd)
    finally:
        os.close(fd)  # closing drops the shared lock we may have taken
    return False, None


def truncate_log(path: Path, offset: int) -> None:
    """Cut a log to `offset` bytes (resume drops a torn last line), opened as a file ruizn
    writes: never through a link, never a file with another name. Raises `LogWriteError`."""
    try:
        with RunFolder.open(path.parent) as folder:
            fd = folder.open_file(path.name, os.O_WRONLY, write=True)
        try:
            os.ftruncate(fd, offset)
        finally:
            os.close(fd)
    except OSError as exc:
        raise LogWriteError(_why(exc, path)) from None


class EventWriter:
    """The file sink. `EventWriter.new(path)` for a run that starts now; `EventWriter.append`
    for a run that goes on (it takes the lock first, so nobody writes while resume reads)."""

    def __init__(
        self,
        path: Path,
        *,
        fsync: bool = True,
        datasync: DataSync | None = None,
        _new: bool = False,
    ) -> None:
        """`fsync=False` writes and flushes every line but never fsyncs; `datasync` is how a
        line is made durable (default `os.fdatasync`; a test passes one that records what a
        power cut would keep)."""
        self.path = path
        self._fsync = fsync
        self._datasync = datasync if datasync is not None else _datasync
        self._new = _new
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._lost = False
        self._syncer: _Syncer | None = None
        self.recovered: Path | None = None
        if not _new:
            self._open_existing()

    @classmethod
    def new(
        cls, path: Path, *, fsync: bool = True, datasync: DataSync | None = None
    ) -> EventWriter:
        """Nothing touches the disk until the first event, which creates the run folder."""
        return cls(path, fsync=fsync, datasync=datasync, _new=True)

    @classmethod
    def append(
        cls, path: Path, *, fsync: bool = True, datasync: DataSync | None = None
    ) -> EventWriter:
        return cls(path, fsync=fsync, datasync=datasync)

    def _open_existing(self) -> None:
        try:
            with RunFolder.open(self.path.parent) as folder:
                self._lock_fd = _acquire(folder, folder.path.name)
                self._fd = folder.open_file(self.path.name, os.O_RDWR | os.O_APPEND, write=True)
        except OSError as exc:
            self.close()
            raise LogWriteError(_why(exc, self.path)) from None
        self._identity = _identity(os.fstat(self._fd))

    def _create(self, first_line: bytes) -> None:
        """Build the run folder under a hidden name beside it, then rename it into place,
        every step relative to descriptors of the folders it works in."""
        folder = self.path.parent
        staging = f".{folder.name}.tmp"
        root: int | None = None
        built: RunFolder | None = None
        try:
            make_root(folder.parent)
            root = os.open(folder.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            os.mkdir(staging, 0o755, dir_fd=root)
            built = RunFolder.open(folder.with_name(staging), within=root)
            self._lock_fd = _acquire(built, folder.name)
            flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL
            fd = self._fd = built.open_file(self.path.name, flags, write=True)
            _write_all(fd, first_line)
            if self._fsync:
                self._datasync(fd)
            os.rename(staging, folder.name, src_dir_fd=root, dst_dir_fd=root)
            built.close()
            if self._fsync:
                os.fsync(root)
        except OSError as exc:
            self.close()
            if built is not None and built.fd is not None:  # not renamed: leave nothing
                for name in (self.path.name, LOCK_NAME):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=built.fd)
                built.close()
                with contextlib.suppress(OSError):
                    os.rmdir(staging, dir_fd=root)
            raise LogWriteError(_why(exc, self.path)) from None
        finally:
            if root is not None:
                os.close(root)
        self._identity = _identity(os.fstat(fd))
        self._new = False

    def __call__(self, event: Event) -> None:
        self._write(event, (encode(event) + "\n").encode())

    def _write(self, event: Event, data: bytes) -> None:
        """Write `event`, already encoded as its line `data` (a subclass that needs the line
        for itself too encodes it once)."""
        if len(data) > MAX_LINE_BYTES:
            raise LogWriteError(
                f"event {event.seq} ({event.TAG}) is {len(data) >> 20} MiB as a log line, over"
                f" the {MAX_LINE_BYTES >> 20} MiB a line may hold; it was not written"
            )
        if self._new:
            self._create(data)
            return
        if self._fd is None:
            raise LogWriteError(f"the event log {self.path} is closed")
        kind = type(event)
        try:
            if kind is LlmResponse and self._syncer is not None:
                # The previous step's lines are on disk before this step's response is kept.
                self._syncer.wait()
            _write_all(self._fd, data)
            if self._fsync and kind in _SYNC_POINTS:
                self._sync(wait=kind in _SYNC_NOW)
        except OSError as exc:
            raise LogWriteError(_describe(exc, self.path)) from None
        if kind in _STEP_ENDS and not self._lost and not self._still_ours():
            self._lost = True
            raise LogLost(
                f"the event log {self.path} was deleted or replaced while the run wrote it;"
                f" its events are saved in {self.path.with_name(RECOVERY_NAME)}",
                recovery=str(self.path.with_name(RECOVERY_NAME)),
            )

    def sync(self) -> None:
        """Return once every line written so far is on disk (the runner calls this before a
        tool that is not read-only runs: its tool_call_started must survive a power cut, or
        a resume would run it again)."""
        if self._fd is None or not self._fsync:
            return
        try:
            self._sync(wait=True)
        except OSError as exc:
            raise LogWriteError(_describe(exc, self.path)) from None

    def _sync(self, *, wait: bool) -> None:
        """fsync the log: at once for the first and last lines, behind the loop otherwise
        (the next request goes out while the disk catches up; see `_Syncer`)."""
        assert self._fd is not None
        if self._syncer is None:
            self._syncer = _Syncer(self._fd, self._datasync)
        self._syncer.request()
        if wait:
            self._syncer.wait()

    def _still_ours(self) -> bool:
        try:
            return _identity(os.stat(self.path, follow_symlinks=False)) == self._identity
        except OSError:
            return False

    def close(self) -> None:
        if self._syncer is not None:
            syncer, self._syncer = self._syncer, None
            with contextlib.suppress(OSError):
                syncer.wait()
            syncer.stop()
        if self._fd is not None:
            fd, self._fd = self._fd, None
            if self._lost:
                self._recover(fd)
            os.close(fd)
        if self._lock_fd is not None:
            lock, self._lock_fd = self._lock_fd, None
            os.close(lock)  # releases the flock

    def _recover(self, fd: int) -> None:
        """Copy what the open (but no longer linked) log holds to a file beside its path."""
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with RunFolder.open(self.path.parent) as folder:
                folder.replace_file(RECOVERY_NAME, _chunks(fd))
            self.recovered = self.path.with_name(RECOVERY_NAME)

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# Where the writer checks that its path still names its file: once a step (a turn of a
# thousand tool calls must not pay a stat per call), and at the end of each session.
_STEP_ENDS = (LlmResponse, RunFinished)
# Lines fsynced before the writer returns: a run's first line, each session's last, and a
# person's decision (it must never have to be asked for twice).
_SYNC_NOW = frozenset({RunStarted, RunFinished, ToolApprovalDecided})
# Lines after which an fsync starts behind the loop: a model call's start (everything
# before it, the previous step's response and tool results, goes to disk while the request
# is in flight) and an approval request (a run may wait long at the prompt).
_SYNC_POINTS = _SYNC_NOW | {LlmCallStarted, ToolApprovalRequested}


class _Syncer:
    """fsync in a thread of its own, coalesced: many requests while one fsync runs cost one
    more. `wait()` returns once every line written before the last `request()` is on disk.

    This takes the fsync off the loop's critical path (it overlaps the next request), and the
    writer still waits for it before the next step's response is kept.
    """

    def __init__(self, fd: int, datasync: DataSync) -> None:
        self._fd = fd
        self._datasync = datasync
        self._cond = threading.Condition()
        self._wanted = 0
        self._done = 0
        self._error: OSError | None = None
        self._stopped = False
        threading.Thread(target=self._run, name="ruizn-fsync", daemon=True).start()

    def request(self) -> None:
        with self._cond:
            self._wanted += 1
            self._cond.notify_all()

    def wait(self) -> None:
        with self._cond:
            target = self._wanted
            while self._done < target and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise self._error

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._done == self._wanted and not self._stopped:
                    self._cond.wait()
                if self._stopped and self._done == self._wanted:
                    return
                target = self._wanted
            try:
                self._datasync(self._fd)
            except OSError as exc:
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                return
            with self._cond:
                self._done = target
                self._cond.notify_all()


# fdatasync: the data and the size an append needs to be read back, not the times (a
# fifth cheaper on ext4 here). Where there is none (macOS), fsync.
_datasync = getattr(os, "fdatasync", os.fsync)


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


def _why(exc: OSError, path: Path) -> str:
    return str(exc) if isinstance(exc, UnsafeRunFile) else _describe(exc, path)


def _chunks(fd: int) -> Iterator[bytes]:
    size, offset = os.fstat(fd).st_size, 0
    while offset < size:
        chunk = os.pread(fd, min(1 << 20, size - offset), offset)
        if not chunk:
            return
        yield chunk
        offset += len(chunk)


def _write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)
    while written < len(data):  # short writes are rare (full disk, signals) but legal
        written += os.write(fd, data[written:])
