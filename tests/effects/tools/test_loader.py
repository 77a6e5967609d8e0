"""Loading tools from `MODULE:ATTR` specs, recording where each came from, and loading the
same tools again from those records (resume), with one-line errors when that fails."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ruizn.effects.tools.base import BaseTool
from ruizn.effects.tools.function import FunctionTool
from ruizn.effects.tools.loader import (
    BUILTINS,
    ToolLoadError,
    ToolUnavailable,
    canonical_spec,
    collect_tools,
    load_sources,
    load_tool_spec,
)
from ruizn.effects.tools.read import ReadFileTool
from ruizn.serde import converter
from ruizn.toolsource import SourceKind, ToolSource

TOOLS_PY = '''
from typing import ClassVar

import ruizn
from ruizn.effects.tools.base import BaseTool
from ruizn.state import JsonObject, ToolResult


@ruizn.tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def shout(text: str) -> str:
    """Say it loud.

    Parameters
    ----------
    text : str
        What to say.
    """
    return text.upper()


class Echo(BaseTool):
    name = "echo"
    description = "Echo the text."
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }

    async def invoke(self, input: JsonObject) -> ToolResult | str:
        return input["text"]


class NeedsArgs(Echo):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix


class Holder:
    TOOLS = [add, shout]


class BadSchema(Echo):
    input_schema: ClassVar[JsonObject] = {"type": "objekt"}


class Nameless(BaseTool):
    description = "No name."
    input_schema: ClassVar[JsonObject] = {"type": "object"}

    async def invoke(self, input: JsonObject) -> ToolResult | str:
        return ""


ECHO = Echo(timeout=2)
ALL = [add, shout, Echo, (ECHO,)]
NOTHING: list[object] = []
NUMBER = 42
'''


@pytest.fixture
def fresh_modules() -> Iterator[None]:
    """Forget the modules a test imported, as a new process (a resume) would not have them."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        del sys.modules[name]


@pytest.fixture
def tools_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_modules: None) -> Path:
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "my_tools.py").write_text(TOOLS_PY, encoding="utf-8")
    monkeypatch.chdir(folder)
    # The loader puts the current directory on sys.path; undo that after the test.
    monkeypatch.setattr(sys, "path", list(sys.path))
    return folder


# --- what a spec may name ---------------------------------------------------------------------


def test_a_decorated_function_in_a_module_is_that_tool(tools_dir: Path) -> None:
    (made,) = load_tool_spec("my_tools:add")
    module = sys.modules["my_tools"]
    assert made is module.add
    assert made.read_only


def test_a_module_in_the_current_directory_loads_even_when_it_is_not_on_sys_path(
    tools_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As under the `ruizn` console script, whose sys.path[0] is its bin/ folder.
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tools_dir))])
    (made,) = load_tool_spec("my_tools:add")
    assert made.name == "add"


@pytest.mark.parametrize("how", ["relative", "absolute"])
def test_a_py_file_path_loads_like_a_module(tools_dir: Path, how: str) -> None:
    path = "my_tools.py" if how == "relative" else str(tools_dir / "my_tools.py")
    (made,) = load_tool_spec(f"{path}:add")
    assert isinstance(made, FunctionTool)
    assert made(2, 3) == 5
    assert made.input_schema["properties"]["a"] == {
        "type": "integer",
        "description": "The first number.",
    }


def test_a_file_loaded_twice_gives_the_same_tool(tools_dir: Path) -> None:
    assert load_tool_spec("my_tools.py:add") == load_tool_spec(f"{tools_dir}/my_tools.py:add")


def test_a_plain_function_is_made_a_tool_on_the_fly(tools_dir: Path) -> None:
    (made,) = load_tool_spec("my_tools.py:shout")
    assert made.name == "shout"
    assert made.description == "Say it loud."
    assert made.input_schema["properties"] == {
        "text": {"type": "string", "description": "What to say."}
    }


def test_a_basetool_class_is_built_and_an_instance_is_taken_as_it_is(tools_dir: Path) -> None:
    (from_class,) = load_tool_spec("my_tools:Echo")
    (instance,) = load_tool_spec("my_tools:ECHO")
    assert from_class.name == instance.name == "echo"
    assert instance is sys.modules["my_tools"].ECHO
    assert instance.timeout == 2


def test_a_list_may_mix_every_kind_and_nest(tools_dir: Path) -> None:
    tools = load_tool_spec("my_tools:ALL")
    assert [t.name for t in tools] == ["add", "shout", "echo", "echo"]
    assert all(isinstance(t, BaseTool) for t in tools)


def test_attr_may_be_dotted(tools_dir: Path) -> None:
    assert [t.name for t in load_tool_spec("my_tools:Holder.TOOLS")] == ["add", "shout"]


# --- bad specs: one line each -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("my_tools.py", "tool spec 'my_tools.py' must be MODULE:ATTR (e.g. tools.py:add)"),
        (":add", "tool spec ':add' must be MODULE:ATTR (e.g. tools.py:add)"),
        (
            "no_such_module_xyz:add",
            "tool spec 'no_such_module_xyz:add': cannot import no_such_module_xyz:"
            " ModuleNotFoundError: No module named 'no_such_module_xyz'",
        ),
        ("missing.py:add", "tool spec 'missing.py:add': no such file: missing.py"),
        ("my_tools:nope", "tool spec 'my_tools:nope': my_tools has no 'nope'"),
        (
            "my_tools.py:Holder.nope",
            "tool spec 'my_tools.py:Holder.nope': my_tools.py has no 'Holder.nope'",
        ),
        (
            "my_tools:NUMBER",
            "my_tools:NUMBER is a int, not a function, a BaseTool class or instance,"
            " or a list of them",
        ),
        (
            "my_tools:Holder",
            "my_tools:Holder: class Holder is not a BaseTool",
        ),
        (
            "my_tools:NeedsArgs",
            "my_tools:NeedsArgs: cannot make a NeedsArgs with no arguments: TypeError:"
            " NeedsArgs.__init__() missing 1 required positional argument: 'prefix'",
        ),
        ("my_tools:NOTHING", "tool spec 'my_tools:NOTHING' names an empty list"),
        (
            "my_tools:BadSchema",
            "my_tools:BadSchema: BadSchema's input_schema is not valid: 'objekt' is not valid"
            " under any of the given schemas",
        ),
        ("my_tools:Nameless", "my_tools:Nameless: Nameless has no name (str)"),
    ],
)
def test_a_bad_spec_is_a_one_line_tool_load_error(tools_dir: Path, spec: str, message: str) -> None:
    with pytest.raises(ToolLoadError) as info:
        load_tool_spec(spec)
    assert str(info.value) == message


def test_a_file_with_a_syntax_error_names_the_line(tools_dir: Path) -> None:
    (tools_dir / "bad.py").write_text("x = 1\ndef f(:\n", encoding="utf-8")
    with pytest.raises(ToolLoadError) as info:
        load_tool_spec("bad.py:f")
    assert str(info.value) == "tool spec 'bad.py:f': cannot load bad.py: SyntaxError: invalid" + (
        " syntax (line 2)"
    )
    assert not [name for name in sys.modules if name.startswith("ruizn_file_tools_bad_")]


def test_a_module_that_fails_or_exits_at_import_is_a_tool_load_error(tools_dir: Path) -> None:
    (tools_dir / "raises.py").write_text("raise RuntimeError('no config\\nat all')\n")
    (tools_dir / "exits.py").write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(ToolLoadError, match=r"^tool spec 'raises:f': cannot import raises:"):
        load_tool_spec("raises:f")
    with pytest.raises(ToolLoadError) as info:
        load_tool_spec("exits.py:f")
    assert str(info.value) == "tool spec 'exits.py:f': cannot load exits.py: SystemExit: 3"


def test_a_function_that_cannot_be_a_tool_is_a_tool_load_error(tools_dir: Path) -> None:
    (tools_dir / "star.py").write_text("def many(*names: str) -> str:\n    return ''\n")
    with pytest.raises(ToolLoadError) as info:
        load_tool_spec("star.py:many")
    assert str(info.value).startswith("star.py:many: tool many: *names or **names cannot be")


# --- the run's toolbox and its sources --------------------------------------------------------


def test_collect_tools_gives_builtins_then_specs_with_their_sources(tools_dir: Path) -> None:
    box = collect_tools(tools_dir, ["my_tools.py:add", "my_tools:Echo"], plugins=False)
    assert isinstance(box.tools[0].tool, ReadFileTool)
    assert box.sources == (
        *(ToolSource(tool=name, kind=SourceKind.BUILTIN, ref=name) for name in BUILTINS),
        ToolSource(tool="add", kind=SourceKind.SPEC, ref=f"{tools_dir}/my_tools.py:add"),
        ToolSource(tool="echo", kind=SourceKind.SPEC, ref="my_tools:Echo"),
    )
    assert [type(loaded.tool) for loaded in box.tools[: len(BUILTINS)]] == list(BUILTINS.values())
    assert box.registry().names == (*BUILTINS, "add", "echo")
    assert box.warnings == ()


def test_two_tools_of_one_name_are_refused_naming_both_sources(tools_dir: Path) -> None:
    with pytest.raises(ToolLoadError) as info:
        collect_tools(tools_dir, ["my_tools:add", "my_tools.py:add"], plugins=False)
    assert str(info.value) == (
        f"two tools are named 'add': spec my_tools:add and spec {tools_dir}/my_tools.py:add"
    )


def test_a_spec_cannot_take_a_builtins_name(tools_dir: Path) -> None:
    (tools_dir / "mine.py").write_text("def read_file(path: str) -> str:\n    return path\n")
    with pytest.raises(ToolLoadError, match=r"^two tools are named 'read_file': builtin and spec"):
        collect_tools(tools_dir, ["mine.py:read_file"], plugins=False)


def test_canonical_spec_makes_file_paths_absolute_and_keeps_module_specs(tools_dir: Path) -> None:
    assert canonical_spec("my_tools.py:add") == f"{tools_dir}/my_tools.py:add"
    assert canonical_spec("./sub/../my_tools.py:add") == f"{tools_dir}/my_tools.py:add"
    assert canonical_spec("my_tools:add") == "my_tools:add"


def test_a_tool_source_is_json_friendly() -> None:
    source = ToolSource(tool="add", kind=SourceKind.SPEC, ref="/p/tools.py:add")
    text = json.dumps(converter.unstructure(source))
    assert json.loads(text) == {
        "tool": "add",
        "kind": "spec",
        "ref": "/p/tools.py:add",
        "read_only": False,
    }
    assert converter.structure(json.loads(text), ToolSource) == source
    # A log from before `read_only` was recorded reads as it did.
    old = {"tool": "add", "kind": "spec", "ref": "/p/tools.py:add"}
    assert converter.structure(old, ToolSource) == source
    assert source.describe() == "spec /p/tools.py:add"


def test_load_sources_loads_the_same_tools_again(
    tools_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = collect_tools(tools_dir, ["my_tools.py:Holder.TOOLS", "my_tools:Echo"], plugins=False)
    sources = box.sources  # the built-ins, add, shout, echo
    for name in list(sys.modules):
        if "my_tools" in name:
            del sys.modules[name]
    monkeypatch.chdir(tmp_path)  # resume may be run from anywhere
    again = load_sources(sources, tools_dir)
    assert [t.name for t in again] == [*BUILTINS, "add", "shout", "echo"]
    assert [t.schema() for t in again] == [loaded.tool.schema() for loaded in box.tools]
    first_spec = len(BUILTINS)
    assert again[first_spec] is not box.tools[first_spec].tool  # really loaded again


def test_load_sources_names_a_tool_whose_file_is_gone(tools_dir: Path) -> None:
    (source,) = collect_tools(tools_dir, ["my_tools.py:add"], plugins=False, builtins=()).sources
    (tools_dir / "my_tools.py").unlink()
    sys.modules.pop(next(n for n in sys.modules if n.startswith("ruizn_file_tools_my_tools")))
    with pytest.raises(ToolUnavailable) as info:
        load_sources([source], tools_dir)
    assert str(info.value) == (
        f"tool 'add' (spec {tools_dir}/my_tools.py:add) can no longer be loaded: tool spec"
        f" '{tools_dir}/my_tools.py:add': no such file: {tools_dir}/my_tools.py"
    )
    assert info.value.source == source


def test_load_sources_names_a_tool_its_spec_no_longer_gives(tools_dir: Path) -> None:
    source = ToolSource(tool="shout", kind=SourceKind.SPEC, ref="my_tools:Holder.TOOLS")
    renamed = ToolSource(tool="yell", kind=SourceKind.SPEC, ref="my_tools:Holder.TOOLS")
    assert [t.name for t in load_sources([source], tools_dir)] == ["shout"]
    with pytest.raises(ToolUnavailable) as info:
        load_sources([source, renamed], tools_dir)
    assert str(info.value) == (
        "tool 'yell' (spec my_tools:Holder.TOOLS) can no longer be loaded: it gives no tool"
        " of that name (it gives: add, shout)"
    )


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        (
            ToolSource(tool="zap", kind=SourceKind.BUILTIN, ref="zap"),
            "this ruizn has no built-in tool 'zap'",
        ),
        (
            ToolSource(tool="weather", kind=SourceKind.PLUGIN, ref="weather-not-installed"),
            "no installed plug-in is named 'weather-not-installed'",
        ),
        (
            ToolSource(tool="f", kind=SourceKind.SPEC, ref="gone_module_xyz:f"),
            "tool spec 'gone_module_xyz:f': cannot import gone_module_xyz:"
            " ModuleNotFoundError: No module named 'gone_module_xyz'",
        ),
    ],
)
def test_load_sources_names_each_kind_of_missing_tool(
    tmp_path: Path, source: ToolSource, reason: str
) -> None:
    with pytest.raises(ToolUnavailable) as info:
        load_sources([source], tmp_path)
    assert str(info.value) == (
        f"tool {source.tool!r} ({source.describe()}) can no longer be loaded: {reason}"
    )
