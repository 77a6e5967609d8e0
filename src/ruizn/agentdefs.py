"""Subagent definitions: what a parent run may hand a side task to (docs/subagents.md).

A definition is data, in Claude Code's shape (an agent file's front matter and body): a
name the model picks it by, a description that tells the model when to, the child's system
prompt, and optionally the tools it keeps (a subset of its parent's), a model, an effort and
a step limit. Recorded whole in the parent's settings, so a resume (and each child) uses the
definitions the run started with, never files read again. Pure data: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from attrs import field, frozen

from ruizn.defaults import EFFORT_LEVELS, ApprovalMode, Effort

__all__ = [
    "CLAUDE_TOOLS",
    "GENERAL",
    "NAME_PATTERN",
    "PERMISSION_MODES",
    "DefinitionError",
    "PermissionMode",
    "Subagent",
    "child_approval",
    "tool_names",
    "with_general",
]

# A name the model writes in a tool input and a person types: letters, digits, - and _.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


class DefinitionError(ValueError):
    """A definition that cannot be used; the message says which field and why."""


def _name(_: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or NAME_PATTERN.fullmatch(value) is None:
        raise DefinitionError(
            f"a subagent's name must be 1-64 letters, digits, - or _ (not {value!r})"
        )


def _text(_: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise DefinitionError(f"a subagent's {attribute.name} must be non-empty text")


def _tools(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):  # Claude Code's files write "Read, Grep, Glob"
        value = [part.strip() for part in value.split(",")]
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise DefinitionError("a subagent's tools must be a list of tool names")
    return tuple(v for v in value if v)


def _tool_list(value: Any) -> tuple[str, ...]:
    return _tools(value) or ()


def _effort(_: Any, attribute: Any, value: Any) -> None:
    if value is not None and value not in EFFORT_LEVELS:
        raise DefinitionError(f"a subagent's effort must be one of {', '.join(EFFORT_LEVELS)}")


# Claude Code's permission modes, as an agent file's `permissionMode` writes them.
PermissionMode = Literal["default", "acceptEdits", "plan", "bypassPermissions", "dontAsk"]
PERMISSION_MODES: tuple[PermissionMode, ...] = (
    "default",
    "acceptEdits",
    "plan",
    "bypassPermissions",
    "dontAsk",
)
# What a mode makes of the child's approval mode, where it is stricter than any parent's:
# plan (look, change nothing) and dontAsk (nothing not approved beforehand) deny every call
# that needs a decision. The others keep the parent's: a definition never widens it (ruizn
# has no mode that approves edits alone, and bypassPermissions grants nothing).
_STRICTER: dict[str, ApprovalMode] = {"plan": "never", "dontAsk": "never"}


def child_approval(parent: ApprovalMode, mode: PermissionMode | None) -> ApprovalMode:
    """The approval mode of a child whose definition asks `mode`, under a parent's: the
    parent's, or stricter, never wider."""
    return _STRICTER.get(mode or "default", parent)


def _permission(_: Any, attribute: Any, value: Any) -> None:
    if value is not None and value not in PERMISSION_MODES:
        raise DefinitionError(
            f"a subagent's permissionMode must be one of {', '.join(PERMISSION_MODES)}"
            f" (not {value!r})"
        )


def _turns(_: Any, attribute: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise DefinitionError("a subagent's max_turns must be a whole number of at least 1")


@frozen(kw_only=True)
class Subagent:
    """One agent a run may start as a child (`ruizn.Subagent(...)`, an agent file).

    `tools` None: every tool of the parent (`agent` only while depth allows); else the names
    it keeps (a name the parent lacks is left out: never wider than the parent), less
    `disallowed_tools`. Claude Code's tool names (Read, Edit, Grep...) stand for ruizn's.
    `model` None (or "inherit"): the parent's. `max_turns` None: the parent's max_steps.
    `permission_mode` (Claude Code's `permissionMode`): `plan` and `dontAsk` deny the
    child's calls that need a decision; the others (and None) keep the parent's approval
    mode, never wider (`child_approval`). `source` says where it came from (`built-in`,
    `library`, a file's path)."""

    name: str = field(validator=_name)
    description: str = field(validator=_text)
    prompt: str = field(validator=_text)
    tools: tuple[str, ...] | None = field(default=None, converter=_tools)
    disallowed_tools: tuple[str, ...] = field(default=(), converter=_tool_list)
    model: str | None = None
    effort: Effort | None = field(default=None, validator=_effort)
    max_turns: int | None = field(default=None, validator=_turns)
    source: str = "library"
    permission_mode: PermissionMode | None = field(default=None, validator=_permission)


# The agent every run with subagents has: the parent's tools and system prompt (empty here:
# the child takes its parent's), for a side task that needs no specialist.
GENERAL = Subagent(
    name="general",
    description="A general-purpose agent with your tools, for a side task whose answer you"
    " need but whose steps you do not (a search, a review, a question about the code).",
    prompt="(the parent's system prompt)",
    source="built-in",
)


# Claude Code's tool names, as its agent files write them, and the ruizn tools they stand for.
CLAUDE_TOOLS: dict[str, tuple[str, ...]] = {
    "Read": ("read_file",),
    "Write": ("write_file",),
    "Edit": ("edit_file",),
    "MultiEdit": ("edit_file",),
    "Grep": ("grep",),
    "Glob": ("glob",),
    "LS": ("list_dir",),
    "Bash": ("bash", "bash_output", "bash_kill"),
    "BashOutput": ("bash_output",),
    "KillShell": ("bash_kill",),
    "Task": ("agent",),
    "Agent": ("agent",),
}


def tool_names(names: Sequence[str]) -> frozenset[str]:
    """The ruizn tool names a definition's list means (Claude Code's names translated)."""
    return frozenset(n for name in names for n in CLAUDE_TOOLS.get(name, (name,)))


def with_general(definitions: Sequence[Subagent]) -> tuple[Subagent, ...]:
    """The definitions, each name once (the first wins), with `general` unless one is
    defined under that name."""
    seen: dict[str, Subagent] = {}
    for definition in definitions:
        seen.setdefault(definition.name, definition)
    seen.setdefault(GENERAL.name, GENERAL)
    return tuple(seen.values())
