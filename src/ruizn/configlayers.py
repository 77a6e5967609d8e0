"""Run options from config files, and which of them win: the rules, pure (the files are read
by `ruizn.effects.userconfig`).

Precedence, lowest first: ruizn's defaults (RunSettings), the user's config file
(`~/.config/ruizn/config.toml`), its `[profiles.NAME]` table when `--profile NAME` is given,
the workspace's project file (`.ruizn/config.toml`), then the command line (and RUIZN_MODEL).

A project file lives in the workspace: whoever wrote the folder wrote it. It may set only
what grants nothing: the model, limits, the system prompt, thinking and effort, timeouts.
Anything that runs code or widens access (MCP servers, tool modules, plug-ins, approval
`always`, secret files, the workspace, hooks, the shell) is refused there, one line each, and
not used. And it only tightens: a limit, effort, thinking or timeout above what the person's
own settings give (their file, profile, command line, or ruizn's default), or another model
than one the person chose, is a raise (`project_raises`), used only if the person says yes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from attrs import frozen

from ruizn.defaults import EFFORT_LEVELS

# What a project file may set: nothing here runs code or reaches further than the run would.
GRANTS_NOTHING = frozenset(
    {
        "model",
        "max_steps",
        "max_tokens",
        "max_cost",
        "max_context",
        "compact_at",
        "compact_instructions",
        "system",
        "read_timeout",
        "max_retries",
        "tool_timeout",
        "tool_concurrency",
        "thinking",
        "show_thinking",
        "effort",
        "shell_timeout",
        "output_retries",
        "no_project_instructions",
    }
)
# The run options a config file may set: the names of `ruizn run`'s options (underscores;
# a dash is read as an underscore). The user's own file may also grant: approval, secret
# files, tool modules, MCP servers, plug-ins, the shell and what it may do, an output
# schema file, the MCP servers' environment (every option a goals line takes; hooks are
# its `[hooks]` table, MCP header values never: they are secrets).
OPTIONS = GRANTS_NOTHING | frozenset(
    {
        "approval",
        "allow_secret_files",
        "tools",
        "mcp",
        "mcp_envs",
        "no_plugins",
        "shell",
        "sandbox",
        "shell_network",
        "shell_allow_read",
        "shell_allow_domains",
        "allow_commands",
        "output_schema",
    }
)
# A key named as the option is typed (`allow-command = [...]`) reads as its list's name.
_ALIASES = {
    "allow_command": "allow_commands",
    "shell_allow_domain": "shell_allow_domains",
    "mcp_env": "mcp_envs",
    "tool": "tools",
}
# Known keys that are never taken from a project file, each with what it would grant.
_GRANTS = {
    "tools": "loads and runs tool code",
    "mcp": "starts MCP servers",
    "no_plugins": "decides whether plug-in code loads",
    "allow_secret_files": "lets the tools read secret files",
    "workspace": "moves the workspace",
    "log_dir": "moves the run logs",
    "hooks": "runs commands",
    "mcp_headers": "sends credentials",
    "mcp_envs": "hands environment values to MCP servers",
    "shell": "runs shell commands",
    "sandbox": "decides how shell commands are confined",
    "shell_network": "gives shell commands the network",
    "shell_allow_read": "lets shell commands read outside the workspace",
    "shell_allow_domains": "lets shell commands reach these hosts",
    "allow_commands": "approves shell commands",
    "output_schema": "reads a file outside the workspace",
}
DEFAULT_SOURCE = "default"
COMMAND_LINE = "command line"


class ConfigFileError(ValueError):
    """A config file that cannot be used; the message is one line naming the file."""


@frozen(kw_only=True)
class Layer:
    """One file's options (or a profile's), as read: `where` names it for `ruizn config`."""

    where: str
    values: dict[str, Any]


def normalised(values: dict[str, Any], where: str, *, refusable: bool = False) -> dict[str, Any]:
    """Keys with dashes read as underscores; an unknown key is a ConfigFileError (in a
    project file, a key that would grant something is known, to be refused by name)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = key.replace("-", "_")
        name = _ALIASES.get(name, name)
        if name not in OPTIONS and not (refusable and name in _GRANTS):
            known = ", ".join(sorted(OPTIONS))
            raise ConfigFileError(f"{where}: unknown option {key!r} (known: {known})")
        out[name] = value
    return out


def user_layers(document: dict[str, Any], where: str, profile: str | None) -> tuple[Layer, ...]:
    """The user's file: its top-level options, then the chosen profile's over them. (Its
    `[hooks]` table is not an option: the CLI reads it as hooks, see docs/hooks.md.)"""
    top = {k: v for k, v in document.items() if k not in ("profiles", "hooks")}
    layers = [Layer(where=where, values=normalised(top, where))]
    profiles = document.get("profiles", {})
    if not isinstance(profiles, dict):
        raise ConfigFileError(f"{where}: [profiles] must be a table of tables")
    if profile is not None:
        chosen = profiles.get(profile)
        if not isinstance(chosen, dict):
            names = ", ".join(sorted(profiles)) or "none"
            raise ConfigFileError(f"{where}: no profile {profile!r} (profiles: {names})")
        label = f"{where} [profiles.{profile}]"
        layers.append(Layer(where=label, values=normalised(chosen, label)))
    return tuple(layers)


def project_layer(document: dict[str, Any], where: str) -> tuple[Layer, tuple[str, ...]]:
    """A workspace's project file: the options it may set, and a line for each it may not."""
    if "profiles" in document:
        document = {k: v for k, v in document.items() if k != "profiles"}
        refused = [f"{where}: profiles are read only from your own config file"]
    else:
        refused = []
    values = normalised(document, where, refusable=True)
    kept: dict[str, Any] = {}
    for name, value in values.items():
        if name in GRANTS_NOTHING:
            kept[name] = value
        elif name == "approval" and value in ("ask", "never"):
            kept[name] = value  # asking, or denying, grants nothing
        else:
            what = "approves every tool call" if name == "approval" else _GRANTS[name]
            refused.append(
                f"refused: {where} sets {name} ({what}): a file in the workspace may not;"
                " set it on the command line or in your own config file"
            )
    return Layer(where=where, values=kept), tuple(refused)


def effective(
    layers: tuple[Layer, ...], command_line: dict[str, Any], defaults: dict[str, Any]
) -> dict[str, tuple[Any, str]]:
    """Each option's value and where it came from: the command line, else the last layer
    that sets it, else the default."""
    out = {name: (value, DEFAULT_SOURCE) for name, value in defaults.items()}
    for layer in layers:
        for name, value in layer.values.items():
            out[name] = (value, layer.where)
    for name, value in command_line.items():
        out[name] = (value, COMMAND_LINE)
    return out


# The API's effort when none is asked for: a project's `high` raises nothing over no effort.
_DEFAULT_EFFORT = "high"


def _unbounded(value: Any) -> float:
    """None (and 0 for max_context: off) means no limit: above every number."""
    return math.inf if value is None else float(value)


def _context(value: Any) -> float:
    return math.inf if value in (None, 0) else float(value)


def _effort(value: Any) -> float:
    return float(EFFORT_LEVELS.index(value or _DEFAULT_EFFORT))


def _thinking(value: Any) -> float:
    return 0.0 if value == "off" else 1.0  # None: the model's own (it may think)


# The options a project file may only tighten, each with its rank: a higher rank lets the
# run do, spend or wait more.
TIGHTEN_ONLY: Mapping[str, Callable[[Any], float]] = {
    "max_steps": _unbounded,
    "max_tokens": _unbounded,
    "max_cost": _unbounded,
    "max_context": _context,
    "read_timeout": _unbounded,
    "max_retries": _unbounded,
    "tool_timeout": _unbounded,
    "tool_concurrency": _unbounded,
    "effort": _effort,
    "thinking": _thinking,
}


@frozen(kw_only=True)
class Raise:
    """A project file's value above the person's own (`person_source`: where theirs is from)."""

    name: str
    project: Any
    person: Any
    person_source: str


def project_raises(
    project: Mapping[str, Any], person: Mapping[str, tuple[Any, str]]
) -> tuple[Raise, ...]:
    """The project file's values that would loosen the person's: a limit ranked above
    theirs, or a model other than the one they chose (a model left at the default may be
    named by the project: what it spends stays under the limits it cannot raise)."""
    out = []
    for name, value in project.items():
        if name not in person:
            continue
        theirs, source = person[name]
        if source == COMMAND_LINE:
            continue  # the command line wins anyway
        rank = TIGHTEN_ONLY.get(name)
        if rank is not None:
            looser = rank(value) > rank(theirs)
        else:
            looser = name == "model" and source != DEFAULT_SOURCE and value != theirs
        if looser:
            out.append(Raise(name=name, project=value, person=theirs, person_source=source))
    return tuple(out)
