"""Run folders, opened like hostile input.

A `.ruizn/runs/RUN/` folder may have arrived with a cloned repository, a tarball or a shared
drive, so anything in it may be planted: a `lock` that is a symbolic link to a file of the
user's (taking the lock would truncate it), an `events.jsonl` that is a FIFO (opening it
would hang every listing), a hard link to a file elsewhere. Every file ruizn opens in a run
folder is opened here, one way:

- the folder itself with O_DIRECTORY|O_NOFOLLOW, and each file by name relative to that
  descriptor (openat), so neither the folder nor a file in it is followed through a link,
  and a folder renamed or swapped after it was opened cannot redirect a file;
- each file with O_NOFOLLOW|O_NONBLOCK|O_NOCTTY, after an lstat that refuses anything but a
  regular file without opening it, so a FIFO or a device is never waited on or woken;
- then fstat of what was opened (the lstat and the open are two moments): anything but a
  regular file is refused before a byte is read or written, and a file ruizn writes must
  have no other name (st_nlink == 1), so no write reaches a file elsewhere through a hard
  link. Reading a hard-linked file is allowed: it cannot change the file, and a backup made
  with hard links stays readable.

A refusal is an `UnsafeRunFile`: an OSError whose message is one line naming the file and
why. Callers turn it into their own errors (`LogError` on the read side, `LogWriteError`
when writing).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


LINK = "is a symbolic link; ruizn follows no link in a run folder"
FOLDER_LINK = "the run folder is a symbolic link; ruizn follows no link to a run folder"


class UnsafeRunFile(OSError):
    """A run folder, or a file in it, that ruizn will not open, and why."""

    def __init__(self, path: Path, why: str) -> None:
        # EPERM: refused, like a permission; a caller that sorts errors by errno sees bad input.
        super().__init__(errno.EPERM, why, str(path))

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def _problem(mode: int, links: int, *, write: bool) -> str | None:
    if stat.S_ISLNK(mode):
        return LINK
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "a special file")
        return f"is {kind}, not a regular file"
    if write and links != 1:
        return (
            f"has {links} hard links; ruizn writes only a file with no other name"
            " (copy it to write to it)"
        )
    return None


# What ruizn writes into a `.ruizn/` folder it makes (as pytest and mypy do for their
# caches): nothing under it (run logs: file contents, command output) reaches git.
GITIGNORE = b"# Made by ruizn: its run logs stay out of git.\n*\n"


def make_root(root: Path) -> None:
    """Make the folder runs are kept in (`root`, and its parents). A `.ruizn` folder it
    makes gets a `.gitignore` of `*`; one that exists is the person's and is left as it is
    (it may hold a tracked hooks.json or config.toml)."""
    made = next((p for p in (root, *root.parents) if p.name == ".ruizn"), None)
    fresh = made is not None and not os.path.lexists(made)
    root.mkdir(parents=True, exist_ok=True)
    if fresh and made is not None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with contextlib.suppress(OSError):  # a race lost, or a read-only folder: no harm
            fd = os.open(made / ".gitignore", flags, 0o644)
            try:
                os.write(fd, GITIGNORE)
            finally:
                os.close(fd)


class RunFolder:
    """An open run folder: a directory descriptor that its files are opened relative to."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd: int | None = fd

    @classmethod
    def open(cls, path: Path, *, within: int | None = None) -> RunFolder:
        """Open a run folder that must not be a link. Its parents are the user's own path,
        followed as given; `within`: open `path.name` relative to that folder descriptor."""
        where = path.name if within is not None else path
        try:
            return cls(path, os.open(where, _DIR_FLAGS, dir_fd=within))
        except OSError as exc:
            if exc.errno in {errno.ENOTDIR, errno.ELOOP} and _is_link(where, within):
                raise UnsafeRunFile(path, FOLDER_LINK) from None
            raise

    def _fd(self) -> int:
        if self.fd is None:
            raise ValueError(f"the run folder {self.path} is closed")
        return self.fd

    def open_file(self, name: str, flags: int, *, write: bool, mode: int = 0o644) -> int:
        """A descriptor for `name` in this folder, checked as the module says. `write`: it
        will be written, so it must also have no other name."""
        fd = self._fd()
        path = self.path / name
        with contextlib.suppress(FileNotFoundError):  # O_CREAT may make it
            seen = os.stat(name, dir_fd=fd, follow_symlinks=False)
            problem = _problem(seen.st_mode, seen.st_nlink, write=write)
            if problem:
                raise UnsafeRunFile(path, problem)
        try:
            opened = os.open(name, flags | _FILE_FLAGS, mode, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # it became a link since the lstat
                raise UnsafeRunFile(path, LINK) from None
            raise
        try:
            now = os.fstat(opened)
            # Regular files ignore O_NONBLOCK on Linux; cleared so that no system may answer
            # a write with EAGAIN.
            os.set_blocking(opened, True)
        except BaseException:
            os.close(opened)
            raise
        problem = _problem(now.st_mode, now.st_nlink, write=write)
        if problem:
            os.close(opened)
            raise UnsafeRunFile(path, problem)
        return opened

    def exists(self, name: str) -> bool:
        """True if the folder holds an entry by that name, of any kind (never followed)."""
        try:
            os.stat(name, dir_fd=self._fd(), follow_symlinks=False)
        except FileNotFoundError:
            return False
        return True

    def replace_file(self, name: str, chunks: Iterable[bytes]) -> None:
        """Write `name` whole, durably, in place of whatever held that name (a planted link is
        replaced, never written through): a new file under a random name, fsynced, renamed
        over it, and the folder fsynced."""
        fd = self._fd()
        temp = f".{name}.{secrets.token_hex(4)}.tmp"
        out = self.open_file(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, write=True)
        try:
            with os.fdopen(out, "wb", closefd=False) as f:
                for chunk in chunks:
                    f.write(chunk)
            os.fsync(out)
            os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=fd)
            raise
        finally:
            os.close(out)
        os.fsync(fd)

    def fsync(self) -> None:
        os.fsync(self._fd())

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            os.close(fd)

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _is_link(where: str | Path, within: int | None) -> bool:
    try:
        return stat.S_ISLNK(os.stat(where, dir_fd=within, follow_symlinks=False).st_mode)
    except OSError:
        return False
