"""Read-only built-ins on the workspace PathJail: `list_dir`, `glob` and `grep`.

Every walk opens each directory relative to its parent's descriptor with `O_NOFOLLOW` (the
PathJail's `open_child_dir`), never follows a symlink while walking (a symlink is listed, not
entered), never enters the log folder, and runs under a `Budget`: a cap on entries visited and
a deadline a little shorter than the tool's timeout. So a huge tree gives a partial answer that
says so, and a walk abandoned by a timeout still stops on its own.

Hidden names (starting with `.`) follow the shell: `*` and `**` do not match them unless the
pattern names them (`.github/*`), and grep's walk skips them unless `path` names them.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from typing import ClassVar, Protocol, cast

import re2  # google-re2: linear-time matching, so no pattern can burn a core

from ruizn.defaults import DEFAULT_TOOL_TIMEOUT
from ruizn.effects.tools.base import BaseTool, BlockingTool, ToolInputError
from ruizn.effects.tools.read import jail_of
from ruizn.effects.tools.workspace import (
    MAX_PARTS,
    MAX_PATH_BYTES,
    Budget,
    PathJail,
    open_child_dir,
    open_child_file,
    read_capped,
    shown,
)
from ruizn.state import JsonObject, ToolResult

MAX_LIST_ENTRIES = 1000
MAX_GLOB_RESULTS = 1000
# Matches kept to be sorted before the first MAX_GLOB_RESULTS are shown.
_GLOB_KEEP = 20_000
MAX_GREP_MATCHES = 300
MAX_GREP_PER_FILE = 20
MAX_GREP_FILE_BYTES = 1024 * 1024
MAX_GREP_LINE_CHARS = 300
MAX_PATTERN_CHARS = 1000
# Entries visited by one call, whatever the tree.
MAX_WALK_STEPS = 200_000
# Directory levels a walk descends: one fd is open per level.
MAX_WALK_DEPTH = 64
_BINARY_PROBE = 8192


def _walk_seconds(timeout: float) -> float:
    """The walk's own deadline: inside the tool's timeout, so a partial answer comes back."""
    return max(0.1, timeout * 0.8)


class _Match(Protocol):
    def start(self) -> int: ...
    def end(self) -> int: ...


class _Regex(Protocol):
    def search(self, text: bytes, pos: int = 0) -> _Match | None: ...


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _wild(part: str) -> bool:
    return any(char in part for char in "*?[")


def _matches(name: str, pattern: str) -> bool:
    if _is_hidden(name) and not pattern.startswith("."):
        return False
    return fnmatch.fnmatchcase(name, pattern)


def _kind(info: os.stat_result) -> str:
    mode = info.st_mode
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device"


def _join(*parts: str) -> str:
    return "/".join(part for part in parts if part not in ("", "."))


class _SandboxTool(BlockingTool):
    read_only = True

    def __init__(
        self, workspace: PathJail | os.PathLike[str] | str, *, timeout: float = DEFAULT_TOOL_TIMEOUT
    ) -> None:
        super().__init__(timeout=timeout)
        self.jail = jail_of(workspace)

    def _budget(self) -> Budget:
        return Budget(seconds=_walk_seconds(self.timeout), max_steps=MAX_WALK_STEPS)


class ListDirTool(_SandboxTool):
    name = "list_dir"
    description = (
        "List a folder of the workspace: one line per entry with its type and size, sorted by"
        f" name, at most {MAX_LIST_ENTRIES} entries. `path` is relative to the workspace root."
    )
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {
            "path": {
                "type": "string",
                "description": "Folder relative to the workspace; default '.'.",
            }
        },
        "additionalProperties": False,
    }

    def run(self, input: JsonObject) -> ToolResult | str:
        given = input.get("path", ".")
        fd, rel = self.jail.resolve_dir(given)
        budget = self._budget()
        try:
            lines: list[str] = []
            left_out = 0
            for name, info in self.jail.children(fd, rel, budget):
                if len(lines) >= MAX_LIST_ENTRIES:
                    left_out += 1
                    continue
                lines.append(self._line(fd, name, info))
        finally:
            os.close(fd)
        shown_dir = shown(given)
        head = f"{shown_dir}: {len(lines) + left_out} entries" if lines else f"{shown_dir}: empty"
        if left_out:
            lines.append(f"[{left_out} more entries not shown]")
        if budget.exhausted:
            lines.append("[listing cut short: the folder is too large to list in full]")
        return "\n".join([head, *lines])

    def _line(self, dir_fd: int, name: str, info: os.stat_result) -> str:
        kind = _kind(info)
        size = f"{info.st_size:,}" if kind == "file" else "-"
        label = shown(name) + ("/" if kind == "dir" else "")
        if kind == "symlink":
            label += _link_note(dir_fd, name)
        marks = []
        if _is_hidden(name):
            marks.append("hidden")
        if kind == "file" and self.jail.is_secret(name):
            marks.append("secret: not readable")
        note = f"  ({', '.join(marks)})" if marks else ""
        return f"{kind:<7} {size:>13}  {label}{note}"


def _link_note(dir_fd: int, name: str) -> str:
    try:
        target = os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return ""
    # An absolute target names a place on the user's machine; the model needs no more.
    return " -> (absolute path)" if target.startswith("/") else f" -> {shown(target)}"


def _split_pattern(pattern: object, what: str) -> list[str]:
    if not isinstance(pattern, str) or not pattern:
        raise ToolInputError(f"{what} must be a non-empty string")
    if len(pattern) > MAX_PATH_BYTES or len(pattern.encode("utf-8", "replace")) > MAX_PATH_BYTES:
        raise ToolInputError(f"{what} is too long (the limit is {MAX_PATH_BYTES} bytes)")
    if "\0" in pattern:
        raise ToolInputError(f"{what} must not contain a NUL byte")
    if pattern.startswith("/"):
        raise PermissionError(f"absolute paths are not allowed in {what}; make it relative")
    parts = [part for part in pattern.split("/") if part not in ("", ".")]
    if len(parts) > MAX_PARTS:
        raise ToolInputError(f"{what} is too deep (the limit is {MAX_PARTS} parts)")
    return parts


class GlobTool(_SandboxTool):
    name = "glob"
    description = (
        "Find workspace paths matching a glob pattern, e.g. 'src/**/*.py'. '*' matches within"
        " one name, '**' any number of folders; hidden names only when the pattern names them."
        f" Sorted, at most {MAX_GLOB_RESULTS} paths; folders end with '/'."
    )
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "Glob relative to the workspace."}
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }

    def run(self, input: JsonObject) -> ToolResult | str:
        pattern = input["pattern"]
        parts = _split_pattern(pattern, "pattern")
        wild_at = next((i for i, part in enumerate(parts) if _wild(part)), len(parts))
        if ".." in parts[wild_at:]:
            raise ToolInputError("'..' may appear only before the first wildcard of a pattern")
        prefix, rest = "/".join(parts[:wild_at]) or ".", parts[wild_at:]
        if not rest:  # no wildcard: the path exists or not
            return self._exact(prefix)
        fd, rel = self.jail.resolve_dir(prefix)
        budget = self._budget()
        found: set[str] = set()
        try:
            self._match(
                fd,
                rel,
                "" if prefix == "." else prefix,
                tuple(rest),
                depth=0,
                found=found,
                budget=budget,
            )
        finally:
            os.close(fd)
        paths = sorted(found)
        lines = [shown(path) for path in paths[:MAX_GLOB_RESULTS]]
        if not lines:
            lines.append(f"no paths match {shown(pattern)}")
        if len(paths) > MAX_GLOB_RESULTS:
            more = len(paths) - MAX_GLOB_RESULTS
            lines.append(f"[{more}{'+' if len(found) >= _GLOB_KEEP else ''} more not shown]")
        if budget.exhausted:
            lines.append("[search cut short: too many entries; narrow the pattern]")
        return "\n".join(lines)

    def _exact(self, path: str) -> str:
        try:
            entry = self.jail.resolve_any(path)
        except FileNotFoundError:
            return f"no paths match {shown(path)}"
        os.close(entry.dir_fd)
        return shown(path) + ("/" if entry.info is None else "")

    def _match(
        self,
        dir_fd: int,
        rel: tuple[str, ...],
        shown_at: str,
        pats: tuple[str, ...],
        *,
        depth: int,
        found: set[str],
        budget: Budget,
    ) -> None:
        if not pats or budget.exhausted or len(found) >= _GLOB_KEEP:
            return
        head, rest = pats[0], pats[1:]
        if head == "**" and rest:  # zero folders: the rest matches right here
            self._match(dir_fd, rel, shown_at, rest, depth=depth, found=found, budget=budget)
        for name, info in self.jail.children(dir_fd, rel, budget):
            if len(found) >= _GLOB_KEEP:
                return
            is_dir = stat.S_ISDIR(info.st_mode)  # lstat: a symlink is never a dir here
            path = _join(shown_at, name)
            if head == "**":
                if _is_hidden(name):
                    continue
                if not rest:
                    found.add(path + ("/" if is_dir else ""))
                descend: tuple[str, ...] | None = pats if is_dir else None
            elif _matches(name, head):
                if not rest:
                    found.add(path + ("/" if is_dir else ""))
                    continue
                descend = rest if is_dir else None
            else:
                continue
            if descend is None or depth >= MAX_WALK_DEPTH:
                continue
            try:
                child = open_child_dir(dir_fd, name, info, path)
            except OSError:  # swapped or unreadable meanwhile: skipped, never followed
                continue
            try:
                self._match(
                    child,
                    (*rel, name),
                    path,
                    descend,
                    depth=depth + 1,
                    found=found,
                    budget=budget,
                )
            finally:
                os.close(child)


class GrepTool(_SandboxTool):
    name = "grep"
    description = (
        "Search text files of the workspace for a regular expression (RE2 syntax: no"
        " backreferences or look-around). Prints file:line:text. `path` is a file or folder"
        " (default '.'); `glob` filters file names (e.g. '*.py', or 'src/**/*.py' relative to"
        f" path). Binary and hidden files are skipped; at most {MAX_GREP_PER_FILE} matches per"
        f" file and {MAX_GREP_MATCHES} in all."
    )
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "description": "RE2 regular expression."},
            "path": {"type": "string", "description": "File or folder; default '.'."},
            "glob": {"type": "string", "description": "Only files whose name matches."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }

    def run(self, input: JsonObject) -> ToolResult | str:
        regex = _compile(input["pattern"])
        given = input.get("path", ".")
        name_filter = input.get("glob")
        filter_parts = _split_pattern(name_filter, "glob") if name_filter is not None else None
        entry = self.jail.resolve_any(given)
        search = _Search(regex, self.jail, self._budget(), filter_parts)
        try:
            if entry.info is None:  # a folder
                base = "" if entry.rel == () and given in (".", "./") else given.rstrip("/")
                search.folder(entry.dir_fd, entry.rel, base, (), 0)
            else:
                if not stat.S_ISREG(entry.info.st_mode):
                    raise ToolInputError(f"{shown(given)} is not a regular file or folder")
                search.file(entry.dir_fd, entry.name, entry.info, given, strict=True)
        finally:
            os.close(entry.dir_fd)
        return search.report()


def _compile(pattern: object) -> _Regex:
    if not isinstance(pattern, str) or not pattern:
        raise ToolInputError("pattern must be a non-empty string")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolInputError(f"pattern is too long (the limit is {MAX_PATTERN_CHARS} chars)")
    options = re2.Options()
    options.log_errors = False  # RE2 would print parse errors on our stderr
    try:
        # Multi-line, on bytes: see _Search._scan. A bad pattern fails the same either way.
        return cast(_Regex, re2.compile(("(?m)" + pattern).encode("utf-8"), options))
    except re2.error as exc:
        why = exc.args[0] if exc.args else "invalid"
        text = why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why)
        raise ToolInputError(
            f"bad pattern: {text} (RE2 syntax: no backreferences or look-around)"
        ) from None
    except (TypeError, ValueError) as exc:  # a lone surrogate, say
        raise ToolInputError(f"bad pattern: {exc}") from None


def _glob_match(pats: tuple[str, ...], path: tuple[str, ...]) -> bool:
    """Whether a relative path matches glob parts (`**` = any number of folders)."""
    memo: dict[tuple[int, int], bool] = {}

    def at(i: int, j: int) -> bool:
        key = (i, j)
        if key not in memo:
            if i == len(pats):
                memo[key] = j == len(path)
            elif pats[i] == "**":
                memo[key] = at(i + 1, j) or (
                    j < len(path) and not _is_hidden(path[j]) and at(i, j + 1)
                )
            else:
                memo[key] = j < len(path) and _matches(path[j], pats[i]) and at(i + 1, j + 1)
        return memo[key]

    return at(0, 0)


class _Search:
    def __init__(
        self,
        regex: _Regex,
        sandbox: PathJail,
        budget: Budget,
        name_filter: list[str] | None,
    ) -> None:
        self.regex = regex
        self.jail = sandbox
        self.budget = budget
        self.filter = tuple(name_filter) if name_filter is not None else None
        self.lines: list[str] = []
        self.more_in: list[str] = []  # files with matches past the per-file cap
        self.stopped = False  # the total cap was reached
        self.binary = 0
        self.secret = 0
        self.cut_files = 0
        self.files = 0

    def folder(
        self, dir_fd: int, rel: tuple[str, ...], base: str, sub: tuple[str, ...], depth: int
    ) -> None:
        for name, info in self.jail.children(dir_fd, rel, self.budget):
            if self.budget.exhausted:
                return
            if _is_hidden(name):
                continue
            path = _join(base, *sub, name)
            if stat.S_ISDIR(info.st_mode):
                if depth >= MAX_WALK_DEPTH:
                    continue
                try:
                    child = open_child_dir(dir_fd, name, info, path)
                except OSError:  # swapped or unreadable meanwhile: skipped, never followed
                    continue
                try:
                    self.folder(child, (*rel, name), base, (*sub, name), depth + 1)
                finally:
                    os.close(child)
            elif stat.S_ISREG(info.st_mode) and self._wanted((*sub, name)):
                self.file(dir_fd, name, info, path, strict=False)

    def _wanted(self, sub: tuple[str, ...]) -> bool:
        if self.filter is None:
            return True
        if len(self.filter) == 1 and self.filter[0] != "**":  # '*.py': the name alone
            return _matches(sub[-1], self.filter[0])
        return _glob_match(self.filter, sub)

    def file(
        self, dir_fd: int, name: str, info: os.stat_result, path: str, *, strict: bool
    ) -> None:
        if self.jail.is_secret(name):  # (a file the model named was refused already)
            self.secret += 1
            return
        try:
            fd, _ = open_child_file(dir_fd, name, info, shown(path))
        except OSError:
            if strict:
                raise
            return  # swapped or unreadable meanwhile: skipped
        try:
            data = read_capped(fd, MAX_GREP_FILE_BYTES + 1)
        finally:
            os.close(fd)
        self.files += 1
        if b"\0" in data[:_BINARY_PROBE]:
            self.binary += 1
            return
        if len(data) > MAX_GREP_FILE_BYTES:
            self.cut_files += 1
            data = data[:MAX_GREP_FILE_BYTES]
        self._scan(data, shown(path))

    def _scan(self, data: bytes, path: str) -> None:
        """Report the lines of `data` the pattern matches, as a line-by-line search would.

        One search over the whole buffer finds the next line that can match, rather than one
        call per line: any match within a line is also a match in the buffer (the pattern is
        multi-line, `.` never crosses a newline), so no line before the buffer's next match can
        match alone. A buffer match that spans lines is checked again on its first line alone.
        """
        pos = line_no = 0
        counted_to = 0
        here = 0
        while pos < len(data):
            if self.budget.exhausted or not self.budget.tick(0):
                return
            found = self.regex.search(data, pos)
            # (At the very end, after a final newline, there is no line: `^$` matches there.)
            if found is None or (found.start() == len(data) and data.endswith(b"\n")):
                return
            start = data.rfind(b"\n", 0, found.start()) + 1
            end = data.find(b"\n", found.start())
            end = len(data) if end < 0 else end
            line = data[start:end]
            pos = end + 1
            if found.end() > end and self.regex.search(line) is None:
                continue
            line_no += data.count(b"\n", counted_to, start) + 1
            counted_to = pos
            if here >= MAX_GREP_PER_FILE:
                self.more_in.append(path)
                return
            if len(self.lines) >= MAX_GREP_MATCHES:
                self.stopped = True
                return
            here += 1
            text = line.removesuffix(b"\r").decode("utf-8", errors="replace")
            self.lines.append(f"{path}:{line_no}:{_clip_line(text)}")

    def report(self) -> str:
        lines = list(self.lines) or ["no matches"]
        if self.more_in:
            files = ", ".join(self.more_in[:5]) + (" ..." if len(self.more_in) > 5 else "")
            lines.append(
                f"[more matches not shown in {len(self.more_in)} files (at most"
                f" {MAX_GREP_PER_FILE} per file): {files}]"
            )
        if self.stopped:
            lines.append(
                f"[search stopped at {MAX_GREP_MATCHES} matching lines; narrow the pattern,"
                " path or glob]"
            )
        skipped = []
        if self.binary:
            skipped.append(f"{self.binary} binary")
        if self.secret:
            skipped.append(f"{self.secret} secret")
        if skipped:
            lines.append(f"[skipped: {', '.join(skipped)} files]")
        if self.cut_files:
            mib = MAX_GREP_FILE_BYTES // (1024 * 1024)
            lines.append(f"[{self.cut_files} files searched in their first {mib} MiB only]")
        if self.budget.exhausted:
            lines.append("[search cut short: too much to search; narrow the path or glob]")
        return "\n".join(lines)


def _clip_line(line: str) -> str:
    if len(line) <= MAX_GREP_LINE_CHARS:
        return line
    return line[:MAX_GREP_LINE_CHARS] + " ..."


def builtin_read_only_tools(
    sandbox: PathJail, *, timeout: float = DEFAULT_TOOL_TIMEOUT
) -> list[BaseTool]:
    """list_dir, glob and grep on one shared sandbox (read_file is built by the caller)."""
    return [
        ListDirTool(sandbox, timeout=timeout),
        GlobTool(sandbox, timeout=timeout),
        GrepTool(sandbox, timeout=timeout),
    ]
