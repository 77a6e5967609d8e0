"""GOALS.jsonl: one JSON object a line, `goal` and any run option. Read whole before anything
is submitted, so a bad line submits nothing."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from attrs import evolve

from ruizn.fleet.driver import RunSpec


class GoalsError(ValueError):
    """A goals file that cannot be read; the message names the line."""


# A run id names a folder, a database row and a DBOS workflow, and is printed in every
# listing: letters, digits and . _ - only, so it can be none of "..", a path, an option or a
# control sequence.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

# Option name -> (type, check, what it must be).
_OPTIONS: dict[str, tuple[type[Any], Any, str]] = {
    "id": (
        str,
        lambda v: RUN_ID.fullmatch(v) is not None,
        "a run id (1-128 letters, digits, '.', '_' or '-', the first a letter or digit)",
    ),
    "model": (str, lambda v: bool(v.strip()), "a model id"),
    "max_steps": (int, lambda v: v >= 1, "an integer >= 1"),
    "max_tokens": (int, lambda v: v >= 1, "an integer >= 1"),
    "system": (str, lambda v: True, "a string"),
    "workspace": (str, lambda v: bool(v.strip()), "a folder"),
}


def read_goals(
    path: Path, defaults: RunSpec, *, id_prefix: str | None = None, local: bool = True
) -> list[RunSpec]:
    """Each line's RunSpec, on top of `defaults`. The run id is the line's `id`, or one made
        from the line's number and content, so the same file gives the same ids again (that is
        how `ruizn batch` resumes). `local`: the runs will run here, so a `workspace` is resolved
    against the file's folder and must exist; for `submit` it is a path on the workers."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise GoalsError(f"{path}: {exc.strerror or exc}") from None
    specs: list[RunSpec] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        spec = _parse(path, number, line, defaults, id_prefix, local=local)
        if spec.run_id in seen:
            raise GoalsError(
                f"{path} line {number}: run id {spec.run_id!r} is also on line {seen[spec.run_id]}"
            )
        seen[spec.run_id] = number
        specs.append(spec)
    if not specs:
        raise GoalsError(f"{path}: no goals in the file")
    return specs


def _parse(
    path: Path, number: int, line: bytes, defaults: RunSpec, id_prefix: str | None, *, local: bool
) -> RunSpec:
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
    options: dict[str, Any] = {}
    for key, value in body.items():
        if key not in _OPTIONS:
            known = ", ".join(["goal", *_OPTIONS])
            raise GoalsError(f"{where}: unknown option {key!r} (known: {known})")
        kind, check, what = _OPTIONS[key]
        if type(value) is not kind or not check(value):
            raise GoalsError(f"{where}: {key!r} must be {what}, not {json.dumps(value)}")
        options[key] = value
    run_id = options.pop("id", None)
    if run_id is None:
        digest = hashlib.sha256(line.strip()).hexdigest()[:8]
        run_id = f"{id_prefix or 'goal'}-{number:04d}-{digest}"
    if "workspace" in options and local:
        folder = (path.parent / options["workspace"]).resolve()
        if not folder.is_dir():
            raise GoalsError(f"{where}: workspace {options['workspace']!r} is not a folder")
        options["workspace"] = str(folder)
    return evolve(defaults, run_id=run_id, goal=goal, **options)


def spec_to_json(spec: RunSpec) -> dict[str, Any]:
    return {
        "run_id": spec.run_id,
        "goal": spec.goal,
        "model": spec.model,
        "max_steps": spec.max_steps,
        "max_tokens": spec.max_tokens,
        "system": spec.system,
        "workspace": spec.workspace,
        "read_timeout": spec.read_timeout,
        "max_retries": spec.max_retries,
    }


def spec_from_json(data: dict[str, Any]) -> RunSpec:
    return RunSpec(**data)
