"""The path jail every file tool goes through: resolve and open in one step. (The shell's
sandbox, bubblewrap, is effects/tools/bwrap.py.)

A path from the model is walked one component at a time, each opened relative to the
descriptor of the directory before it, with `O_NOFOLLOW`, starting at a descriptor of the
workspace held for the jail's life. No component is ever looked up by a full path, so a
directory swapped for a symlink between a check and an open cannot lead outside: what was
checked is what is read. (The walk is the only resolver: `openat2(RESOLVE_BENEATH)` would
save a few syscalls, but it refuses absolute symlinks that stay inside, and the log-folder
and secret-file checks need the resolved names anyway, so it could never be the last word.)

Choices:
- Symlinks are followed by hand (`readlink` relative to the directory descriptor), at most
  `MAX_SYMLINK_HOPS` of them, and only while the walk stays inside. An absolute target is
  accepted when it names a place under the workspace's real path.
- `..` is allowed while it stays inside and is resolved physically, as the kernel does: the
  parent of the directory actually reached, not of the name as written. A `..` above the
  workspace root is refused.
- Length and depth are checked before any resolution (`MAX_PATH_BYTES`, `MAX_PARTS`,
  `MAX_NAME_BYTES`), so a 1 MB path costs nothing.
- Excluded folders (by default `.ruizn` at the root, plus any log dir inside the workspace)
  are refused at whatever step the walk would enter them, through symlinks too.
- `ruizn.secretfiles.SECRET_FILE_PATTERNS` are refused unless `allow_secret_files=True`.

Errors are the exceptions `invoke_tool` maps: `PermissionError` (permission_error),
`FileNotFoundError` (not_found), `ToolInputError` (invalid_input). Their texts name the path as
the model gave it, never the absolute one.
"""

from __future__ import annotations

import errno
import os
import stat
import time
import weakref
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from attrs import frozen

from ruizn.effects.tools.base import ToolInputError
from ruizn.secretfiles import is_secret_name

MAX_PATH_BYTES = 4096
MAX_PARTS = 256
MAX_NAME_BYTES = 255
MAX_SYMLINK_HOPS = 40
# A path plus every symlink target it expands into: bounds the walk's work in all cases.
_MAX_STEPS = 4 * MAX_PARTS

DEFAULT_EXCLUDED = (".ruizn",)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
# O_NONBLOCK: a FIFO swapped in after the check cannot block the open; O_NOCTTY: a tty
# swapped in cannot become our controlling terminal.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


def shown(given: str) -> str:
    """The path for an error message: one line, so a newline in a name is escaped."""
    return given if given.isprintable() else repr(given)


@frozen(kw_only=True)
class Entry:
    """The last step of a resolved path: its directory (an fd the caller owns) and its name.

    `info` is the lstat of the name (never a symlink: those were followed), or None when
    nothing is there yet. `rel` is the resolved path relative to the workspace root.
    """

    dir_fd: int
    name: str
    info: os.stat_result | None
    rel: tuple[str, ...]


class Budget:
    """A walk's work cap and deadline, so an abandoned walk stops on its own soon after."""

    def __init__(self, *, seconds: float, max_steps: int) -> None:
        self.deadline = time.monotonic() + seconds
        self.max_steps = max_steps
        self.steps = 0
        self.exhausted = False

    def tick(self, n: int = 1) -> bool:
        """Count `n` units of work; False once the cap or the deadline is reached."""
        self.steps += n
        if self.steps > self.max_steps or time.monotonic() > self.deadline:
            self.exhausted = True
        return not self.exhausted


class PathJail:
    """The workspace, held as a directory descriptor; every file tool resolves through it.

    Thread-safe: the only shared state is the root descriptor, which is never moved. It is
    closed when the jail is garbage-collected or by `close()`; close it only once no tool
    thread can still use it (a reused fd number would otherwise point a walk elsewhere).

    `exclude`: folders the tools may never see, besides `.ruizn` at the root. A relative one
    is taken relative to the workspace (pass the CLI's `--log-dir` absolute); one outside the
    workspace, or the workspace itself, needs no exclusion and is ignored. Matching is by the
    real path at construction, so a folder that does not exist yet is excluded too.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        exclude: Iterable[str | os.PathLike[str]] = (),
        allow_secret_files: bool = False,
    ) -> None:
        self.root = Path(os.path.realpath(root))
        self.allow_secret_files = allow_secret_files
        self._root_fd = os.open(self.root, _DIR_FLAGS)
        self._finalizer = weakref.finalize(self, os.close, self._root_fd)
        excluded: set[tuple[str, ...]] = {(name,) for name in DEFAULT_EXCLUDED}
        for path in exclude:
            real = Path(os.path.realpath(os.path.join(self.root, path)))
            if real.is_relative_to(self.root) and real != self.root:
                excluded.add(real.relative_to(self.root).parts)
        self.excluded: frozenset[tuple[str, ...]] = frozenset(excluded)

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> PathJail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what may be touched -------------------------------------------------------------------

    def is_excluded(self, rel: tuple[str, ...]) -> bool:
        """True when `rel` is an excluded folder or lies inside one."""
        return any(rel[: len(ex)] == ex for ex in self.excluded)

    def is_secret(self, name: str) -> bool:
        if self.allow_secret_files:
            return False
        return is_secret_name(name)

    def dup_root(self) -> int:
        return os.dup(self._root_fd)

    # --- resolving -----------------------------------------------------------------------------

    def split(self, given: object) -> list[str]:
        """Check a path before any resolution and split it; cheap for any input."""
        if not isinstance(given, str):
            raise ToolInputError(f"path must be a string, not {type(given).__name__}")
        if not given:
            raise ToolInputError("path must not be empty")
        if len(given) > MAX_PATH_BYTES:  # chars <= bytes: refuse a huge path before encoding
            raise ToolInputError(f"path is too long (the limit is {MAX_PATH_BYTES} bytes)")
        if "\0" in given:
            raise ToolInputError("path must not contain a NUL byte")
        try:
            size = len(given.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate, which JSON can carry ("\ud800")
            raise ToolInputError("path is not valid Unicode text") from None
        if size > MAX_PATH_BYTES:
            raise ToolInputError(f"path is too long (the limit is {MAX_PATH_BYTES} bytes)")
        if given.startswith("/"):
            raise PermissionError(
                "absolute paths are not allowed; give a path relative to the workspace"
            )
        parts = [part for part in given.split("/") if part not in ("", ".")]
        if len(parts) > MAX_PARTS:
            raise ToolInputError(f"path is too deep (the limit is {MAX_PARTS} parts)")
        if any(len(part.encode("utf-8")) > MAX_NAME_BYTES for part in parts):
            raise ToolInputError(f"path is too long: a name in it is over {MAX_NAME_BYTES} bytes")
        # As written, before any lookup: a path that climbs above the root is refused even
        # where its names do not exist (the walk refuses the physical escapes).
        depth = 0
        for part in parts:
            depth += -1 if part == ".." else 1
            if depth < 0:
                raise PermissionError(_escape_text(shown(given), via_link=False))
        return parts

    def resolve_dir(self, given: str) -> tuple[int, tuple[str, ...]]:
        """Open the directory `given` names; return its fd (the caller closes it) and rel path."""
        say = shown(given)
        parts = self.split(given)
        entry = self._walk(parts, say, want="dir")
        return entry.dir_fd, entry.rel

    def resolve_any(self, given: str) -> Entry:
        """Like `resolve_entry`, but a directory is opened: then `name` is "" and `dir_fd`
        is the directory itself."""
        say = shown(given)
        parts = self.split(given)
        entry = self._walk(parts, say, want="any")
        if entry.info is not None and parts and self.is_secret(parts[-1]):
            os.close(entry.dir_fd)
            raise PermissionError(_secret_text(say))
        return entry

    def resolve_entry(
        self, given: str, *, missing_ok: bool = False, create_dirs: bool = False
    ) -> Entry:
        """Resolve `given` to its directory and final name, following symlinks inside.

        With `missing_ok` the final name may be missing (`info` None); with `create_dirs`,
        missing directories on the way are made (for writing).
        """
        say = shown(given)
        parts = self.split(given)
        if not parts:
            raise ToolInputError(f"{say} is a directory (the workspace itself), not a file")
        if self.is_secret(parts[-1]):
            raise PermissionError(_secret_text(say))
        entry = self._walk(parts, say, missing_ok=missing_ok, create_dirs=create_dirs)
        if self.is_secret(entry.name):
            os.close(entry.dir_fd)
            raise PermissionError(_secret_text(say))
        return entry

    def open_file(self, given: str) -> tuple[int, os.stat_result]:
        """Open a regular file for reading; return its fd (the caller closes it) and fstat."""
        say = shown(given)
        entry = self.resolve_entry(given)
        try:
            if entry.info is None:
                raise FileNotFoundError(errno.ENOENT, "no such file", say)
            refuse_non_regular(entry.info, say)
            return open_child_file(entry.dir_fd, entry.name, entry.info, say)
        finally:
            os.close(entry.dir_fd)

    def read_bytes(self, given: str, limit: int) -> tuple[bytes, int]:
        """At most `limit` bytes of a regular file, and the file's size."""
        fd, info = self.open_file(given)
        try:
            return read_capped(fd, limit), info.st_size
        finally:
            os.close(fd)

    def _walk(
        self,
        given: list[str],
        say: str,
        *,
        want: Literal["entry", "dir", "any"] = "entry",
        missing_ok: bool = False,
        create_dirs: bool = False,
    ) -> Entry:
        # (name, came_from_a_symlink): the wording of a refusal depends on it.
        parts: deque[tuple[str, bool]] = deque((part, False) for part in given)
        stack: list[int] = []  # fds of the directories entered, below the root
        names: list[str] = []
        hops = steps = 0

        def here() -> int:
            return stack[-1] if stack else self._root_fd

        def unwind() -> None:
            while stack:
                os.close(stack.pop())
            names.clear()

        try:
            while parts:
                steps += 1
                if steps > _MAX_STEPS:
                    raise ToolInputError(f"{say}: too many steps to resolve (symlinks?)")
                name, via_link = parts.popleft()
                if name in ("", "."):
                    continue
                if name == "..":
                    if not stack:
                        raise PermissionError(_escape_text(say, via_link))
                    os.close(stack.pop())
                    names.pop()
                    continue
                rel = (*names, name)
                if self.is_excluded(rel):
                    raise PermissionError(f"{say}: ruizn's log folder is off limits to tools")
                last = not parts
                try:
                    info: os.stat_result | None = os.stat(
                        name, dir_fd=here(), follow_symlinks=False
                    )
                except FileNotFoundError:
                    info = None
                except OSError as exc:
                    raise _os_error(exc, say) from None
                if info is None:
                    if last and missing_ok and want == "entry":
                        return self._entry(stack, names, name, None)
                    if last or not create_dirs:
                        raise FileNotFoundError(errno.ENOENT, "no such file", say)
                    try:
                        os.mkdir(name, 0o777, dir_fd=here())
                    except FileExistsError:
                        pass  # made meanwhile: the stat below looks at what is there now
                    except OSError as exc:
                        raise _os_error(exc, say) from None
                    parts.appendleft((name, via_link))
                    continue
                if stat.S_ISLNK(info.st_mode):
                    hops += 1
                    if hops > MAX_SYMLINK_HOPS:
                        raise ToolInputError(f"{say}: symlink loop")
                    try:
                        target = os.readlink(name, dir_fd=here())
                    except OSError as exc:  # EINVAL: no longer a symlink. Refuse, never guess
                        raise PermissionError(f"{say} changed while being resolved") from exc
                    if target.startswith("/"):
                        inside = self._inside(target)
                        if inside is None:
                            raise PermissionError(f"{say} resolves outside the workspace")
                        unwind()
                        parts.extendleft((part, True) for part in reversed(inside))
                    else:
                        # Without "" and ".", so the name before them is still seen as last.
                        named = [part for part in target.split("/") if part not in ("", ".")]
                        parts.extendleft((part, True) for part in reversed(named))
                    continue
                if stat.S_ISDIR(info.st_mode) and (not last or want != "entry"):
                    stack.append(open_child_dir(here(), name, info, say))
                    names.append(name)
                    continue
                if not last:  # a file used as a directory
                    raise FileNotFoundError(errno.ENOENT, "no such file", say)
                if want == "dir":
                    raise ToolInputError(f"{say} is not a directory")
                if self.is_secret(name) and want == "any":
                    raise PermissionError(_secret_text(say))
                return self._entry(stack, names, name, info)
            if want == "entry":  # the last name was `..` or a symlink to a directory
                raise ToolInputError(f"{say} is a directory, not a file")
            fd = stack.pop() if stack else self.dup_root()
            return Entry(dir_fd=fd, name="", info=None, rel=tuple(names))
        finally:
            unwind()

    def _entry(
        self, stack: list[int], names: list[str], name: str, info: os.stat_result | None
    ) -> Entry:
        # The parent's fd leaves the stack, so the walk's unwind does not close it.
        rel = (*names, name)
        fd = stack.pop() if stack else self.dup_root()
        return Entry(dir_fd=fd, name=name, info=info, rel=rel)

    def _inside(self, target: str) -> list[str] | None:
        """An absolute symlink target as parts under the root, or None if it is outside."""
        parts = [part for part in target.split("/") if part not in ("", ".")]
        root = self.root.parts[1:]
        if tuple(parts[: len(root)]) != root:
            return None
        return parts[len(root) :]

    # --- walking a tree (list_dir, glob, grep) -------------------------------------------------

    def children(
        self, dir_fd: int, rel: tuple[str, ...], budget: Budget
    ) -> Iterator[tuple[str, os.stat_result]]:
        """The entries of a directory, sorted by name, excluded folders left out (lstat info)."""
        with os.scandir(dir_fd) as entries:
            names = []
            for entry in entries:
                if not budget.tick():
                    break
                names.append(entry.name)
        for name in sorted(names):
            if self.is_excluded((*rel, name)):
                continue
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:  # gone meanwhile
                continue
            yield name, info


def open_child_dir(parent: int, name: str, info: os.stat_result, say: str) -> int:
    """Open the directory `name` in `parent`, refusing whatever is not the one checked."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a symlink or a file
            raise PermissionError(f"{say} changed while being resolved; not followed") from None
        raise _os_error(exc, say) from None
    if not _same(os.fstat(fd), info):
        os.close(fd)
        raise PermissionError(f"{say} changed while being resolved; not followed")
    return fd


def open_child_file(
    parent: int, name: str, info: os.stat_result, say: str
) -> tuple[int, os.stat_result]:
    """Open the regular file `name` in `parent` for reading, if it is still the one checked."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PermissionError(f"{say} became a symlink; not followed") from None
        raise _os_error(exc, say) from None
    opened = os.fstat(fd)
    if not stat.S_ISREG(opened.st_mode) or not _same(opened, info):
        os.close(fd)
        raise PermissionError(f"{say} changed while being opened; not read")
    return fd, opened


def refuse_non_regular(info: os.stat_result, say: str) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise ToolInputError(f"{say} is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise ToolInputError(f"{say} is not a regular file (a pipe, socket or device)")


def read_capped(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < limit:
        chunk = os.read(fd, min(limit - got, 65536))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _os_error(exc: OSError, say: str) -> OSError | ToolInputError:
    """The OS's refusal, naming the path as the model gave it, never the absolute one."""
    if exc.errno == errno.ENOENT:
        return FileNotFoundError(errno.ENOENT, "no such file", say)
    if exc.errno == errno.ENAMETOOLONG:
        return ToolInputError("path is too long")
    if exc.errno == errno.ELOOP:
        return ToolInputError(f"{say}: symlink loop")
    return type(exc)(exc.errno, exc.strerror, say)


def _escape_text(say: str, via_link: bool) -> str:
    if via_link:
        return f"{say} resolves outside the workspace"
    return f"{say}: '..' is not allowed in a path where it leads outside the workspace"


def _secret_text(say: str) -> str:
    return (
        f"{say} looks like a secret (credentials, keys, .env) and is off limits to tools;"
        " the user can allow it with --allow-secret-files"
    )


def workspace_jail(workspace: Path, log_root: Path, *, allow_secret_files: bool) -> PathJail:
    """The path jail of a run: the workspace, with the run logs' folder hidden from the model
    (it holds full tool results and secrets of past runs)."""
    return PathJail(workspace, exclude=[log_root.resolve()], allow_secret_files=allow_secret_files)
