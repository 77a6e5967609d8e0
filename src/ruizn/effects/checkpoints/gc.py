"""Reclaiming the checkpoint store (`ruizn checkpoints gc`): keep what a run can still ask
for, let git's own gc drop the rest.

Kept: every tree a checkpoint event names in the log of a run folder that still exists (the
folders the store lists, one per run that took a checkpoint, and the default run folders,
`.ruizn/runs/`, of each workspace it lists); what a rewind of such a run replaced and wrote
(`--undo`); and the tree of each workspace's index (the last checkpoint taken there: the
next one reuses its objects). One tree object naming all of them is pointed to by the
store's one ref; `git gc --prune=now` then packs what is kept and deletes the rest. The
index of a workspace that no longer exists is deleted, and the record of a run folder that
does not.

It holds the store-wide lock exclusively, so no checkpoint is half-way (its objects written,
its event not yet in its run's log) while it prunes; a kill -9 leaves git's own state,
which git's gc keeps consistent (a pack is written whole before what it replaces goes).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from attrs import frozen

from ruizn.checkpoints import checkpoints_of
from ruizn.effects.checkpoints.store import (
    CheckpointError,
    _git_env,
    _key,
    checkpoint_root,
    store_lock,
)
from ruizn.effects.runlog.reader import LOG_NAME, LogError, iter_events

__all__ = ["GcReport", "collect_garbage"]

_KEEP_REF = "refs/ruizn/keep"


@frozen(kw_only=True)
class GcReport:
    """What a gc kept and freed: bytes of the store's objects before and after."""

    before: int
    after: int
    trees: int
    runs: int
    dropped_runs: int
    dropped_workspaces: int


def collect_garbage(state: Path, *, workspaces: Sequence[Path] = (), git: str = "git") -> GcReport:
    """Reclaim the store under the state folder `state` (`workspaces`: more workspaces to
    look for runs in, besides those the store lists). CheckpointError, saying why and
    deleting nothing, when a run's log cannot be read or an index's workspace is unknown."""
    root = checkpoint_root(state)
    git_dir = root / "store.git"
    if not (git_dir / "HEAD").exists():
        return GcReport(before=0, after=0, trees=0, runs=0, dropped_runs=0, dropped_workspaces=0)
    fd = store_lock(root, exclusive=True)
    try:
        return _collect(root, git_dir, [w.resolve() for w in workspaces], git, (fd,))
    finally:
        os.close(fd)


def _collect(
    root: Path, git_dir: Path, extra: Sequence[Path], git: str, held: tuple[int, ...]
) -> GcReport:
    indexes = _indexes(root / "index")
    named = {key: Path(path) for key, path in indexes.items() if path is not None}
    for workspace in extra:  # a workspace named at the command line names its index
        if _key(workspace) in indexes:
            named[_key(workspace)] = workspace
    unnamed = [key for key in indexes if key not in named]
    if unnamed:
        raise CheckpointError(
            f"the store holds the index of {len(unnamed)} workspace(s) it has no name for (an"
            " older ruizn's): give each with --workspace, or take a checkpoint there; nothing"
            " was deleted"
        )
    gone = {key for key, path in named.items() if not path.is_dir()}
    listed = {p: Path(p.read_text()) for p in _files(root / "runs")}
    folders = {f for f in listed.values() if f.is_dir()}
    for key, path in named.items():
        if key not in gone:
            folders |= {log.parent for log in (path / ".ruizn" / "runs").glob(f"*/{LOG_NAME}")}
    trees = set(_logged_trees(folders))
    trees |= set(_rewound_trees(root / "rewinds", {f.name for f in folders}))
    for key in named.keys() - gone:
        trees.add(
            _run(git, ["write-tree", "--missing-ok"], _env(git_dir, root / "index" / key), held)
        )
    env = _env(git_dir, None)
    kept = _existing(git, env, held, sorted(trees))
    before = _size(git_dir / "objects")
    listing = "".join(f"040000 tree {tree}\t{n}\n" for n, tree in enumerate(kept))
    whole = _run(git, ["mktree"], env, held, listing.encode())
    _run(git, ["update-ref", _KEEP_REF, whole], env, held)
    _run(git, ["gc", "--quiet", "--prune=now"], env, held)
    for record, folder in listed.items():
        if not folder.is_dir():
            record.unlink(missing_ok=True)
    for record in _files(root / "rewinds"):
        if record.stem not in {f.name for f in folders}:
            record.unlink(missing_ok=True)  # the run it could undo is gone
    for key in gone:
        for name in (key, f"{key}.workspace", f"{key}.ruizn-lock", f"{key}.lock"):
            (root / "index" / name).unlink(missing_ok=True)
    return GcReport(
        before=before,
        after=_size(git_dir / "objects"),
        trees=len(kept),
        runs=len(folders),
        dropped_runs=sum(1 for f in listed.values() if not f.is_dir()),
        dropped_workspaces=len(gone),
    )


def _indexes(folder: Path) -> dict[str, str | None]:
    """Each index's key, with the workspace it is of when the store lists it."""
    found: dict[str, str | None] = {}
    for path in _files(folder):
        if "." not in path.name:
            named = path.with_name(path.name + ".workspace")
            found[path.name] = named.read_text() if named.exists() else None
    return found


def _files(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_file() and not p.name.endswith(".tmp")]
    except FileNotFoundError:
        return []


def _logged_trees(folders: Iterable[Path]) -> Iterator[str]:
    for folder in sorted(folders):
        log = folder / LOG_NAME
        try:
            yield from (point.tree for point in checkpoints_of(iter_events(log)))
        except (LogError, OSError) as exc:
            raise CheckpointError(f"cannot read {log}: {exc}; nothing was deleted") from None


def _rewound_trees(folder: Path, runs: set[str]) -> Iterator[str]:
    """The trees of the rewinds of runs in `runs` (a record of another run is dropped)."""
    for record in _files(folder):
        if record.suffix != ".json" or record.stem not in runs:
            continue
        try:
            data = json.loads(record.read_text())
            yield data["undo"]["tree"]
            yield data["wrote"]["tree"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{record} is unreadable: {exc}; nothing was deleted") from None


def _existing(
    git: str, env: Mapping[str, str], held: tuple[int, ...], trees: Sequence[str]
) -> list[str]:
    """Those of `trees` the store holds (a log copied from another machine names others)."""
    if not trees:
        return []
    out = _run(
        git,
        ["cat-file", "--batch-check=%(objectname) %(objecttype)"],
        env,
        held,
        "".join(f"{t}\n" for t in trees).encode(),
    )
    return [line.split()[0] for line in out.splitlines() if line.endswith(" tree")]


def _size(folder: Path) -> int:
    total = 0
    for top, _, names in os.walk(folder):
        for name in names:
            with contextlib.suppress(FileNotFoundError):  # a pack git just replaced
                total += os.lstat(os.path.join(top, name)).st_size
    return total


def _env(git_dir: Path, index: Path | None) -> dict[str, str]:
    env = _git_env(os.environ, git_dir, git_dir, index or git_dir / "no-index")
    del env["GIT_WORK_TREE"]
    return env


def _run(
    git: str, args: Sequence[str], env: Mapping[str, str], held: tuple[int, ...], stdin: bytes = b""
) -> str:
    try:
        done = subprocess.run(
            [git, *args],
            input=stdin,
            capture_output=True,
            env=dict(env),
            check=False,
            pass_fds=held,
        )
    except OSError as exc:
        raise CheckpointError(f"git could not start: {exc.strerror}") from None
    if done.returncode != 0:
        text = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise CheckpointError(f"git {args[0]}: {text[-1] if text else done.returncode}")
    return done.stdout.decode().strip()
