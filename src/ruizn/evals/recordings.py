"""Where `ruizn eval --recordings DIR` finds each case's recording: the runs stored in DIR,
by goal, oldest first (epoch N re-drives the Nth, going round when there are fewer)."""

from __future__ import annotations

from pathlib import Path

from ruizn.effects.runlog.reader import LOG_NAME, iter_events
from ruizn.effects.runlog.store import LogError
from ruizn.events import RunStarted

__all__ = ["recordings_by_goal"]


def recordings_by_goal(folder: Path) -> dict[str, tuple[Path, ...]]:
    """goal -> the logs under `folder` (a run store's folder) that start with it, oldest
    first (run ids sort by time). A log that cannot be read is left out. Raises
    FileNotFoundError for a folder that is not there."""
    if not folder.is_dir():
        raise FileNotFoundError(f"no recordings folder {folder}")
    found: dict[str, list[tuple[str, Path]]] = {}
    for log in sorted(folder.glob(f"*/{LOG_NAME}")):
        try:
            first = next(iter_events(log), None)
        except (LogError, OSError, ValueError):
            continue
        # A re-drive's own run is not a recording (an eval's runs may be kept in DIR too).
        rerun = (
            isinstance(first, RunStarted)
            and first.parent is not None
            and (first.parent.kind == "rerun")
        )
        if isinstance(first, RunStarted) and not rerun:
            found.setdefault(first.goal, []).append((first.run_id, log))
    return {goal: tuple(path for _, path in sorted(logs)) for goal, logs in found.items()}
