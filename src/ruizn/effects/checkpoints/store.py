"""A workspace's checkpoints in git's object store, through the `git` binary.

One git object store under the user's state folder (never inside a workspace) holds the
checkpoints of every workspace: `GIT_DIR` is that store, `GIT_WORK_TREE` the workspace, and
each workspace has an index file of its own that persists from one checkpoint to the next,
so a file whose stat data has not changed is not read again. Any checkpoint can be written
to any folder (a fork's, a rerun's scratch copy). A checkpoint is a tree id:
content-addressed, so unchanged files cost nothing. Git's own ignore rules (the
workspace's `.gitignore` files) apply; `.ruizn/` and the secret-file patterns are added
through an exclude file of the store's, and files over a size cap are never hashed. Git
stores no empty folders: a snapshot lists them itself.

The user's and the system's git configuration are not read (a global excludes file, hooks
or filters of theirs change nothing here). A lock file beside a workspace's index serialises
the checkpoints of every run there, held by ruizn and each git it starts (a git that
outlives a killed ruizn holds it until it ends); holding it, a stale `index.lock` (a
checkpoint killed half-way) is removed, so a kill -9 never leaves the store unusable: git
writes each object and the index by rename.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import struct
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from attrs import frozen

from ruizn.events import LeftOut
from ruizn.secretfiles import SECRET_FILE_PATTERNS, is_secret_name

__all__ = [
    "DEFAULT_SIZE_CAP",
    "Change",
    "CheckpointError",
    "GitStore",
    "LeftOut",
    "Snapshot",
    "checkpoint_root",
]

# Files larger than this are left out of checkpoints (and named in the event).
DEFAULT_SIZE_CAP = 10 * 1024 * 1024
# The most left-out paths a snapshot names; the rest are counted.
MAX_LISTED = 100
_EXCLUDES = (".ruizn/", *SECRET_FILE_PATTERNS)
_CONFIG = (
    ("core.bare", "false"),
    ("core.excludesFile", "{dir}/ruizn-exclude"),
    ("core.untrackedCache", "true"),
    ("core.autocrlf", "false"),
    ("core.symlinks", "true"),
    ("core.fileMode", "true"),
    ("core.quotePath", "false"),
    ("core.hooksPath", "/dev/null"),
    ("index.version", "2"),
    ("gc.auto", "0"),
    ("diff.renames", "false"),
)


class CheckpointError(RuntimeError):
    """The store could not take or restore a checkpoint (the message says why, one line)."""


@frozen(kw_only=True)
class Snapshot:
    tree: str
    files: int
    bytes: int
    empty_dirs: tuple[str, ...] = ()
    left_out: tuple[LeftOut, ...] = ()
    more_left_out: int = 0


@frozen(kw_only=True)
class Change:
    """One path that differs between two checkpoints: `A`dded, `M`odified, `D`eleted or
    `T` (its type changed: a file became a symlink...)."""

    status: str
    path: str


def checkpoint_root(state: Path) -> Path:
    """Where checkpoints live under the state folder `state`."""
    return state / "checkpoints"


def _key(workspace: Path) -> str:
    return hashlib.sha256(os.fsencode(workspace)).hexdigest()[:24]


def is_secret(path: str) -> bool:
    return is_secret_name(path.rstrip("/").rpartition("/")[2])


class GitStore:
    """The checkpoints of one workspace (see the module's docstring)."""

    def __init__(
        self,
        root: Path,
        workspace: Path,
        *,
        size_cap: int = DEFAULT_SIZE_CAP,
        git: str = "git",
        run: Path | None = None,
    ) -> None:
        self.root = root
        self.git_dir = root / "store.git"
        self.workspace = workspace.resolve()
        self.index = root / "index" / _key(self.workspace)
        self.size_cap = size_cap
        self._git = git
        self._env = _git_env(os.environ, self.git_dir, self.workspace, self.index)
        # The lock's descriptor while it is held, passed to every git process: a git that
        # outlives a killed ruizn holds the lock until it ends too.
        self._held: tuple[int, ...] = ()
        # The folder of the run whose checkpoints these are: listed in the store, so that
        # `ruizn checkpoints gc` keeps its trees while the folder exists.
        self.run = run.resolve() if run is not None else None
        self._noted = False
        # git's answer on whether a name not in the index is ignored, with what it depends
        # on (the stat data of the .gitignore files above it): the same names come back at
        # every checkpoint of a run, and asking git again is a process each time.
        self._ignore_answers: dict[str, tuple[tuple[object, ...], bool]] = {}

    @classmethod
    def for_workspace(cls, state: Path, workspace: Path, *, run: Path | None = None) -> GitStore:
        """The store under the state folder `state`, for `workspace` (and the run folder
        `run`, when a run takes the checkpoints)."""
        return cls(checkpoint_root(state), workspace, run=run)

    # -- taking a checkpoint ------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """Checkpoint the workspace as it is now."""
        with self._locked():
            self._note_run()
            # One git command stats every file the index holds and walks for what it does
            # not (`C` changed, `R` removed, `?` not in the index: a new or ignored folder
            # is named once, `dir/`); git's ignore rules then sort the few `?` names. No
            # Python walk of the tree: only of new folders.
            tagged = self._run(["ls-files", "-z", "-t", "-m", "-d", "-o", "--directory"])
            changed: list[str] = []
            untracked: list[str] = []
            for entry in _split(tagged):
                (untracked if entry[0] == "?" else changed).append(entry[2:])
            ignored = self._ignored(untracked)
            skip = {*ignored, ".ruizn/"}
            new_files, empty_dirs, inner = self._new([e for e in untracked if e not in skip])
            add, remove, big, replaced = self._sorted_out([*new_files, *changed])
            if big or replaced:
                self._feed(["update-index", "-z", "--force-remove", "--stdin"], big + replaced)
            if add or remove:
                self._feed(["update-index", "-z", "--add", "--remove", "--stdin"], add + remove)
            tree, (files, size) = self._write_tree()
        left = [*(LeftOut(path=p, why="too_big") for p in big), *_why([*ignored, *inner])]
        return Snapshot(
            tree=tree,
            files=files,
            bytes=size,
            empty_dirs=tuple(sorted(empty_dirs)),
            left_out=tuple(left[:MAX_LISTED]),
            more_left_out=max(len(left) - MAX_LISTED, 0),
        )

    def _ignored(self, entries: Sequence[str]) -> list[str]:
        """Those of `entries` (paths not in the index) the ignore rules leave out: the
        .gitignore files, the store's exclude file (`.ruizn/`, the secret-file names)."""
        ask = [e for e in entries if e != ".ruizn/"]  # always there, always left out
        keys = {e: self._ignore_key(e) for e in ask}
        known = self._ignore_answers
        if len(known) > 10_000:
            known.clear()
        unknown = [e for e in ask if e not in known or known[e][0] != keys[e]]
        if unknown:
            found = set(self._check_ignore(unknown))
            known.update((e, (keys[e], e in found)) for e in unknown)
        return [e for e in ask if known[e][1]]

    def _ignore_key(self, path: str) -> tuple[object, ...]:
        """What git's ignore rules for `path` depend on, beside the store's own exclude file
        (fixed): the .gitignore files of the folders above it (a parent that is ignored would
        be named instead of it)."""
        folders = path.rstrip("/").split("/")[:-1]
        return tuple(
            _stat_key(self.workspace.joinpath(*folders[:depth], ".gitignore"))
            for depth in range(len(folders) + 1)
        )

    def _check_ignore(self, ask: Sequence[str]) -> list[str]:
        done = subprocess.run(
            [self._git, "check-ignore", "-z", "--no-index", "--stdin"],
            input=_join(ask),
            capture_output=True,
            env=dict(self._env),
            cwd=self.workspace,
            check=False,
            pass_fds=self._held,
        )
        if done.returncode not in (0, 1):  # 1: none of them is ignored
            raise CheckpointError(f"git check-ignore: {done.stderr.decode(errors='replace')}")
        return _split(done.stdout)

    def _new(self, entries: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
        """The new files, the empty folders, and the ignored paths inside new folders, from
        the names `ls-files -o --directory` gave that are not ignored (a new folder is named
        once, `dir/`). A folder holding only folders is read here; any other is listed by
        git (its files, and what its ignore rules leave out)."""
        files = [e for e in entries if not e.endswith("/")]
        empty: list[str] = []
        deep: list[str] = []
        for folder in (e.rstrip("/") for e in entries if e.endswith("/")):
            only = _only_folders(self.workspace, folder)
            if only is None:
                deep.append(folder)
            else:
                empty.extend(only)
        if not deep:
            return files, empty, []
        inside, left = self._parallel(
            ["ls-files", "-z", "-o", "--exclude-standard", "--", *deep],
            ["ls-files", "-z", "-o", "-i", "--directory", "--exclude-standard", "--", *deep],
        )
        files.extend(p for p in _split(inside) if not p.endswith("/"))  # "repo/": nested
        ignored = _split(left)
        for folder in deep:
            _empty_inside(self.workspace, folder, set(ignored), empty)
        return files, empty, _outermost(ignored)

    def _write_tree(self) -> tuple[str, tuple[int, int]]:
        """`git write-tree`, and the index's totals read while it runs (the index it reads is
        the one update-index wrote; write-tree only adds its tree cache, by rename)."""
        had_index = self.index.exists()
        try:
            proc = subprocess.Popen(
                [self._git, "write-tree"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=dict(self._env),
                cwd=self.workspace,
                pass_fds=self._held,
            )
        except OSError as exc:
            raise CheckpointError(f"git could not start: {exc.strerror}") from None
        try:
            # No index yet: nothing was ever added (write-tree writes an empty one).
            totals = _index_totals(self.index, self.workspace) if had_index else (0, 0)
        finally:
            out, err = proc.communicate()
        if proc.returncode != 0:
            lines = err.decode("utf-8", "replace").strip().splitlines()
            raise CheckpointError(f"git write-tree: {lines[-1] if lines else proc.returncode}")
        return out.decode().strip(), totals

    def _sorted_out(
        self, paths: Sequence[str]
    ) -> tuple[list[str], list[str], list[str], list[str]]:
        """(to add or update, gone, over the size cap, now a folder) among `paths`."""
        add: list[str] = []
        remove: list[str] = []
        big: list[str] = []
        replaced: list[str] = []
        for path in dict.fromkeys(paths):
            try:
                info = os.lstat(self.workspace / path)
            except FileNotFoundError:
                remove.append(path)
                continue
            if info.st_size > self.size_cap and not _is_link(info.st_mode):
                big.append(path)
            elif _is_dir(info.st_mode):
                replaced.append(path)  # a file that became a folder: its files are new
            else:
                add.append(path)
        return add, remove, big, replaced

    # -- reading checkpoints ------------------------------------------------------------------

    def changes(self, old: str, new: str) -> tuple[Change, ...]:
        out = self._run(["diff-tree", "-r", "-z", "--no-renames", "--name-status", old, new])
        parts = _split(out)
        return tuple(
            Change(status=parts[i][:1], path=parts[i + 1]) for i in range(0, len(parts) - 1, 2)
        )

    def patch(self, old: str, new: str) -> str:
        """The unified diff from `old` to `new` (binary files as one line each)."""
        out = self._run(["diff-tree", "-r", "-p", "--no-renames", "--no-color", old, new])
        return out.decode("utf-8", errors="replace")

    def disk_usage(self, trees: Sequence[str]) -> int:
        """Bytes on disk of every object `trees` hold (shared objects counted once)."""
        if not trees:
            return 0
        out = self._run(["rev-list", "--objects", "--disk-usage", *dict.fromkeys(trees)])
        return int(out.decode().strip() or 0)

    # -- writing a checkpoint to a folder -----------------------------------------------------

    def restore(self, tree: str, empty_dirs: Sequence[str], current: Snapshot) -> None:
        """Make the workspace's tracked files those of `tree` (the workspace is `current`):
        files it changed, added or removed go back; what checkpoints leave out is not
        touched."""
        with self._locked():
            changes = self.changes(current.tree, tree)
            for change in changes:
                if change.status == "D":
                    _remove(self.workspace / change.path)
            wanted = [c.path for c in changes if c.status != "D"]
            if wanted:
                self._checkout(tree, self.workspace, wanted)
            for folder in empty_dirs:
                (self.workspace / folder).mkdir(parents=True, exist_ok=True)
            keep = set(empty_dirs)
            for folder in current.empty_dirs:
                if folder not in keep:
                    _rmdir_up(self.workspace, folder, keep)
            for change in changes:
                if change.status == "D":
                    parent = change.path.rpartition("/")[0]
                    if parent:
                        _rmdir_up(self.workspace, parent, keep)

    def write_to(self, tree: str, empty_dirs: Sequence[str], dest: Path) -> None:
        """Write `tree` into the folder `dest` (which must be empty or not exist)."""
        dest.mkdir(parents=True, exist_ok=True)
        if any(dest.iterdir()):
            raise CheckpointError(f"{dest} is not empty")
        self._checkout(tree, dest.resolve(), None)
        for folder in empty_dirs:
            (dest / folder).mkdir(parents=True, exist_ok=True)

    def _checkout(self, tree: str, root: Path, paths: Sequence[str] | None) -> None:
        index = self.root / "index" / f"restore.{os.getpid()}"
        env = _git_env(os.environ, self.git_dir, root, index)
        try:
            self._run(["read-tree", tree], env=env)
            if paths is None:
                self._run(["checkout-index", "-a", "-f"], env=env)
            else:
                self._run(["checkout-index", "-f", "-z", "--stdin"], env=env, stdin=_join(paths))
        finally:
            index.unlink(missing_ok=True)

    # -- git ----------------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self._init()
        # Shared with every other checkpoint, exclusive to `checkpoints gc` (which must not
        # prune the objects of a checkpoint not yet in its run's log).
        store_fd = store_lock(self.root, exclusive=False)
        lock = self.index.with_name(self.index.name + ".ruizn-lock")
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            os.close(store_fd)
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            # Held by us alone (and by no git of a killed checkpoint, which would hold it
            # too): an index.lock now is a checkpoint that was killed.
            self.index.with_name(self.index.name + ".lock").unlink(missing_ok=True)
            self._held = (store_fd, fd)
            yield
        finally:
            self._held = ()
            os.close(fd)
            os.close(store_fd)

    def _note_run(self) -> None:
        """List the run folder in the store (once): `checkpoints gc` keeps its trees."""
        if self.run is not None and not self._noted:
            _write_once(self.root / "runs" / _key(self.run), os.fsdecode(self.run))
            self._noted = True

    def _init(self) -> None:
        self.index.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Which workspace this index is of: `checkpoints gc` finds its runs and drops the
        # index of a workspace that is gone.
        _write_once(self.index.with_name(self.index.name + ".workspace"), str(self.workspace))
        if (self.git_dir / "HEAD").exists():
            return
        env = {k: v for k, v in self._env.items() if k != "GIT_WORK_TREE"}
        self._run(["init", "-q", "--bare", str(self.git_dir)], env=env)
        for name, value in _CONFIG:
            self._run(["config", name, value.format(dir=self.git_dir)], env=env)
        (self.git_dir / "ruizn-exclude").write_text("\n".join(_EXCLUDES) + "\n")

    def _run(
        self, args: Sequence[str], *, env: Mapping[str, str] | None = None, stdin: bytes = b""
    ) -> bytes:
        try:
            done = subprocess.run(
                [self._git, *args],
                input=stdin,
                capture_output=True,
                env=dict(env if env is not None else self._env),
                cwd=self.workspace if self.workspace.is_dir() else None,
                check=False,
                pass_fds=self._held,
            )
        except OSError as exc:
            raise CheckpointError(f"git could not start: {exc.strerror}") from None
        if done.returncode != 0:
            text = done.stderr.decode("utf-8", "replace").strip().splitlines()
            raise CheckpointError(f"git {args[0]}: {text[-1] if text else done.returncode}")
        return done.stdout

    def _feed(self, args: Sequence[str], paths: Sequence[str]) -> None:
        self._run(args, stdin=_join(paths))

    def _parallel(self, *commands: Sequence[str]) -> list[bytes]:
        """Run git commands side by side (each walks or stats the whole tree)."""
        try:
            procs = [
                subprocess.Popen(
                    [self._git, *args],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=dict(self._env),
                    cwd=self.workspace,
                    pass_fds=self._held,
                )
                for args in commands
            ]
        except OSError as exc:
            raise CheckpointError(f"git could not start: {exc.strerror}") from None
        outs: list[bytes] = []
        for args, proc in zip(commands, procs, strict=True):
            out, err = proc.communicate()
            if proc.returncode != 0:
                lines = err.decode("utf-8", "replace").strip().splitlines()
                raise CheckpointError(f"git {args[0]}: {lines[-1] if lines else proc.returncode}")
            outs.append(out)
        return outs


def _git_env(environ: Mapping[str, str], git_dir: Path, tree: Path, index: Path) -> dict[str, str]:
    keep = {k: v for k, v in environ.items() if not k.startswith("GIT_")}
    return {
        **keep,
        "GIT_DIR": str(git_dir),
        "GIT_WORK_TREE": str(tree),
        "GIT_INDEX_FILE": str(index),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_OPTIONAL_LOCKS": "0",
        "LC_ALL": "C",
    }


def store_lock(root: Path, *, exclusive: bool) -> int:
    """The store-wide lock's descriptor, held (shared by checkpoints, exclusive by gc)."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(root / "gc.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    except OSError:
        os.close(fd)
        raise
    return fd


def _stat_key(path: Path) -> tuple[int, int, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _write_once(path: Path, text: str) -> None:
    """Write `text` to `path` unless it exists (whole or not at all: by rename)."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    temp.write_text(text)
    os.replace(temp, path)


def _why(paths: Sequence[str]) -> Iterator[LeftOut]:
    for path in paths:
        if path == ".ruizn/" or path.startswith(".ruizn/"):
            continue  # always left out (the docs say so): naming it in every event is noise
        if is_secret(path):
            yield LeftOut(path=path, why="secret")
        else:
            yield LeftOut(path=path, why="ignored")


def _outermost(paths: Sequence[str]) -> list[str]:
    """`paths` without those inside a folder also named (`ls-files -i --directory` can name
    an ignored folder and its files both)."""
    folders = [p for p in paths if p.endswith("/")]
    return [p for p in paths if not any(p != f and p.startswith(f) for f in folders)]


def _only_folders(root: Path, folder: str) -> list[str] | None:
    """The empty folders under `folder` when it holds nothing but folders; [] for a nested
    repository (git records only its folder: here nothing); None when it holds anything
    else."""
    try:
        entries = list(os.scandir(root / folder))
    except OSError:
        return []
    if any(e.name == ".git" for e in entries):
        return []
    if not entries:
        return [folder]
    found: list[str] = []
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            return None
        inner = _only_folders(root, f"{folder}/{entry.name}")
        if inner is None:
            return None
        found.extend(inner)
    return found


def _empty_inside(root: Path, folder: str, ignored: set[str], empty: list[str]) -> None:
    """Add to `empty` the empty folders under `folder`, but inside what git ignores
    (`ignored`: folders end in `/`) and nested repositories."""
    if folder + "/" in ignored:
        return
    try:
        entries = list(os.scandir(root / folder))
    except OSError:
        return
    if any(e.name == ".git" for e in entries):
        return
    if not entries:
        empty.append(folder)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            _empty_inside(root, f"{folder}/{entry.name}", ignored, empty)


def _index_totals(index: Path, root: Path) -> tuple[int, int]:
    """(entries, bytes) of a git index (version 2 or 3): the sizes git recorded. An entry git
    wrote in the same second as the file changed records size 0 (git "smudges" it, to look
    at its content next time): its size is read from the file itself."""
    data = index.read_bytes()
    if data[:4] != b"DIRC":
        raise CheckpointError("the store's index is not a git index")
    version, count = struct.unpack_from(">II", data, 4)
    if version not in (2, 3):
        raise CheckpointError(f"the store's index has version {version}")
    # Each entry: stat data, its size at +36, the object id, 2 bytes of flags (the name's
    # length in the low 12 bits), 2 more when extended, the name, NUL padding to 8 bytes.
    unpack = struct.Struct(">I20xH").unpack_from
    offset, total = 12, 0
    for _ in range(count):
        size, flags = unpack(data, offset + 36)
        start = offset + (64 if flags & 0x4000 else 62)
        length = flags & 0xFFF
        if length == 0xFFF:  # a name that long is NUL-terminated only
            length = data.index(b"\0", start) - start
        if size == 0:
            with contextlib.suppress(OSError):
                size = os.lstat(root / os.fsdecode(data[start : start + length])).st_size
        total += size
        offset += (start - offset + length + 8) & ~7
    return count, total


def _split(out: bytes) -> list[str]:
    return [os.fsdecode(part) for part in out.split(b"\0") if part]


def _join(paths: Sequence[str]) -> bytes:
    return b"".join(os.fsencode(p) + b"\0" for p in paths)


def _is_link(mode: int) -> bool:
    return (mode & 0o170000) == 0o120000


def _is_dir(mode: int) -> bool:
    return (mode & 0o170000) == 0o040000


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        pass  # a folder now stands there; its own files are listed on their own


def _rmdir_up(root: Path, folder: str, keep: set[str]) -> None:
    """Remove `folder` and its parents while they are empty and not kept."""
    while folder and folder not in keep:
        try:
            (root / folder).rmdir()
        except OSError:
            return
        folder = folder.rpartition("/")[0]
