"""What a checkpoint costs: a 20,000-file, 200 MB tree where 3 files changed.

Builds the tree in a temporary folder (200 folders of 100 files of 10 KB, plus an ignored
`node_modules/`, a `.env` and an empty folder), takes a first checkpoint (every file hashed
once), then, ROUNDS times: changes 3 files and times

- ruizn's checkpoint (`GitStore.snapshot`: `ls-files -t -m -d -o --directory` for the
  changed, removed and new files, `check-ignore --no-index` for the few names not in the
  index, then `update-index` with the few changed and `write-tree`, the index's totals read
  while it runs; docs/checkpoints.md lists the steps);
- `git add -A && git write-tree` on the same tree with a persistent index of its own (the
  floor: what git itself does for the same job), in the same run;
- dulwich (`porcelain.add` of the 3 changed files and `commit_tree` of the index), when it is
  installed: a pure-Python store for comparison.

Prints the median wall time of each, and the CPU time (user + system, this process and its
git processes: on a machine shared with other jobs it says more than the wall time), ruizn's
ratios to git's, and the load average. `python bench/checkpoint.py [ROUNDS]`.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ruizn.effects.checkpoints.store import GitStore

FOLDERS, FILES, SIZE = 200, 100, 10_000


def _build(root: Path) -> list[Path]:
    paths = []
    for d in range(FOLDERS):
        folder = root / f"d{d:03}" / f"sub{d % 7}"
        folder.mkdir(parents=True)
        for f in range(FILES):
            path = folder / f"f{f:03}.txt"
            path.write_bytes(os.urandom(SIZE // 2).hex().encode())
            paths.append(path)
    (root / "node_modules" / "pkg").mkdir(parents=True)
    (root / "node_modules" / "pkg" / "index.js").write_text("x")
    (root / ".gitignore").write_text("node_modules/\n")
    (root / ".env").write_text("KEY=1\n")
    (root / "empty" / "inner").mkdir(parents=True)
    return paths


def _touch(paths: list[Path], round_: int) -> None:
    for k in range(3):
        with paths[(round_ * 7919 + k * 104729) % len(paths)].open("ab") as fh:
            fh.write(f"change {round_} {k}\n".encode())


def _cpu() -> float:
    """CPU seconds so far of this process and the children it waited for."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _git_floor(git_dir: Path, tree: Path) -> float:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
        "GIT_DIR": str(git_dir),
        "GIT_WORK_TREE": str(tree),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    began = time.perf_counter()
    subprocess.run(["git", "add", "-A"], env=env, check=True)
    subprocess.run(["git", "write-tree"], env=env, check=True, capture_output=True)
    return time.perf_counter() - began


def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        tree = base / "tree"
        tree.mkdir()
        paths = _build(tree)
        store = GitStore(base / "store", tree)
        floor_dir = base / "floor.git"
        subprocess.run(["git", "init", "-q", "--bare", str(floor_dir)], check=True)
        began = time.perf_counter()
        first = store.snapshot()
        print(
            f"tree: {first.files} files, {first.bytes / 1e6:.0f} MB; first checkpoint"
            f" {1000 * (time.perf_counter() - began):.0f} ms (every file hashed)"
        )
        _git_floor(floor_dir, tree)
        dulwich = _dulwich(tree)
        ours: list[float] = []
        floor: list[float] = []
        ours_cpu: list[float] = []
        floor_cpu: list[float] = []
        dul: list[float] = []
        load = os.getloadavg()[0]
        for round_ in range(rounds):
            _touch(paths, round_)
            began, cpu = time.perf_counter(), _cpu()
            snap = store.snapshot()
            ours.append(time.perf_counter() - began)
            ours_cpu.append(_cpu() - cpu)
            cpu = _cpu()
            floor.append(_git_floor(floor_dir, tree))
            floor_cpu.append(_cpu() - cpu)
            if dulwich is not None:
                dul.append(dulwich(paths, round_))
            assert snap.files == first.files
        ms, floor_ms = 1000 * statistics.median(ours), 1000 * statistics.median(floor)
        cpu_ms, floor_cpu_ms = (
            1000 * statistics.median(ours_cpu),
            1000 * statistics.median(floor_cpu),
        )
        print(f"load average {load:.1f} to {os.getloadavg()[0]:.1f} (medians of {rounds})")
        print(f"ruizn checkpoint, 3 files changed: {ms:.1f} ms, CPU {cpu_ms:.1f} ms")
        print(f"git add -A && git write-tree:      {floor_ms:.1f} ms, CPU {floor_cpu_ms:.1f} ms")
        print(f"ratio: {ms / floor_ms:.2f} (CPU {cpu_ms / floor_cpu_ms:.2f})")
        if dul:
            print(f"dulwich add + commit_tree:         {1000 * statistics.median(dul):.1f} ms")
        else:
            print("dulwich: not installed (pip install dulwich to compare)")
        shutil.rmtree(tree)


def _dulwich(tree: Path):  # type: ignore[no-untyped-def]
    try:
        from dulwich import porcelain
        from dulwich.repo import Repo
    except ImportError:
        return None
    repo = Repo.init(str(tree))
    porcelain.add(repo, paths=None)  # every file, once: its index then holds stat data
    repo.open_index().commit(repo.object_store)

    def one(paths: list[Path], round_: int) -> float:
        began = time.perf_counter()
        porcelain.add(repo, paths=None)
        repo.open_index().commit(repo.object_store)
        return time.perf_counter() - began

    return one


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 9)
