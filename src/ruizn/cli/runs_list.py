"""`ruizn runs`: one row per run, and, for a log folder, a cache of the rows it printed.

Listing a folder of runs replays every log, which costs more than the whole start-up. The
rows printed are kept in the user's state folder (`runs-cache/`, one file per log folder;
a `ruizn run` or `resume` stores its own row as it ends, from its final state: `remember`),
each with the key of its run folder as found then: the device, inode, size, mtime and ctime
(ns) of the folder, of its log and of its lock file. A run whose key is unchanged is listed
from the cache and its log is not opened; any other is read as before and its row stored
anew. A run that a writer holds (its lock taken) is always read, and never stored: its row
changes as it goes, and a lock that is released changes no key.

The cache is data, never authority: it only saves reading a log, grants nothing, and one
that cannot be read, or whose entries are not well-formed or not safe to print, is ignored
(and rebuilt). Only `os`, `json` and the table are imported on the way: a warm
`ruizn runs` starts at the cost of `ruizn --help`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import zlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ruizn.cli.exits import EXIT_OK, fail
from ruizn.cli.table import Column, render, terminal_width
from ruizn.format import human_seconds, tokens, usd
from ruizn.terminal import visible

if TYPE_CHECKING:
    from pathlib import Path

    from ruizn.effects.runlog.store import RunInfo, RunStore
    from ruizn.state import ExecutionContext

__all__ = [
    "COLUMNS",
    "Row",
    "cost_cell",
    "list_folder",
    "list_store",
    "remember",
    "row_of",
    "status_word",
]

# The names effects/runlog gives a run's log and lock (tests/cli/test_runs_cache.py
# holds them equal): importing those modules here would cost what the cache saves.
LOG_NAME = "events.jsonl"
LOCK_NAME = "lock"
CACHE_FOLDER = "runs-cache"
_VERSION = 1

COLUMNS = (
    Column(title="RUN", width=22),
    Column(title="STATUS", width=17),
    Column(title="STEPS", right=True, width=5, drop=1),
    Column(title="TIME", right=True, width=7, drop=3),
    Column(title="IN", right=True, width=9, drop=5),
    Column(title="OUT", right=True, width=7, drop=4),
    Column(title="COST", right=True, width=9, drop=2),
)


class Row(NamedTuple):
    """A run's line: its cells, its goal (the last column) and whether the goal is shown
    whole even at a terminal (a reason naming a file)."""

    cells: tuple[str, ...]
    goal: str
    whole: bool


def status_word(run: RunInfo) -> str:
    word = run.status
    if run.live and run.pid:
        return f"{word} (pid {run.pid})"
    if run.worker:  # a fleet's run: the worker that runs it, or ran it last
        return f"{word} ({visible(run.worker)})"
    pending = len(run.pending_approval)
    if pending and word != "awaiting_approval":  # stopped at the prompt (Ctrl-C, kill -9)
        return f"{word}, {pending} awaiting approval"
    return word


def cost_cell(cost: float | None) -> str:
    # Unknown: a model with no known price, or calls logged before ruizn priced them
    # (`ruizn show RUN` prices those now).
    return "unknown" if cost is None else usd(cost)


def row_of(run: RunInfo) -> Row:
    run_id = visible(run.run_id)
    if run.replayed is None:
        # The reason in full, not cut to the width: it names the file and why (a
        # fleet's run not started yet shows its goal).
        word = visible(" ".join(run.status.split()))
        goal = visible(" ".join(str(run.reason or run.goal or "").split()))
        return Row(cells=(run_id, word, "", "", "", "", ""), goal=goal, whole=True)
    state = run.replayed.state
    goal = " ".join(state.goal.split())
    if state.agent_of is not None:  # a subagent's run: marked, under its parent's id
        parent, agent = state.agent_of
        goal = f"\N{DOWNWARDS ARROW WITH TIP RIGHTWARDS} {agent} of {parent}: {goal}"
    return Row(
        cells=(
            run_id,
            visible(status_word(run)),
            str(state.step),
            human_seconds(state.elapsed),
            tokens(state.usage.total_input_tokens),
            tokens(state.usage.output_tokens),
            cost_cell(state.total_cost),
        ),
        goal=visible(goal),
        whole=False,
    )


def print_rows(rows: Sequence[Row]) -> None:
    # At a terminal the table fits its width, the goal taking what is left; piped (grep, a
    # file), every row is whole.
    lines = render(
        COLUMNS,
        [row.cells for row in rows],
        last="GOAL",
        lasts=[row.goal for row in rows],
        width=terminal_width(),
        whole=[row.whole for row in rows],
    )
    for line in lines:
        print(line)


def list_store(store: RunStore) -> int:
    """Every run of `store` (a fleet's database: no cache), newest first."""
    from ruizn.effects.runlog.store import RunNotFound

    try:
        runs = list(store.runs())
    except RunNotFound as exc:
        fail(visible(str(exc)))
    print_rows([row_of(run) for run in runs])
    return EXIT_OK


# ---------------------------------------------------------------- a folder, with the cache
# (json, not orjson: orjson imports json and dataclasses besides itself, and the cache of a
# folder of runs is small.)

Key = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...] | None]  # folder, log, lock


class _Cached(NamedTuple):
    key: Key
    started: float
    row: Row


def list_folder(workspace: str, log_dir: str | None) -> int:
    """The runs of a log folder, newest start first, as `list_store` prints them, each read
    from its log only when the cache has no row for its folder as it is now."""
    # default_root's folder, without pathlib.
    root = log_dir if log_dir is not None else _runs_of(workspace)
    if not os.path.isdir(root):
        from pathlib import Path

        from ruizn.effects.runlog.store import FileStore

        return list_store(FileStore(Path(root)))  # says there are no runs, as ever
    cache_path = _cache_path(root)
    cached = _read_cache(cache_path, root)
    keep: dict[str, _Cached] = {}
    found: list[tuple[float, str, Row]] = []
    for name in _run_names(root):
        folder = os.path.join(root, name)
        key = _key(folder)
        hit = cached.get(name)
        if key is not None and hit is not None and hit.key == key:
            keep[name] = hit
            found.append((hit.started, name, hit.row))
            continue
        started, row = _read(folder)
        found.append((started, name, row))
        if key is not None and _key(folder) == key:  # nobody wrote it while it was read
            keep[name] = _Cached(key=key, started=started, row=row)
    found.sort(key=lambda item: (item[0], item[1]), reverse=True)
    # Written before printing: a reader that goes away (`| head -1`) keeps what was read.
    if keep != cached:
        _write_cache(cache_path, root, keep)
    print_rows([row for _, _, row in found])
    return EXIT_OK


def remember(log_path: Path, state: ExecutionContext) -> None:
    """Store the row of a run this process just ended (its lock released) in its log
    folder's cache, keyed as `list_folder` keys it: the next `ruizn runs` lists it without
    reading its log, so without importing the core. The row is made from the run's final
    state, which replaying its log rebuilds exactly (the replay law), with the goal as the log holds
    it (a secret in it redacted). Best effort: a run
    whose folder is held or changed, or a cache that cannot be written, is read as before."""
    with contextlib.suppress(OSError, ValueError):  # never a run's failure
        _remember(log_path, state)


def _remember(log_path: Path, state: ExecutionContext) -> None:
    from attrs import evolve

    from ruizn.effects.runlog.reader import Replayed
    from ruizn.effects.runlog.store import RunInfo, started_at

    folder = os.fspath(log_path.parent)
    root, name = os.path.dirname(folder), os.path.basename(folder)
    key = _key(folder)
    if key is None:
        return
    # The goal as the log holds it (secrets in it redacted), never the live state's own:
    # the row is what a listing of the log would show.
    with open(log_path, "rb") as log:
        started = json.loads(log.readline())
    if started.get("type") != "run_started" or not isinstance(started.get("goal"), str):
        return
    state = evolve(state, goal=started["goal"])
    # Not read from the log: `row_of` uses the state (events and size are not shown).
    replayed = Replayed(state=state, events=0, torn=None, size=0)
    info = RunInfo(run_id=name, path=log_path, replayed=replayed, error=None, live=False, pid=None)
    entry = _Cached(key=key, started=started_at(log_path.parent), row=row_of(info))
    if _key(folder) != key:  # written to meanwhile: left for the next listing to read
        return
    path = _cache_path(root)
    runs = _read_cache(path, root)
    runs[name] = entry
    _write_cache(path, root, runs)


def _runs_of(workspace: str) -> str:
    return os.path.join(os.path.realpath(workspace), ".ruizn", "runs")


def _run_names(root: str) -> list[str]:
    """The run folders' names, as store.iter_run_folders finds them (an entry named
    events.jsonl of any kind counts: a planted one is listed, and refused when read)."""
    return [
        name
        for name in os.listdir(root)
        if not name.startswith(".") and os.path.lexists(os.path.join(root, name, LOG_NAME))
    ]


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _key(folder: str) -> Key | None:
    """The folder's log and lock as they are, or None when its row must not be cached: a
    folder or file that is not what ruizn writes (the store says why), or a live run."""
    try:
        itself = os.lstat(folder)
        if not stat.S_ISDIR(itself.st_mode):
            return None
        log = os.lstat(os.path.join(folder, LOG_NAME))
        if not stat.S_ISREG(log.st_mode):
            return None
        lock_path = os.path.join(folder, LOCK_NAME)
        try:
            lock: os.stat_result | None = os.lstat(lock_path)
        except FileNotFoundError:
            lock = None
        if lock is not None and (not stat.S_ISREG(lock.st_mode) or _held(lock_path)):
            return None
    except OSError:
        return None
    return _identity(itself), _identity(log), None if lock is None else _identity(lock)


def _held(lock_path: str) -> bool:
    """Whether a writer holds the run's lock (as writer.probe_lock asks it)."""
    fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the shared lock we may have taken
    return False


def _read(folder: str) -> tuple[float, Row]:
    """The run's start and row, from its log (the store's own reading)."""
    from pathlib import Path

    from ruizn.effects.runlog.store import info, started_at

    path = Path(folder)
    return started_at(path), row_of(info(path / LOG_NAME))


def _cache_path(root: str) -> str:
    # One file per log folder; the name only spreads them (the file holds its folder, and a
    # file of another folder is ignored).
    absolute = os.path.abspath(root)
    name = f"{zlib.crc32(absolute.encode('utf-8', 'surrogateescape')):08x}.json"
    return os.path.join(_state_folder(), CACHE_FOLDER, name)


def _state_folder() -> str:
    from ruizn.effects.userconfig.dirs import state_folder

    return state_folder(os.environ)


def _read_cache(path: str, root: str) -> dict[str, _Cached]:
    import json

    try:
        with open(path, "rb") as f:
            document = json.loads(f.read())
    except (OSError, ValueError, RecursionError):
        return {}
    if (
        not isinstance(document, dict)
        or document.get("version") != _VERSION
        or document.get("root") != os.path.abspath(root)
        or not isinstance(document.get("runs"), dict)
    ):
        return {}
    out: dict[str, _Cached] = {}
    for name, entry in document["runs"].items():
        cached = _entry(entry)
        if cached is not None and cached.row.cells[0] == visible(name):
            out[name] = cached
    return out


def _entry(entry: Any) -> _Cached | None:
    """One stored row, or None when it is not exactly what this module writes."""
    if not isinstance(entry, dict):
        return None
    key, started = entry.get("key"), entry.get("started")
    cells, goal, whole = entry.get("cells"), entry.get("goal"), entry.get("whole")
    if not (
        isinstance(key, list)
        and len(key) == 3
        and _ints(key[0])
        and _ints(key[1])
        and (key[2] is None or _ints(key[2]))
        and isinstance(started, int | float)
        and not isinstance(started, bool)
        and isinstance(cells, list)
        and len(cells) == len(COLUMNS)
        and isinstance(goal, str)
        and isinstance(whole, bool)
        and _printable([*cells, goal])
    ):
        return None
    lock = None if key[2] is None else tuple(key[2])
    return _Cached(
        key=(tuple(key[0]), tuple(key[1]), lock),
        started=float(started),
        row=Row(cells=tuple(cells), goal=goal, whole=whole),
    )


def _ints(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 5
        and all(isinstance(n, int) and not isinstance(n, bool) for n in value)
    )


def _printable(texts: Iterable[Any]) -> bool:
    # What ruizn stored was made visible; anything else was not written by it.
    return all(isinstance(text, str) and visible(text) == text for text in texts)


def _write_cache(path: str, root: str, runs: dict[str, _Cached]) -> None:
    """Replace the cache file whole (a reader sees the old one or the new one); a state
    folder that cannot be written only means the next listing reads the logs again."""
    import json

    document = {
        "version": _VERSION,
        "root": os.path.abspath(root),
        "runs": {
            name: {
                "key": [*map(list, c.key[:2]), None if c.key[2] is None else list(c.key[2])],
                "started": c.started,
                "cells": list(c.row.cells),
                "goal": c.row.goal,
                "whole": c.row.whole,
            }
            for name, c in runs.items()
        },
    }
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(temporary, flags, 0o600), "wb") as f:
            f.write(json.dumps(document).encode("ascii"))
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
