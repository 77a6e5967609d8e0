"""What of the workspace's git a sandboxed command may not touch: every git directory git would
read code from for the person (config, hooks, commondir, worktree and submodule git dirs),
and every `.git` entry it would find them through.

git runs code named in its directories (`core.fsmonitor`, `core.hooksPath`, hooks, filters,
a `commondir` pointing elsewhere, a submodule's own config and hooks) the next time the person
runs it, outside the sandbox. So, for the repository in the workspace and for each submodule
in its index:

- a `.git` directory is bound read-only over itself: nothing in it can be written, and, being
  a mount point, it cannot be renamed, removed or replaced;
- a `.git` file (a worktree's, a submodule's) is bound read-only over itself, and so is the
  git directory it names, and that directory's `commondir`, when they lie in the workspace
  (elsewhere the whole file system is read-only already);
- a `.git` that does not exist (a workspace that is not a repository, a submodule not checked
  out) is held by an empty read-only folder, so a command cannot create one. bubblewrap makes
  that empty folder on the host (a mount point needs one): `ShellJobs.close()` removes it
  again when it is still empty.

Read once per run: the index (and so the submodule list) is read-only for the whole run.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

from attrs import frozen

__all__ = ["GitGuard", "GitUnreadable", "git_guard", "remove_masks"]

_GIT_TIMEOUT = 10.0
_GITLINK = "160000"


class GitUnreadable(Exception):
    """git cannot list the repository's submodules: their git dirs could not be protected."""


@frozen(kw_only=True)
class GitGuard:
    # Bound read-only over themselves (directories and files).
    protect: tuple[Path, ...] = ()
    # Missing `.git` entries held by an empty read-only folder.
    mask: tuple[Path, ...] = ()


def git_guard(workspace: Path, environ: dict[str, str] | None = None) -> GitGuard:
    """The protection of `workspace`'s repository and of its submodules (see the module)."""
    protect: list[Path] = []
    mask: list[Path] = []
    _entry(workspace, workspace / ".git", protect, mask)
    # Also when the workspace is a folder of a repository above it: its submodules' `.git`
    # files are in the workspace.
    for sub in _submodule_paths(workspace, environ):
        folder = workspace / sub
        if folder.is_dir() and not folder.is_symlink():
            _entry(workspace, folder / ".git", protect, mask)
    return GitGuard(protect=tuple(dict.fromkeys(protect)), mask=tuple(dict.fromkeys(mask)))


def _entry(workspace: Path, entry: Path, protect: list[Path], mask: list[Path]) -> None:
    if entry.is_symlink():
        # A mount lands on the link's target; the link itself, in a read-write folder, can
        # be swapped (docs/shell.md says so): the target is protected.
        target = entry.resolve()
        if _inside(target, workspace) and target.exists():
            protect.append(target)
        return
    if entry.is_dir():
        protect.append(entry)
        return
    if entry.is_file():
        protect.append(entry)
        gitdir = _gitdir_of(entry)
        if gitdir is not None and gitdir.is_dir():
            if _inside(gitdir, workspace):
                protect.append(gitdir)
            common = _commondir_of(gitdir)
            if common is not None and common.is_dir() and _inside(common, workspace):
                protect.append(common)
        return
    if not entry.exists() and os.access(entry.parent, os.W_OK):
        mask.append(entry)  # (a folder the user cannot write, a command cannot either)


def _gitdir_of(gitfile: Path) -> Path | None:
    try:
        text = gitfile.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    first = text.splitlines()[0] if text else ""
    if not first.startswith("gitdir:"):
        return None
    return (gitfile.parent / first.removeprefix("gitdir:").strip()).resolve()


def _commondir_of(gitdir: Path) -> Path | None:
    try:
        text = (gitdir / "commondir").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return (gitdir / text).resolve() if text else None


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder.resolve() in path.resolve().parents


def _submodule_paths(workspace: Path, environ: dict[str, str] | None) -> list[str]:
    """The gitlinks under the workspace in the index of the repository git finds for it
    (`git ls-files --stage`, from the workspace): where git looks for submodules.
    Fails closed (GitUnreadable): the run does not offer the shell if they cannot be read.
    The person's own git, on the person's own repository; nothing of it runs code a command
    could have planted (no command has run yet, and `ls-files` runs no hook or monitor)."""
    env = dict(environ if environ is not None else os.environ)
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0")
    # safe.directory: a repository another user owns is still listed (and protected).
    command = ["git", "-c", "core.fsmonitor=false", "-c", "safe.directory=*"]
    try:
        done = subprocess.run(
            [*command, "ls-files", "--stage", "-z"],
            cwd=workspace,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_GIT_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        return []  # no git here: nothing would read a planted config
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitUnreadable(f"git ls-files: {exc}") from None
    if done.returncode != 0 and b"not a git repository" in done.stderr:
        return []  # no repository (an empty `.git`, a mask a killed run left, is none)
    if done.returncode != 0:
        said = " ".join(done.stderr.decode("utf-8", "replace").split())[:300]
        raise GitUnreadable(f"git ls-files says: {said or done.returncode}")
    paths = []
    for record in done.stdout.split(b"\0"):
        meta, _, name = record.partition(b"\t")
        if meta.startswith(_GITLINK.encode()) and name:
            paths.append(os.fsdecode(name))
    return paths


def remove_masks(masks: Iterable[Path]) -> None:
    """Remove the empty folders bubblewrap made for masks (a folder a command filled, or one
    that was there before, is not empty or is not ours: rmdir leaves it)."""
    for path in masks:
        with contextlib.suppress(OSError):
            path.rmdir()
