"""Hook configuration in the shape of Claude Code's settings.json `hooks` key:

    {"hooks": {"PreToolUse": [{"matcher": "write_file|edit_file",
                               "hooks": [{"type": "command", "command": "...", "timeout": 10}]}]}}

(the outer {"hooks": ...} may be left out). Read from `--hooks FILE` and from a project's
`.ruizn/hooks.json`; the latter is code from the workspace, so it runs only once a person
accepted it (see the CLI and docs/hooks.md).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from ruizn.bounds import deeper_than
from ruizn.defaults import HOOK_EVENTS
from ruizn.hooks import matcher_problem
from ruizn.settings import ConfigError, HookSpec

PROJECT_HOOKS = Path(".ruizn") / "hooks.json"
MAX_CONFIG = 1 << 20


class HookConfigError(ValueError):
    """A hooks file that cannot be used; the message is one line naming the file."""


def load_file(path: Path, source: str | None = None, *, own: bool) -> tuple[HookSpec, ...]:
    """The hooks a file configures (an empty tuple for no hooks); `own`: the person's own
    file (--hooks), whose hooks may be passed secret variables (`env`). Hooks of events
    ruizn does not run are left out (`unrun_events` names them)."""
    return parse(read_json(path, source), source or str(path), own=own)


def read_json(path: Path, source: str | None = None) -> Any:
    """A hooks file's JSON (a link, a folder or more than MAX_CONFIG bytes is refused)."""
    where = source or str(path)
    try:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode):
            raise HookConfigError(f"{where}: not a regular file")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as handle:
            raw = handle.read(MAX_CONFIG + 1)
    except OSError as exc:
        raise HookConfigError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    if len(raw) > MAX_CONFIG:
        raise HookConfigError(f"{where}: larger than {MAX_CONFIG} bytes")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise HookConfigError(f"{where}: not JSON ({exc})") from None
    return data


def project_hooks(workspace: Path) -> tuple[HookSpec, ...]:
    """A project's `.ruizn/hooks.json` (none: an empty tuple)."""
    return project_file(workspace)[0]


def project_file(workspace: Path) -> tuple[tuple[HookSpec, ...], str | None]:
    """A project's `.ruizn/hooks.json`: its hooks, and the warning `unrun_events` gives."""
    path = workspace / PROJECT_HOOKS
    if not os.path.lexists(path):
        return (), None
    data = read_json(path, str(PROJECT_HOOKS))
    where = str(PROJECT_HOOKS)
    return parse(data, where, own=False), unrun_events(data, where)


def _events(data: Any, where: str) -> dict[str, Any]:
    if isinstance(data, dict) and isinstance(data.get("hooks"), dict):
        data = data["hooks"]
    if not isinstance(data, dict) or deeper_than(data):
        raise HookConfigError(f"{where}: expected an object of hook events")
    return data


def unrun_events(data: Any, where: str) -> str | None:
    """One warning naming the events of a hooks file that ruizn does not run (Claude Code's
    Notification, PermissionRequest...), or None: their hooks are left out, the rest run."""
    unrun = [str(event) for event in _events(data, where) if event not in HOOK_EVENTS]
    if not unrun:
        return None
    return (
        f"warning: {where}: ruizn does not run these hook events, their hooks are left out:"
        f" {', '.join(unrun)} (it runs {', '.join(HOOK_EVENTS)})"
    )


def parse(data: Any, where: str, *, own: bool) -> tuple[HookSpec, ...]:
    """The hooks of the events ruizn runs (`unrun_events` names the others)."""
    specs: list[HookSpec] = []
    for event, groups in _events(data, where).items():
        if event not in HOOK_EVENTS:
            continue
        if not isinstance(groups, list):
            raise HookConfigError(f"{where}: {event} must be a list of matcher groups")
        for group in groups:
            specs.extend(_group(group, event, where, own))
    return tuple(specs)


def _group(group: Any, event: str, where: str, own: bool) -> list[HookSpec]:
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
        raise HookConfigError(f'{where}: each {event} entry needs a "hooks" list')
    matcher = group.get("matcher", "")
    if not isinstance(matcher, str):
        raise HookConfigError(f"{where}: a {event} matcher must be text")
    problem = matcher_problem(matcher)
    if problem is not None:
        raise HookConfigError(f"{where}: {problem}")
    out = []
    for hook in group["hooks"]:
        if not isinstance(hook, dict) or hook.get("type", "command") != "command":
            raise HookConfigError(f'{where}: only hooks of type "command" are supported')
        command = hook.get("command")
        if not isinstance(command, str):
            raise HookConfigError(f'{where}: a {event} hook needs a "command"')
        timeout = hook.get("timeout", 60)
        env = _passed(hook, event, where, own)
        try:
            out.append(
                HookSpec(
                    event=event,  # type: ignore[arg-type]  # checked against HOOK_EVENTS
                    command=command,
                    matcher=matcher,
                    timeout=float(timeout) if isinstance(timeout, int | float) else timeout,
                    source=where,
                    env=env,
                )
            )
        except ConfigError as exc:
            raise HookConfigError(f"{where}: {exc}") from None
    return out


def _passed(hook: dict[str, Any], event: str, where: str, own: bool) -> tuple[str, ...]:
    """The secret variables a hook is passed (`"env": ["GITHUB_TOKEN"]`): only from the
    person's own files. A workspace's file is refused whole, so that a cloned repository can
    never ask for the person's keys without the person seeing the refusal."""
    names = hook.get("env", [])
    if not names:
        return ()
    if not own:
        raise HookConfigError(
            f'{where}: a {event} hook names "env" (secret variables to pass it): only your'
            " own hooks files (--hooks, your config's [hooks]) may pass secrets to a hook"
        )
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise HookConfigError(f'{where}: a {event} hook\'s "env" must be a list of names')
    return tuple(names)
