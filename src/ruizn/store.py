"""The read side of the run logs, as a library: find a run, load it, list runs.

No network and no SDK. Errors are typed (`RunNotFound`, `LogError`); only the CLI turns
them into exit codes. Run folders are read as hostile input (see effects/runfolder.py):
finding a run never opens a file, and a folder whose files are links, FIFOs or anything but
regular files is listed as unreadable, with the file and the reason, never waited on.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
from attrs import frozen

from ruizn.effects.logfile import (
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
from ruizn.effects.runfolder import RunFolder, UnsafeRunFile
from ruizn.effects.writer import probe_lock
from ruizn.events import Event
from ruizn.state import ExecutionContext, Status, ToolCall

__all__ = [
    "LogError",
    "RunInfo",
    "RunNotFound",
    "default_root",
    "iter_runs",
    "load",
    "new_run_id",
    "replay",
    "resolve_run",
]

LAST = "last"


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
    """RUN may be a path to an events.jsonl, a run folder, a run id under root, or `last`.

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
    raise RunNotFound(f"no run {str(run)!r}: not a log file, a run folder, or a run id in {root}")


def _started_at(folder: Path) -> float:
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
    folders.sort(key=lambda p: (_started_at(p), p.name), reverse=True)
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
    live: bool  # a writer holds the run's lock
    pid: int | None

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
        run's final status; `+torn` when the last line is torn."""
        if self.replayed is None:
            return "unreadable"
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
