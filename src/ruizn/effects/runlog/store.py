"""Where runs live: the `RunStore` protocol and the file store (a folder of run folders).

A store lists runs, finds one by id (or `last`, or a path), replays it, and opens its one
writer. `ruizn.Agent` builds and resumes runs through a store, and `runs`, `show`, `replay`
and `resume` read through one, so none of them cares whether runs live in files or in a
fleet's database (`ruizn.fleet.dbstore.DbRunStore`). No network and no SDK. Errors are typed
(`RunNotFound`, `LogError`, `RunLocked`); only the CLI turns them into exit codes.

Run folders are read as hostile input (see effects/runlog/folder.py): finding a run opens no
file, and a folder whose files are links, FIFOs or anything but regular files is listed
as unreadable, with the file and the reason, never waited on.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import orjson
from attrs import frozen

from ruizn.effects.runlog.folder import RunFolder, UnsafeRunFile
from ruizn.effects.runlog.reader import (
    LOG_NAME,
    MAX_LINE_BYTES,
    LogError,
    Replayed,
    TornTail,
    iter_events,
    open_log,
    replay_file,
    replay_stream,
)
from ruizn.effects.runlog.sink import EventSink
from ruizn.effects.runlog.writer import EventWriter, RunLocked, probe_lock, truncate_log
from ruizn.events import Event
from ruizn.state import ExecutionContext, Status, ToolCall

__all__ = [
    "FileStore",
    "LogError",
    "RunInfo",
    "RunNotFound",
    "RunRef",
    "RunStore",
    "default_root",
    "info",
    "iter_runs",
    "load",
    "new_run_id",
    "replay",
    "resolve_run",
    "settled",
    "started_at",
]

LAST = "last"
# How many run ids an ambiguous prefix names.
MAX_SHOWN_MATCHES = 10


class RunNotFound(LookupError):
    """No run by that id, folder or path."""


def new_run_id() -> str:
    """`YYYYMMDD-HHMMSS-xxxxxx`: local start time, unique by 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def default_root(workspace: str | Path = ".", log_dir: str | Path | None = None) -> Path:
    """Where `ruizn run --workspace W --log-dir D` puts its runs."""
    if log_dir is not None:
        return Path(log_dir)
    return Path(workspace).resolve() / ".ruizn" / "runs"


def resolve_run(run: str | Path, root: Path) -> Path:
    """RUN may be a path to an events.jsonl, a run folder, a run id under root (or the start
    of one, if only one begins so), or `last`.

    Only names are looked at here (an entry of any kind counts): opening the log is what
    checks it, and says why a planted one is refused instead of calling it missing."""
    candidate = Path(run)
    if candidate.is_dir():
        if os.path.lexists(candidate / LOG_NAME):
            return candidate / LOG_NAME
    elif os.path.lexists(candidate):
        return candidate
    if str(run) == LAST:
        newest = next(iter_run_folders(root), None)
        if newest is None:
            raise RunNotFound(f"no runs in {root}")
        return newest / LOG_NAME
    by_id = root / str(run) / LOG_NAME
    if os.path.lexists(by_id):
        return by_id
    found = prefixed(str(run), root)
    if len(found) == 1:
        return root / found[0] / LOG_NAME
    if found:
        raise ambiguous(str(run), found)
    raise RunNotFound(f"no run {str(run)!r}: not a log file, a run folder, or a run id in {root}")


def ambiguous(start: str, found: list[str]) -> RunNotFound:
    """The error for a run id's start that several runs share, naming them."""
    shown = ", ".join(found[:MAX_SHOWN_MATCHES])
    extra = len(found) - MAX_SHOWN_MATCHES
    more = f" and {extra} more" if extra > 0 else ""
    return RunNotFound(f"{start!r} is the start of {len(found)} run ids: {shown}{more}")


def prefixed(start: str, root: Path) -> list[str]:
    """The ids of the runs under root that begin with `start` (a run id typed in part),
    sorted; none for text that could not be the start of a folder's name."""
    if not start or "/" in start or start.startswith(".") or not root.is_dir():
        return []
    return sorted(
        p.name for p in root.iterdir() if p.name.startswith(start) and os.path.lexists(p / LOG_NAME)
    )


def started_at(folder: Path) -> float:
    """The ts of the run's first line (its start), or -1 if it cannot be read."""
    try:
        with open_log(folder / LOG_NAME) as f:
            first = orjson.loads(f.readline(MAX_LINE_BYTES))
    except (LogError, OSError, ValueError):
        return -1.0
    ts = first.get("ts") if isinstance(first, dict) else None
    return float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else -1.0


def iter_run_folders(root: Path) -> Iterator[Path]:
    """Run folders under root, newest start first (ties: the run id, descending). A folder
    counts if it holds an entry named events.jsonl, of any kind: one that is planted is
    listed, and refused when read."""
    if not root.is_dir():
        return iter(())
    folders = [
        p for p in root.iterdir() if not p.name.startswith(".") and os.path.lexists(p / LOG_NAME)
    ]
    folders.sort(key=lambda p: (started_at(p), p.name), reverse=True)
    return iter(folders)


def replay(
    path: str | Path,
    on_event: Callable[[Event], None] | None = None,
    torn: Callable[[TornTail], None] | None = None,
) -> ExecutionContext:
    """The state a run's log describes (`ruizn replay --json` prints it)."""
    return replay_file(Path(path), on_event=on_event, torn=torn).state


def replay_events(path: str | Path) -> Iterator[Event]:
    """The events of a run's log, in order (a torn last line is left out)."""
    return iter_events(Path(path))


def load(
    path: str | Path,
    on_event: Callable[[Event], None] | None = None,
    torn: Callable[[TornTail], None] | None = None,
) -> Replayed:
    return replay_file(Path(path), on_event=on_event, torn=torn)


@frozen(kw_only=True)
class RunInfo:
    run_id: str
    path: Path
    replayed: Replayed | None
    error: str | None  # why the log could not be read
    live: bool  # a writer holds the run's lock (a fleet's: a worker runs it)
    pid: int | None
    worker: str | None = None  # a fleet's run: the worker that runs (or last ran) it
    stored: str | None = None  # a fleet's run: its status in the fleet's table
    goal: str | None = None  # a fleet's run: the goal it was submitted with

    @property
    def reason(self) -> str | None:
        """The error without the run folder's path (a listing names the run already)."""
        if self.error is None:
            return None
        folder = str(self.path.parent)
        for prefix in (folder + os.sep, folder + ": "):
            if self.error.startswith(prefix):
                return self.error[len(prefix) :]
        return self.error

    @property
    def status(self) -> str:
        """running (a writer holds the lock), interrupted (no lock, no run_finished), or the
        run's final status; `+torn` when the last line is torn; a fleet's run not started
        yet is `queued`."""
        if self.stored == "queued" and self.error is None:
            return "queued"
        if self.replayed is None:
            return self.stored if self.stored and self.error is None else "unreadable"
        state = self.replayed.state
        if state.status is Status.RUNNING:
            word = "running" if self.live else "interrupted"
        else:
            word = state.status.value
        return f"{word}+torn" if self.replayed.torn and not self.live else word

    @property
    def pending_approval(self) -> tuple[ToolCall, ...]:
        """The tool calls that wait for a person's decision (a run stopped
        awaiting_approval, or one cancelled or killed at the prompt)."""
        return () if self.replayed is None else self.replayed.state.awaiting_approval


def info(path: Path, on_event: Callable[[Event], None] | None = None) -> RunInfo:
    """What a run's folder says: its log replayed, whether a writer holds its lock. A folder
    that cannot be read (a bad log, a planted lock) has `error`, one line naming the file."""
    folder = path.parent
    replayed: Replayed | None = None
    error: str | None = None
    live, pid = False, None
    try:
        with RunFolder.open(folder) as opened:
            live, pid = probe_lock(opened)
            with open_log(path, opened) as f:
                replayed = replay_stream(f, path, on_event=on_event)
    except UnsafeRunFile as exc:
        error = str(exc)
    except OSError as exc:
        error = f"{folder}: {exc.strerror or exc}"
    except LogError as exc:
        error = str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}"
    return RunInfo(
        run_id=folder.name, path=path, replayed=replayed, error=error, live=live, pid=pid
    )


def iter_runs(root: Path) -> Iterator[RunInfo]:
    for folder in iter_run_folders(root):
        yield info(folder / LOG_NAME)


@frozen(kw_only=True)
class RunRef:
    """A run a store found: its id and where its log is (a fleet's: the local export)."""

    run_id: str
    path: Path


class RunStore(Protocol):
    """Where runs live. `root` holds the run folders (and the MCP servers' stderr files)."""

    root: Path

    def describe(self) -> str:
        """Where this is, for messages (a folder, or a database URL without its password)."""
        ...

    def find(self, run: str) -> RunRef:
        """The run `run` names (an id, `last`; a file store also takes a path). Raises
        RunNotFound."""
        ...

    def location(self, ref: RunRef) -> str:
        """Where the run's log is, for people."""
        ...

    def runs(self) -> Iterator[RunInfo]:
        """Every run, newest start first. Raises RunNotFound when there is no store at all."""
        ...

    def info(self, ref: RunRef, on_event: Callable[[Event], None] | None = None) -> RunInfo:
        """One run, replayed (an unreadable log is reported, not raised)."""
        ...

    def load(
        self,
        ref: RunRef,
        *,
        on_event: Callable[[Event], None] | None = None,
        torn: Callable[[TornTail], None] | None = None,
    ) -> Replayed:
        """The run's state, replayed from its events. Raises LogError."""
        ...

    def new_writer(self, run_id: str) -> EventSink:
        """The sink of a run that starts now; nothing is created before its first event."""
        ...

    def append_writer(self, ref: RunRef) -> EventSink:
        """The one writer of a run that goes on; it takes the run's lock first (RunLocked),
        so nobody appends while the caller reads the log and decides."""
        ...

    def cut(self, ref: RunRef, offset: int) -> None:
        """Drop the torn tail from `offset` on (the caller holds the writer)."""
        ...


class FileStore:
    """Runs as folders under `root`: `root/RUN_ID/events.jsonl`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def at(cls, workspace: str | Path = ".", log_dir: str | Path | None = None) -> FileStore:
        """Where `ruizn run --workspace W --log-dir D` keeps its runs."""
        return cls(default_root(workspace, log_dir))

    def describe(self) -> str:
        return str(self.root)

    def find(self, run: str) -> RunRef:
        path = resolve_run(run, self.root)
        return RunRef(run_id=path.parent.name, path=path)

    def location(self, ref: RunRef) -> str:
        return str(ref.path)

    def runs(self) -> Iterator[RunInfo]:
        if not self.root.is_dir():
            raise RunNotFound(f"no runs: {self.root} does not exist")
        return iter_runs(self.root)

    def info(self, ref: RunRef, on_event: Callable[[Event], None] | None = None) -> RunInfo:
        return info(ref.path, on_event=on_event)

    def load(
        self,
        ref: RunRef,
        *,
        on_event: Callable[[Event], None] | None = None,
        torn: Callable[[TornTail], None] | None = None,
    ) -> Replayed:
        return replay_file(ref.path, on_event=on_event, torn=torn)

    def new_writer(self, run_id: str) -> EventSink:
        return EventWriter.new(self.root / run_id / LOG_NAME)

    def append_writer(self, ref: RunRef) -> EventSink:
        return EventWriter.append(ref.path)

    def cut(self, ref: RunRef, offset: int) -> None:
        truncate_log(ref.path, offset)


def settled(
    store: RunStore, run: str, on_event: Callable[[Event], None] | None = None
) -> tuple[RunRef, RunInfo]:
    """The run `run` names, read whole, when nobody is writing it: what `fork`, `rerun` and
    `diff` act on (a log still growing has no end to fork, re-drive or compare). Raises
    RunNotFound, RunLocked (a writer holds it) or LogError (it cannot be read)."""
    ref = store.find(run)
    found = store.info(ref, on_event=on_event)
    if found.live:
        raise RunLocked(ref.run_id, found.pid)
    if found.replayed is None:
        raise LogError(found.error or f"{store.location(ref)}: unreadable")
    return ref, found


# In the folder of a run a fleet's worker or batch keeps (the database's export): the
# database's URL, without its password. Only ever a reason to refuse a local resume.
FLEET_MARK = "fleet.db"


def fleet_owner(log: Path) -> str | None:
    """The database a run's folder says owns it (shown inert), or None."""
    import os

    from ruizn.terminal import visible

    try:
        # Not followed if a link, never waited on if a FIFO: the folder may be anyone's.
        fd = os.open(log.parent / FLEET_MARK, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            text = f.read(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None
    return visible(" ".join(text.split())) or "?"
