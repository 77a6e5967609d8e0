"""Reading a project's instructions files: AGENTS.md, or CLAUDE.md where there is none.

They come from the workspace, which arrives with any clone, so they are read as what they
are: text for the model. Nothing in them runs, widens access or skips a decision. Only
regular files inside the workspace are read (a link that leaves it is not followed), at
most PROJECT_INSTRUCTIONS_CAP bytes of each.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from ruizn.defaults import PROJECT_INSTRUCTIONS_CAP
from ruizn.request import instructions_block
from ruizn.settings import Instructions
from ruizn.state import ContentBlock, Message, TextBlock, ToolResultBlock

NAMES = ("AGENTS.md", "CLAUDE.md")
_GIVEN = re.compile(r'<project_instructions path="([^"]+)"')


def read_root(workspace: Path, *, cap: int = PROJECT_INSTRUCTIONS_CAP) -> tuple[Instructions, ...]:
    """The workspace root's instructions file (AGENTS.md first), or nothing."""
    found = _read_in(workspace, workspace, cap)
    return () if found is None else (found,)


def _read_in(folder: Path, workspace: Path, cap: int) -> Instructions | None:
    for name in NAMES:
        path = folder / name
        read = _read(path, workspace, cap)
        if read is not None:
            text, size = read
            relative = path.relative_to(workspace).as_posix()
            return Instructions(path=relative, text=text, size=size)
    return None


def _read(path: Path, workspace: Path, cap: int) -> tuple[str, int] | None:
    """The first `cap` bytes of a regular file inside the workspace, as text, and its size."""
    try:
        info = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None  # a link, a folder, a FIFO: not read
    try:
        fd = os.open(
            path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        )
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        data = handle.read(cap + 1)
        size = os.fstat(handle.fileno()).st_size
    if len(data) > cap:
        data = data[:cap]
    # Cut on a character boundary; bytes that are not UTF-8 are replaced, not refused.
    return data.decode("utf-8", errors="ignore" if len(data) == cap else "replace"), max(
        size, len(data)
    )


class SubfolderInstructions:
    """The nearest instructions file above a path the model touches, below the workspace
    root, given once per run: the runner appends it to that tool call's result (so the log
    holds exactly what the model saw, and a replay rebuilds it)."""

    def __init__(self, workspace: Path, *, cap: int = PROJECT_INSTRUCTIONS_CAP) -> None:
        self._workspace = workspace.resolve()
        self._root = str(self._workspace)
        self._inside = os.path.join(self._root, "")  # with its trailing separator
        self._cap = cap
        self._given: set[str] | None = None

    def given_in(self, messages: Iterable[Message], root: Iterable[Instructions]) -> None:
        """Which files the run has given already: its root's, and those in its results."""
        given = {item.path for item in root}
        for message in messages:
            for block in message.content:
                if isinstance(block, ToolResultBlock):
                    given.update(_GIVEN.findall(_text_of(block.content)))
        self._given = given

    def for_path(self, raw: str) -> str | None:
        """The block to append for a call that touched `raw`, or None (nothing new)."""
        if self._given is None:
            self._given = set()
        # os.path, not pathlib: this runs on every file tool call, and pathlib's objects
        # cost twice the system calls' time. realpath is what Path.resolve() runs.
        root = self._root
        try:
            target = os.path.realpath(os.path.join(root, raw))
        except (OSError, ValueError):
            return None
        if target != root and not target.startswith(self._inside):
            return None
        folder = target if os.path.isdir(target) else os.path.dirname(target)
        while folder != root:
            if not folder.startswith(self._inside):
                return None
            found = _read_in(Path(folder), self._workspace, self._cap)
            if found is not None:
                if found.path in self._given:
                    return None
                self._given.add(found.path)
                return instructions_block(found.path, found.text, found.size)
            folder = os.path.dirname(folder)
        return None


def _text_of(content: str | tuple[ContentBlock, ...] | object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, tuple):
        return "".join(b.text for b in content if isinstance(b, TextBlock))
    return ""
