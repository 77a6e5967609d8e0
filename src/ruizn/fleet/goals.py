"""GOALS.jsonl: one JSON object a line, `goal`, an optional `id`, and any run setting (the
fields of `RunSettings`, by name: `approval`, `tool_concurrency`, `allow_secret_files`,
`max_retries`, `read_timeout`, `tool_specs`, `mcp_servers`...). Read whole before anything
is submitted, so a bad line submits nothing.

`tool_specs` is a list of `MODULE:ATTR` (as `--tool`); `mcp_servers` a list of servers, each
`"NAME=COMMAND ARGS..."` or `"NAME=https://..."` (as `--mcp`) or the record a run keeps
(`MCPServer.describe()`: name, transport, command and args or url, header and env *names*).
A header's or env variable's value is never in the file: the worker that runs the line takes
it from its environment (`$RUIZN_MCP_HEADER_<NAME>_<KEY>`, `$VAR`)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attrs import asdict, evolve

from ruizn.agentdefs import Subagent, with_general
from ruizn.fleet.driver import RunInput
from ruizn.serde import structured
from ruizn.settings import (
    SETTINGS_FIELDS,
    ConfigError,
    HookSpec,
    Instructions,
    JsonObject,
    settings_from,
)

# Filled in when a run starts, never asked for.
_FILLED = frozenset({"tools", "tool_sources"})
OPTIONS = tuple(name for name in SETTINGS_FIELDS if name not in _FILLED)
# Settings whose items are records: a line gives each as the run records it (its JSON in
# `run_started`), checked here, so a wrong one names its line instead of failing a run.
_RECORDS: dict[str, Any] = {
    "subagents": tuple[Subagent, ...],
    "hooks": tuple[HookSpec, ...],
    "instructions": tuple[Instructions, ...],
}


class GoalsError(ValueError):
    """A goals file that cannot be read; the message names the line."""


# A run id names a folder, a database row and a DBOS workflow, and is printed in every
# listing: letters, digits and . _ - only, so it can be none of "..", a path, an option or a
# control sequence.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
ID_RULE = "a run id (1-128 letters, digits, '.', '_' or '-', the first a letter or digit)"


def _good_id(value: object) -> bool:
    return isinstance(value, str) and RUN_ID.fullmatch(value) is not None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_goals(
    path: Path,
    defaults: RunInput,
    *,
    id_prefix: str | None = None,
    local: bool = True,
    digest: Callable[[bytes], str] = _sha256,
) -> list[RunInput]:
    """Each line's RunInput, its settings on top of `defaults`'. The run id is the line's
    `id`, or one made from the line's number and content, so the same file gives the same
    ids again (that is how `ruizn batch` resumes). `local`: the runs will run here, so a
    `workspace` is resolved against the file's folder and must exist; for `submit` it is a
    path on the workers. `digest` makes the id's tail from the line (`ruizn batch` keys it
    with the operator's fleet key, so nobody else can name the run before it exists)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise GoalsError(f"{path}: {exc.strerror or exc}") from None
    runs: list[RunInput] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        run = _parse(path, number, line, defaults, id_prefix, local=local, digest=digest)
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
    digest: Callable[[bytes], str] = _sha256,
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
    if "batch_max_cost" in body:
        # One line is one run: the whole batch's budget is the command's, never a line's.
        raise GoalsError(
            f"{where}: batch_max_cost is the whole batch's budget: give --batch-max-cost USD"
            " on the command line (a line's max_cost is its run's own budget)"
        )
    unknown = sorted(set(body) - set(OPTIONS))
    if unknown:
        known = ", ".join(["goal", "id", *OPTIONS])
        raise GoalsError(f"{where}: unknown option {unknown[0]!r} (known: {known})")
    options: dict[str, Any] = dict(body)
    for name in ("tool_specs", "mcp_servers", *_RECORDS):
        if name in options:
            options[name] = _listed(where, name, options[name])
    for name, kind in _RECORDS.items():
        if name in options:
            try:
                options[name] = structured(options[name], kind)
            except ValueError as exc:
                raise GoalsError(f"{where}: {name}: {exc}") from None
    if options.get("subagents"):
        options["subagents"] = with_general(options["subagents"])  # as `run --agents` does
    if "mcp_servers" in options:
        servers = [_server(where, entry) for entry in options["mcp_servers"]]
        names = [server["name"] for server in servers]
        if len(set(names)) < len(names):
            twice = next(name for name in names if names.count(name) > 1)
            raise GoalsError(f"{where}: mcp_servers: two servers are named {twice!r}")
        options["mcp_servers"] = servers
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
        run_id = f"{id_prefix or 'goal'}-{number:04d}-{digest(line.strip())[:8]}"
    return evolve(defaults, run_id=run_id, goal=goal, settings=settings)


def _listed(where: str, name: str, value: object) -> list[Any]:
    if not isinstance(value, list):
        raise GoalsError(f"{where}: {name!r} must be a list, not {type(value).__name__}")
    if name == "tool_specs" and not all(isinstance(v, str) and v.strip() for v in value):
        raise GoalsError(f"{where}: 'tool_specs' must list MODULE:ATTR texts")
    return value


def _server(where: str, entry: object) -> JsonObject:
    """One `mcp_servers` entry as the record a run keeps; checked now, so that a bad server
    is an error naming the line, not a run that fails on a worker. Values of headers and
    env variables are the workers' own: only the names are checked here."""
    from ruizn.effects.mcp.config import McpConfigError

    try:
        return _server_record(entry)
    except McpConfigError as exc:
        raise GoalsError(f"{where}: mcp_servers: {exc}") from None


def _server_record(entry: object) -> JsonObject:
    from ruizn.effects.mcp.config import McpConfigError, MCPServer, parse_cli

    if isinstance(entry, str):
        (server,) = parse_cli([entry])
        return server.describe()
    if not isinstance(entry, dict):
        raise McpConfigError(
            f"expected 'NAME=COMMAND', 'NAME=URL' or a server record, not {json.dumps(entry)}"
        )
    headers, env = entry.get("headers", []), entry.get("env", [])
    if not (isinstance(headers, list) and isinstance(env, list)):
        raise McpConfigError("a server's 'headers' and 'env' must list names")
    # Placeholder values: the record keeps names only, and the worker gives the values.
    server = MCPServer.from_record(
        entry, headers={str(n): "" for n in headers}, environ={str(n): "" for n in env}
    )
    return server.describe()


def unkept_budget(runs: list[RunInput], batch_max_cost: float | None) -> str | None:
    """Why a batch budget cannot be kept for these runs (one line), or None: a run whose
    model has no known price would spend without counting, as `--max-cost` refuses for one
    run."""
    if batch_max_cost is None:
        return None
    from ruizn.effects.models.pricing import unpriced

    problems = (unpriced(m, "--batch-max-cost") for m in sorted({r.settings.model for r in runs}))
    return next((problem for problem in problems if problem is not None), None)
