"""Claude Code's names for ruizn's tools, so a hook written for Claude Code runs as written:
its matcher ("Bash", "Edit|Write") picks ruizn's tool, its script reads the `tool_input`
fields Claude Code sends (`command`, `file_path`, `old_string`...), and the `updatedInput` it
answers with is read back into ruizn's fields. Pure.

Which view a hook gets: Claude Code's, unless its matcher names ruizn's tool and none of
Claude Code's names for it (a `write_file|edit_file` hook keeps reading `path`, as before).
"""

from __future__ import annotations

import posixpath
import re

from attrs import frozen

from ruizn.settings import JsonObject


@frozen(kw_only=True)
class ClaudeTool:
    """Claude Code's names for one of ruizn's tools (the first is the one a catch-all hook
    is told), and its fields renamed (ruizn's -> Claude Code's); other fields keep theirs."""

    names: tuple[str, ...]
    fields: tuple[tuple[str, str], ...] = ()


_FILE = (("path", "file_path"),)
_EDIT = (("path", "file_path"), ("old_text", "old_string"), ("new_text", "new_string"))

# ruizn's tool -> Claude Code's names and fields: one line a tool.
CLAUDE_TOOLS: dict[str, ClaudeTool] = {
    "bash": ClaudeTool(names=("Bash",)),
    "write_file": ClaudeTool(names=("Write",), fields=_FILE),
    "edit_file": ClaudeTool(names=("Edit", "MultiEdit"), fields=_EDIT),
    "read_file": ClaudeTool(names=("Read",), fields=_FILE),
    "glob": ClaudeTool(names=("Glob",)),
    "grep": ClaudeTool(names=("Grep",)),
    "list_dir": ClaudeTool(names=("LS",)),
    "agent": ClaudeTool(names=("Task", "Agent")),
}
_CATCH_ALL = ("", "*")


def _fits(matcher: str, name: str) -> bool:
    if matcher in _CATCH_ALL:
        return True
    try:
        return re.fullmatch(matcher, name) is not None
    except re.error:
        return matcher == name


def names_of(tool: str) -> tuple[str, ...]:
    """Every name a matcher may use for `tool`: ruizn's, then Claude Code's."""
    known = CLAUDE_TOOLS.get(tool)
    return (tool, *known.names) if known is not None else (tool,)


def fits(matcher: str, tool: str) -> bool:
    """Whether a matcher takes `tool` by ruizn's name or one of Claude Code's."""
    return any(_fits(matcher, name) for name in names_of(tool))


def told_name(matcher: str, tool: str) -> str:
    """The tool name a hook with `matcher` is told (its `tool_name`): Claude Code's name it
    matched (the first, for a catch-all), or ruizn's when it names only ruizn's."""
    known = CLAUDE_TOOLS.get(tool)
    if known is None:
        return tool
    claude = [name for name in known.names if _fits(matcher, name)]
    if not claude and _fits(matcher, tool):
        return tool
    return claude[0] if claude else known.names[0]


def claude_input(tool: str, told: str, given: JsonObject, workspace: str) -> JsonObject:
    """A call's input as the hook told `told` reads it (Claude Code's file paths are
    absolute; MultiEdit's edits are a list)."""
    known = CLAUDE_TOOLS.get(tool)
    if known is None or told == tool:
        return given
    renamed = dict(known.fields)
    out: JsonObject = {}
    for key, value in given.items():
        name = renamed.get(key, key)
        absolute = name == "file_path" and isinstance(value, str)
        out[name] = posixpath.normpath(posixpath.join(workspace, value)) if absolute else value
    if told == "MultiEdit":
        edit = {k: out.pop(k) for k in ("old_string", "new_string", "replace_all") if k in out}
        out["edits"] = [edit]
    return out


class UnmappedInput(ValueError):
    """An `updatedInput` that ruizn's tool cannot take (a MultiEdit of several edits)."""


def ruizn_input(tool: str, told: str, updated: JsonObject, workspace: str) -> JsonObject:
    """A hook's `updatedInput`, in Claude Code's fields when it was told Claude Code's
    name, back in ruizn's (a path inside the workspace relative again)."""
    known = CLAUDE_TOOLS.get(tool)
    if known is None or told == tool:
        return updated
    updated = dict(updated)
    if told == "MultiEdit" and "edits" in updated:
        edits = updated.pop("edits")
        if not isinstance(edits, list) or len(edits) != 1 or not isinstance(edits[0], dict):
            raise UnmappedInput(f"{tool} makes one edit: a MultiEdit of several cannot run")
        updated.update(edits[0])
    back = {claude: ours for ours, claude in known.fields}
    out: JsonObject = {}
    for key, value in updated.items():
        inside = key == "file_path" and isinstance(value, str)
        out[back.get(key, key)] = _relative(value, workspace) if inside else value
    return out


def _relative(path: str, workspace: str) -> str:
    if not posixpath.isabs(path):
        return path
    root, path = posixpath.normpath(workspace), posixpath.normpath(path)
    if path == root:
        return "."
    return path.removeprefix(root.rstrip("/") + "/")


def idle_matchers(matchers: tuple[tuple[str, str], ...], tools: tuple[str, ...]) -> tuple[str, ...]:
    """The (event, matcher) pairs of tool hooks that match none of `tools`, as warning
    lines naming the tools the run offers."""
    offered = ", ".join(tools) or "none"
    return tuple(
        f"warning: the {event} hook matcher {matcher!r} matches no tool of this run"
        f" (its tools: {offered})"
        for event, matcher in dict.fromkeys(matchers)
        if not any(fits(matcher, tool) for tool in tools)
    )


__all__ = (
    "CLAUDE_TOOLS",
    "ClaudeTool",
    "UnmappedInput",
    "claude_input",
    "fits",
    "idle_matchers",
    "names_of",
    "ruizn_input",
    "told_name",
)
