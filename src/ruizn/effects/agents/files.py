"""Subagent definitions read from files in Claude Code's format: a Markdown file whose YAML
front matter gives `name`, `description`, and optionally `tools` (a comma-separated string or
a list), `disallowedTools`, `model`, `effort`, `maxTurns` and `permissionMode`; the body is
the prompt.

    ---
    name: reviewer
    description: Reviews a diff for bugs. Use after a change.
    tools: Read, Grep, Glob
    ---
    You are a careful reviewer...

Read from `--agents DIR`, the user's `~/.config/ruizn/agents/`, and a workspace's
`.ruizn/agents/` and `.claude/agents/`. Reading runs nothing: a workspace's definitions are
data from the workspace, used only once a person accepts them (the CLI asks).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ruizn.agentdefs import DefinitionError, Subagent

__all__ = [
    "WORKSPACE_FOLDERS",
    "AgentFileError",
    "parse_definition",
    "read_folder",
    "user_agents_dir",
    "workspace_agents",
]

# A workspace's folders of definitions, in the order they are read (the first name wins).
WORKSPACE_FOLDERS = (Path(".ruizn") / "agents", Path(".claude") / "agents")
MAX_FILE = 256 * 1024
MAX_FILES = 200


class AgentFileError(ValueError):
    """A definition file that cannot be used; the message is one line naming it."""


def user_agents_dir(environ: Mapping[str, str]) -> Path:
    """`$XDG_CONFIG_HOME/ruizn/agents`, else `~/.config/ruizn/agents` (beside config.toml)."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / "ruizn" / "agents"


def parse_definition(text: str, where: str) -> Subagent:
    """One file's definition; AgentFileError (naming `where`) when it is not one."""
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise AgentFileError(f"{where}: no front matter (the file must begin with ---)")
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        raise AgentFileError(f"{where}: the front matter has no closing ---")
    import yaml  # here: a run with no definition files need not import it

    try:
        # The safe loader builds plain data only: no tag in the file can make an object.
        data = yaml.safe_load("".join(lines[1:end]))
    except yaml.YAMLError as exc:
        raise AgentFileError(
            f"{where}: the front matter is not YAML ({_first_line(exc)})"
        ) from None
    if not isinstance(data, dict):
        raise AgentFileError(f"{where}: the front matter must be a mapping of fields")
    prompt = "".join(lines[end + 1 :]).strip()
    try:
        return Subagent(
            name=_field(data, "name", where),
            description=_field(data, "description", where),
            prompt=prompt,
            tools=_tools(data.get("tools")),
            disallowed_tools=_tools(data.get("disallowedTools")) or (),
            model=_optional(data, "model", where),
            effort=_optional(data, "effort", where),  # type: ignore[arg-type]  # validated
            max_turns=data.get("maxTurns", data.get("max_turns")),
            source=where,
            # Checked, and only ever stricter than the parent's (ruizn.agentdefs).
            permission_mode=_optional(data, "permissionMode", where),  # type: ignore[arg-type]
        )
    except (DefinitionError, TypeError) as exc:
        raise AgentFileError(f"{where}: {exc}") from None


def read_folder(folder: Path, label: str | None = None) -> tuple[Subagent, ...]:
    """The definitions of a folder's `*.md` files, by name; none when it does not exist.
    Links are not followed (a planted link cannot make ruizn read another file)."""
    shown = label or str(folder)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".md"))
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise AgentFileError(f"{shown}: cannot list it ({exc.strerror or exc})") from None
    if len(names) > MAX_FILES:
        raise AgentFileError(f"{shown}: more than {MAX_FILES} definition files")
    return tuple(parse_definition(_read(folder / n, f"{shown}/{n}"), f"{shown}/{n}") for n in names)


def workspace_agents(workspace: Path) -> tuple[Subagent, ...]:
    """A workspace's definitions (`.ruizn/agents/`, then `.claude/agents/`)."""
    found: list[Subagent] = []
    for folder in WORKSPACE_FOLDERS:
        path = workspace / folder
        if os.path.islink(path):
            raise AgentFileError(f"{folder}: a link, not a folder (not followed)")
        found.extend(read_folder(path, str(folder)))
    return tuple(found)


def _read(path: Path, where: str) -> str:
    try:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode):
            raise AgentFileError(f"{where}: not a regular file")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as handle:
            raw = handle.read(MAX_FILE + 1)
    except OSError as exc:
        raise AgentFileError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    if len(raw) > MAX_FILE:
        raise AgentFileError(f"{where}: larger than {MAX_FILE} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise AgentFileError(f"{where}: not UTF-8 text") from None


def _field(data: Mapping[str, Any], name: str, where: str) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value.strip():
        raise AgentFileError(f"{where}: the front matter needs `{name}` (text)")
    return value.strip()


def _optional(data: Mapping[str, Any], name: str, where: str) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise AgentFileError(f"{where}: `{name}` must be text")
    return value.strip() or None


def _tools(value: Any) -> Sequence[str] | str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        return [str(v) for v in value]
    raise DefinitionError("tools must be a comma-separated string or a list of names")


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
