"""Finding the tools of a run: built-ins, `--tool MODULE:ATTR` specs and installed plug-ins.

Each tool comes with a `ToolSource` saying where it came from. `RunStarted` records those,
and `load_sources` loads the same tools again for `resume`, failing with a one-line
`ToolUnavailable` that names the tool when one is gone.

A spec or a plug-in's entry point may name any of: a function made a tool with `@tool`, a
plain function (made a tool here), a `BaseTool` instance, a `BaseTool` class (built with
no arguments), or a list or tuple of these.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import jsonschema
import jsonschema.exceptions
from attrs import frozen

from ruizn.defaults import DEFAULT_TOOL_TIMEOUT
from ruizn.effects.tools.base import BaseTool, ToolRegistry
from ruizn.effects.tools.read import ReadFileTool
from ruizn.effects.tools.search import GlobTool, GrepTool, ListDirTool
from ruizn.effects.tools.workspace import PathJail
from ruizn.effects.tools.write import EditFileTool, WriteFileTool
from ruizn.terminal import visible
from ruizn.toolsource import SourceKind, ToolSource

ENTRY_POINT_GROUP = "ruizn.tools"

# The built-in tools, all sandboxed. Each is made for a workspace (a PathJail, which also
# knows the log folder to hide and whether secret files may be read). The read-only ones never
# need approval; write_file and edit_file change the workspace, so each call needs approval
# (see ruizn.decide: asked at a terminal, or by --approval always/never).
BUILTINS: dict[str, Callable[..., BaseTool]] = {
    "read_file": ReadFileTool,
    "list_dir": ListDirTool,
    "glob": GlobTool,
    "grep": GrepTool,
    "write_file": WriteFileTool,
    "edit_file": EditFileTool,
}
Workspace = PathJail | Path


def inert(text: str) -> str:
    """A message about a plug-in as one line a terminal cannot act on. Its exception text,
    class and package names are the plug-in's own: a broken (or hostile) one printed
    window-title, clear-screen and clipboard sequences through the warning."""
    return visible(" ".join(text.split()))


class ToolLoadError(Exception):
    """A tool could not be loaded. The message is one inert line, fit for
    `ruizn: error: ...` (see `inert`)."""

    def __init__(self, message: str) -> None:
        super().__init__(inert(message))


class ToolUnavailable(ToolLoadError):
    """A tool a run used can no longer be loaded (resume)."""

    def __init__(self, source: ToolSource, reason: str) -> None:
        super().__init__(
            f"tool {source.tool!r} ({source.describe()}) can no longer be loaded: {reason}"
        )
        self.source = source


@frozen(kw_only=True)
class LoadedTool:
    tool: BaseTool
    source: ToolSource


@frozen(kw_only=True)
class Toolbox:
    """The tools of a run, and the one-line warnings about plug-ins that were left out."""

    tools: tuple[LoadedTool, ...]
    warnings: tuple[str, ...] = ()

    @property
    def sources(self) -> tuple[ToolSource, ...]:
        return tuple(loaded.source for loaded in self.tools)

    def registry(self) -> ToolRegistry:
        return ToolRegistry(loaded.tool for loaded in self.tools)


def collect_tools(
    workspace: Workspace,
    specs: Iterable[str] = (),
    *,
    plugins: bool = True,
    builtins: Iterable[str] | None = None,
    timeout: float = DEFAULT_TOOL_TIMEOUT,
) -> Toolbox:
    """The built-ins, then each spec's tools, then the plug-ins' tools.

    A bad spec or a spec tool whose name is taken raises ToolLoadError: the user asked for
    it. A plug-in that fails to load, or whose tool's name is taken, becomes a warning: one
    broken package must not stop every run.
    """
    chosen: list[LoadedTool] = []
    taken: dict[str, ToolSource] = {}
    warnings: list[str] = []

    def add(tool: BaseTool, source: ToolSource) -> str | None:
        if tool.name in taken:
            return f"two tools are named {tool.name!r}: {taken[tool.name].describe()} and" + (
                f" {source.describe()}"
            )
        taken[tool.name] = source
        chosen.append(LoadedTool(tool=tool, source=source))
        return None

    for name in BUILTINS if builtins is None else builtins:
        make = BUILTINS.get(name)
        if make is None:
            raise ToolLoadError(f"no built-in tool is named {name!r}")
        add(
            make(workspace, timeout=timeout),
            ToolSource(tool=name, kind=SourceKind.BUILTIN, ref=name),
        )
    for spec in specs:
        ref = canonical_spec(spec)
        for tool in load_tool_spec(spec):
            clash = add(tool, ToolSource(tool=tool.name, kind=SourceKind.SPEC, ref=ref))
            if clash is not None:
                raise ToolLoadError(clash)
    if plugins:
        for entry_point in _entry_points():
            try:
                tools = _load_entry_point(entry_point)
            except ToolLoadError as exc:
                warnings.append(f"{exc}; it was left out")
                continue
            for tool in tools:
                source = ToolSource(tool=tool.name, kind=SourceKind.PLUGIN, ref=entry_point.name)
                clash = add(tool, source)
                if clash is not None:
                    warnings.append(inert(f"{clash}; the plug-in's was left out"))
    return Toolbox(tools=tuple(chosen), warnings=tuple(warnings))


def load_sources(
    sources: Iterable[ToolSource], workspace: Workspace, *, timeout: float = DEFAULT_TOOL_TIMEOUT
) -> tuple[BaseTool, ...]:
    """The tools `sources` name, loaded again (for resume), in the same order.

    Raises ToolUnavailable, naming the first tool that cannot be loaded as it was.
    """
    loaded: dict[tuple[SourceKind, str], dict[str, BaseTool]] = {}
    tools: list[BaseTool] = []
    for source in sources:
        key = (source.kind, source.ref)
        if key not in loaded:
            try:
                loaded[key] = {tool.name: tool for tool in _load_source(source, workspace, timeout)}
            except ToolLoadError as exc:
                raise ToolUnavailable(source, str(exc)) from None
        tool = loaded[key].get(source.tool)
        if tool is None:
            found = ", ".join(loaded[key]) or "none"
            raise ToolUnavailable(source, f"it gives no tool of that name (it gives: {found})")
        tools.append(tool)
    return tuple(tools)


def load_tool_spec(spec: str) -> tuple[BaseTool, ...]:
    """The tools a `MODULE:ATTR` spec names. MODULE is a module importable from the current
    directory or PYTHONPATH, or a path to a `.py` file; ATTR may be dotted."""
    module_part, colon, attr = spec.rpartition(":")
    if not colon or not module_part or not attr:
        raise ToolLoadError(f"tool spec {spec!r} must be MODULE:ATTR (e.g. tools.py:add)")
    if _is_path(module_part):
        module = _import_file(Path(module_part), spec)
    else:
        module = _import_module(module_part, spec)
    target: object = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ToolLoadError(f"tool spec {spec!r}: {module_part} has no {attr!r}") from None
    tools = as_tools(target, spec)
    if not tools:
        raise ToolLoadError(f"tool spec {spec!r} names an empty list")
    return tools


def canonical_spec(spec: str) -> str:
    """The spec as a resumed run should see it: a file path made absolute, so resume works
    from any directory. Module specs stay as given."""
    module_part, colon, attr = spec.rpartition(":")
    if colon and module_part and _is_path(module_part):
        return f"{Path(module_part).resolve()}:{attr}"
    return spec


def as_tools(target: object, where: str) -> tuple[BaseTool, ...]:
    """`target` made tools: see the module docstring for what it may be."""
    # Imported here: pydantic costs ~100 ms and only function tools need it.
    from ruizn.effects.tools.function import FunctionTool, ToolDefinitionError, tool

    if isinstance(target, BaseTool):
        return (_checked(target, where),)
    if isinstance(target, list | tuple):
        return tuple(t for item in target for t in as_tools(item, where))
    if isinstance(target, type):
        if not issubclass(target, BaseTool):
            raise ToolLoadError(f"{where}: class {target.__name__} is not a BaseTool")
        try:
            built = target()
        except Exception as exc:
            raise ToolLoadError(
                f"{where}: cannot make a {target.__name__} with no arguments: {describe_error(exc)}"
            ) from None
        return (_checked(built, where),)
    if inspect.isfunction(target) or inspect.ismethod(target):
        try:
            made: FunctionTool[..., object] = tool(target)
        except ToolDefinitionError as exc:
            raise ToolLoadError(f"{where}: {exc}") from None
        return (made,)
    raise ToolLoadError(
        f"{where} is a {type(target).__name__}, not a function, a BaseTool class or"
        " instance, or a list of them"
    )


def _checked(tool: BaseTool, where: str) -> BaseTool:
    """The tool, if the registry will take it: otherwise a one-line error now, rather than
    a traceback from ToolRegistry later."""
    kind = type(tool).__name__
    for attr, wanted in (("name", str), ("description", str), ("input_schema", dict)):
        if not isinstance(getattr(tool, attr, None), wanted):
            raise ToolLoadError(f"{where}: {kind} has no {attr} ({wanted.__name__})")
    validator = jsonschema.validators.validator_for(
        tool.input_schema, default=jsonschema.Draft202012Validator
    )
    try:
        validator.check_schema(tool.input_schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise ToolLoadError(f"{where}: {kind}'s input_schema is not valid: {exc.message}") from None
    return tool


def _load_source(source: ToolSource, workspace: Workspace, timeout: float) -> tuple[BaseTool, ...]:
    match source.kind:
        case SourceKind.BUILTIN:
            make = BUILTINS.get(source.ref)
            if make is None:
                raise ToolLoadError(f"this ruizn has no built-in tool {source.ref!r}")
            return (make(workspace, timeout=timeout),)
        case SourceKind.SPEC:
            return load_tool_spec(source.ref)
        case SourceKind.PLUGIN:
            for entry_point in _entry_points():
                if entry_point.name == source.ref:
                    return _load_entry_point(entry_point)
            raise ToolLoadError(f"no installed plug-in is named {source.ref!r}")
        case SourceKind.MCP:  # pragma: no cover - the builder reconnects MCP servers instead
            raise ToolLoadError(f"{source.ref} is a tool of an MCP server, not of a module")


def remember_plugins(seconds: float) -> None:
    """Keep the installed plug-ins found for `seconds` in this process (0: look each time).
    A fleet process starts a run after another, and reading every installed package's
    metadata was a tenth of its CPU; a package installed meanwhile is found once it ends."""
    with _Plugins.lock:
        _Plugins.seconds = seconds
        _Plugins.found = None


class _Plugins:
    lock = threading.Lock()
    seconds = 0.0
    # (when found, the sys.path they were found on, the entry points)
    found: tuple[float, tuple[str, ...], tuple[importlib.metadata.EntryPoint, ...]] | None = None


def _entry_points() -> tuple[importlib.metadata.EntryPoint, ...]:
    if _Plugins.seconds <= 0:
        return tuple(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    with _Plugins.lock:  # one reading for the runs that start together
        now, path = time.monotonic(), tuple(sys.path)
        found = _Plugins.found
        if found is None or found[1] != path or now - found[0] >= _Plugins.seconds:
            entry_points = tuple(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
            found = _Plugins.found = (now, path, entry_points)
        return found[2]


def _load_entry_point(entry_point: importlib.metadata.EntryPoint) -> tuple[BaseTool, ...]:
    dist = entry_point.dist
    where = f"plug-in {entry_point.name!r}" + (f" ({dist.name} {dist.version})" if dist else "")
    try:
        target = entry_point.load()
    # SystemExit too: a plug-in calling sys.exit() at import must not end the run.
    except (Exception, SystemExit) as exc:
        raise ToolLoadError(f"{where} could not be loaded: {describe_error(exc)}") from None
    return as_tools(target, where)


def _is_path(module_part: str) -> bool:
    return module_part.endswith(".py") or "/" in module_part or os.sep in module_part


def _import_module(name: str, spec: str) -> object:
    # `ruizn` is a console script: sys.path[0] is its bin/ folder, not the current
    # directory, so a module next to the user would not be found without this. Last, never
    # first: a repository's mcp.py or anyio.py must not stand in for ruizn's own imports.
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)
    try:
        return importlib.import_module(name)
    except (Exception, SystemExit) as exc:
        raise ToolLoadError(
            f"tool spec {spec!r}: cannot import {name}: {describe_error(exc)}"
        ) from None


def _import_file(path: Path, spec: str) -> object:
    resolved = path.resolve()
    if not resolved.is_file():
        raise ToolLoadError(f"tool spec {spec!r}: no such file: {path}")
    # One module per file, named after its path, so loading a file twice (two specs, or
    # resume) gives the same objects and two files with one name do not collide.
    digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
    stem = re.sub(r"\W", "_", resolved.stem)
    name = f"ruizn_file_tools_{stem}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise ToolLoadError(f"tool spec {spec!r}: {path} cannot be loaded as Python")
    module = importlib.util.module_from_spec(module_spec)
    # Registered before it runs, as an import would: pydantic and dataclasses look the
    # module up by name to resolve the hints of what it defines.
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        del sys.modules[name]
        raise ToolLoadError(
            f"tool spec {spec!r}: cannot load {path}: {describe_error(exc)}"
        ) from None
    return module


def describe_error(exc: BaseException) -> str:
    """`Type: first line` of an exception a plug-in raised; made inert by ToolLoadError."""
    try:
        text = str(exc).strip()
    except Exception:  # a broken __str__ must not turn a warning into a traceback
        text = ""
    text = text.splitlines()[0] if text else ""
    if isinstance(exc, SyntaxError) and exc.lineno:
        text = f"{exc.msg} (line {exc.lineno})"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
