"""The store of checkpoints, with real git and real files: what a snapshot keeps, leaves
out, and gives back byte for byte."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ruizn.effects.checkpoints.store import GitStore


def tree_hash(root: Path) -> str:
    """Every path under `root` but .ruizn/ and .git/ (which checkpoints never hold; the
    shell's sandbox puts an empty .git/ in the workspace while a run goes) with its kind, mode
    bits and bytes (or target)."""
    digest = hashlib.sha256()
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in {".ruizn", ".git"})
        for name in sorted([*files, *dirs]):
            path = Path(top) / name
            info = path.lstat()
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                body = b"link:" + os.fsencode(os.readlink(path))
            elif path.is_dir():
                body = b"dir"
            else:
                body = path.read_bytes() + bytes([info.st_mode & 0o100 != 0])
            digest.update(rel.encode() + b"\0" + body + b"\0")
    return digest.hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> GitStore:
    (tmp_path / "ws").mkdir()
    return GitStore(tmp_path / "store", tmp_path / "ws")


def test_a_symlink_an_executable_bit_an_empty_folder_and_a_deleted_file_round_trip(
    store: GitStore,
) -> None:
    ws = store.workspace
    (ws / "a.txt").write_text("a\n")
    (ws / "run.sh").write_text("#!/bin/sh\n")
    (ws / "run.sh").chmod(0o755)
    (ws / "link").symlink_to("a.txt")
    (ws / "sub" / "empty").mkdir(parents=True)
    before, first = tree_hash(ws), store.snapshot()
    assert first.empty_dirs == ("sub/empty",)
    (ws / "a.txt").unlink()
    (ws / "run.sh").chmod(0o644)
    (ws / "link").unlink()
    (ws / "link").symlink_to("run.sh")
    (ws / "sub" / "empty").rmdir()
    (ws / "new" / "deep").mkdir(parents=True)
    (ws / "new" / "deep" / "n.bin").write_bytes(b"\0\1")
    after, second = tree_hash(ws), store.snapshot()
    assert {(c.status, c.path) for c in store.changes(first.tree, second.tree)} == {
        ("D", "a.txt"),
        ("M", "run.sh"),
        ("M", "link"),
        ("A", "new/deep/n.bin"),
    }
    store.restore(first.tree, first.empty_dirs, second)
    assert tree_hash(ws) == before
    store.restore(second.tree, second.empty_dirs, store.snapshot())
    assert tree_hash(ws) == after


def test_ignored_secret_big_and_run_files_are_left_out_and_named(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "build").mkdir(parents=True)
    (ws / ".gitignore").write_text("build/\n*.log\n")
    (ws / "logs").mkdir()
    (ws / "logs" / "a.log").write_text("only ignored files in a new folder\n")
    (ws / "build" / "out.o").write_bytes(b"o")
    (ws / ".env").write_text("KEY=1\n")
    (ws / ".ruizn" / "runs").mkdir(parents=True)
    (ws / "big.bin").write_bytes(b"x" * 2000)
    (ws / "kept.txt").write_text("kept\n")
    snap = GitStore(tmp_path / "store", ws, size_cap=1000).snapshot()
    named = {(item.path, item.why) for item in snap.left_out}
    # A folder of ignored files is named once, or its files are (git names either).
    assert named & {("logs/", "ignored"), ("logs/a.log", "ignored")}
    assert {n for n in named if not n[0].startswith("logs/")} == {
        ("build/", "ignored"),
        (".env", "secret"),
        ("big.bin", "too_big"),
    }
    assert (snap.files, snap.bytes) == (2, len("build/\n*.log\n") + len("kept\n"))


def test_a_killed_checkpoint_leaves_the_store_usable(store: GitStore) -> None:
    (store.workspace / "a.txt").write_text("a\n")
    first = store.snapshot()
    # What a checkpoint killed while git held the index lock leaves behind.
    store.index.with_name(store.index.name + ".lock").write_bytes(b"half")
    (store.workspace / "a.txt").write_text("b\n")
    second = store.snapshot()
    assert second.tree != first.tree
    assert [(c.status, c.path) for c in store.changes(first.tree, second.tree)] == [("M", "a.txt")]


def test_a_checkpoint_killed_with_sigkill_leaves_the_store_usable(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for d in range(20):
        (ws / f"d{d}").mkdir(parents=True)
        for f in range(50):
            (ws / f"d{d}" / f"f{f}").write_bytes(os.urandom(2000))
    code = (
        "import sys; from pathlib import Path; from ruizn.effects.checkpoints.store import"
        " GitStore; GitStore(Path(sys.argv[1]), Path(sys.argv[2])).snapshot()"
    )
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "store"), str(ws)])
    index = GitStore(tmp_path / "store", ws).index
    deadline = time.monotonic() + 30
    while not index.with_name(index.name + ".lock").exists():  # git is writing the index
        assert child.poll() is None, "the checkpoint ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.001)
    child.send_signal(signal.SIGKILL)
    child.wait()
    again = GitStore(tmp_path / "store", ws).snapshot()
    fresh = GitStore(tmp_path / "fresh", ws).snapshot()
    assert (again.tree, again.files) == (fresh.tree, 1000)


def test_a_new_folder_keeps_its_files_and_empty_folders_but_what_git_ignores(
    store: GitStore,
) -> None:
    ws = store.workspace
    (ws / ".gitignore").write_text("*.log\ncache/\n")
    (ws / "new" / "cache" / "deep").mkdir(parents=True)
    (ws / "new" / "cache" / "deep" / "c.txt").write_text("ignored folder\n")
    (ws / "new" / "a.txt").write_text("a\n")
    (ws / "new" / "b.log").write_text("ignored file\n")
    (ws / "new" / "e" / "f").mkdir(parents=True)
    (ws / "new" / "to-new").symlink_to("e")  # a link to a folder is a link, not a folder
    subprocess.run(["git", "init", "-q", str(ws / "new" / "repo")], check=True)
    (ws / "new" / "repo" / "r.txt").write_text("r\n")  # in a nested repository: not kept
    snap = store.snapshot()
    tree = store._run(["ls-tree", "-r", "--name-only", snap.tree]).decode().split()
    assert sorted(tree) == [".gitignore", "new/a.txt", "new/to-new"]
    assert snap.empty_dirs == ("new/e/f",)
    assert {(i.path, i.why) for i in snap.left_out} == {
        ("new/b.log", "ignored"),
        ("new/cache/", "ignored"),
    }


def test_a_changed_gitignore_changes_what_the_next_checkpoint_leaves_out(store: GitStore) -> None:
    ws = store.workspace
    (ws / "gen" / "out").mkdir(parents=True)
    (ws / "sub").mkdir()
    (ws / "sub" / "keep.txt").write_text("k\n")
    (ws / "sub" / "new.tmp").write_text("t\n")
    assert store.snapshot().empty_dirs == ("gen/out",)
    (ws / ".gitignore").write_text("gen/\n")
    (ws / "sub" / "other.tmp").write_text("o\n")
    (ws / "sub" / ".gitignore").write_text("other.tmp\n")
    snap = store.snapshot()
    assert (snap.empty_dirs, [(i.path, i.why) for i in snap.left_out]) == (
        (),
        [("gen/", "ignored"), ("sub/other.tmp", "ignored")],
    )
    (ws / ".gitignore").write_text("# nothing\n")
    assert store.snapshot().empty_dirs == ("gen/out",)
