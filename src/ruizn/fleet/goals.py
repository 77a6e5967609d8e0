"""GOALS.jsonl: one JSON object a line, `goal`, an optional `id`, and any run setting (the
fields of `RunSettings`, by name). Read whole before anything is submitted, so a bad line
submits nothing."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from attrs import asdict, evolve

from ruizn.config import SETTINGS_FIELDS, ConfigError, settings_from
from ruizn.fleet.driver import RunInput

# Filled in when a run starts, never asked for.
_FILLED = frozenset({"tools", "tool_sources"})
OPTIONS = tuple(name for name in SETTINGS_FIELDS if name not in _FILLED)


class GoalsError(ValueError):
    """A goals file that cannot be read; the message names the line."""


# A run id names a folder, a database row and a DBOS workflow, and is printed in every
# listing: letters, digits and . _ - only, so it can be none of "..", a path, an option or a
# control sequence.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
ID_RULE = "a run id (1-128 letters, digits, '.', '_' or '-', the first a letter or digit)"


def _good_id(value: object) -> bool:
    return isinstance(value, str) and RUN_ID.fullmatch(value) is not None


def read_goals(
    path: Path, defaults: RunInput, *, id_prefix: str | None = None, local: bool = True
) -> list[RunInput]:
    """Each line's RunInput, its settings on top of `defaults`'. The run id is the line's
    `id`, or one made from the line's number and content, so the same file gives the same
    ids again (that is how `ruizn batch` resumes). `local`: the runs will run here, so a
    `workspace` is resolved against the file's folder and must exist; for `submit` it is a
    path on the workers."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise GoalsError(f"{path}: {exc.strerror or exc}") from None
    runs: list[RunInput] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        run = _parse(path, number, line, defaults, id_prefix, local=local)
        if run.run_id in seen:
            raise GoalsError(
                f"{path} line {number}: run id {run.run_id!r} is also on line {seen[run.run_id]}"
            )
        seen[run.run_id] = number
        runs.append(run)
    if not runs:
        raise GoalsError(f"{path}: no goals in the file")
    return runs


def _parse(
    path: Path,
    number: int,
    line: bytes,
    defaults: RunInput,
    id_prefix: str | None,
    *,
    local: bool,
) -> RunInput:
    where = f"{path} line {number}"
    try:
        body = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise GoalsError(f"{where}: not JSON ({exc})") from None
    if not isinstance(body, dict):
        raise GoalsError(f"{where}: expected a JSON object, got {type(body).__name__}")
    goal = body.pop("goal", None)
    if not isinstance(goal, str) or not goal.strip():
        raise GoalsError(f"{where}: 'goal' must be a non-empty string")
    run_id = body.pop("id", None)
    if run_id is not None and not _good_id(run_id):
        raise GoalsError(f"{where}: 'id' must be {ID_RULE}, not {json.dumps(run_id)}")
    unknown = sorted(set(body) - set(OPTIONS))
    if unknown:
        known = ", ".join(["goal", "id", *OPTIONS])
        raise GoalsError(f"{where}: unknown option {unknown[0]!r} (known: {known})")
    options: dict[str, Any] = dict(body)
    if "workspace" in options and local and isinstance(options["workspace"], str):
        folder = (path.parent / options["workspace"]).resolve()
        if not folder.is_dir():
            raise GoalsError(f"{where}: workspace {options['workspace']!r} is not a folder")
        options["workspace"] = str(folder)
    try:
        settings = settings_from(**{**asdict(defaults.settings, recurse=False), **options})
    except ConfigError as exc:
        raise GoalsError(f"{where}: {exc}") from None
    if run_id is None:
        digest = hashlib.sha256(line.strip()).hexdigest()[:8]
        run_id = f"{id_prefix or 'goal'}-{number:04d}-{digest}"
    return evolve(defaults, run_id=run_id, goal=goal, settings=settings)
