"""Plug-ins: tools an installed package offers through the `ruizn.tools` entry points.

The package is tests/plugin_pkg, really installed by pip (see `installed_plugin`), so
importlib.metadata finds its entry points exactly as it would for a user's package.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ruizn.effects.tools.base import invoke_tool
from ruizn.effects.tools.loader import BUILTINS, ToolUnavailable, collect_tools, load_sources
from ruizn.state import ToolCall, ToolResult
from ruizn.toolsource import SourceKind, ToolSource

BROKEN_WARNING = (
    "plug-in 'broken' (ruizn-plugin-example 0.1.0) could not be loaded: ModuleNotFoundError:"
    " No module named 'ruizn_plugin_example_missing_dependency'; it was left out"
)


@pytest.fixture
def plugin_on_path(
    installed_plugin: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Path]:
    before = set(sys.modules)
    monkeypatch.syspath_prepend(str(installed_plugin))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_plugin_tools_follow_the_builtins_with_their_entry_point_names(
    plugin_on_path: Path,
) -> None:
    box = collect_tools(plugin_on_path)
    assert box.sources == (
        *(ToolSource(tool=name, kind=SourceKind.BUILTIN, ref=name) for name in BUILTINS),
        ToolSource(tool="shout", kind=SourceKind.PLUGIN, ref="shout"),
        ToolSource(tool="count_letters", kind=SourceKind.PLUGIN, ref="text_tools"),
        ToolSource(tool="reverse", kind=SourceKind.PLUGIN, ref="text_tools"),
    )


def test_a_broken_plugin_is_one_warning_and_the_others_still_load(plugin_on_path: Path) -> None:
    box = collect_tools(plugin_on_path)
    assert box.warnings == (BROKEN_WARNING,)
    assert "shout" in box.registry().names


def test_no_plugins_loads_none_and_warns_of_none(plugin_on_path: Path) -> None:
    box = collect_tools(plugin_on_path, plugins=False)
    assert box.registry().names == tuple(BUILTINS)
    assert box.warnings == ()


@pytest.mark.anyio
async def test_plugin_tools_run_like_any_tool(plugin_on_path: Path) -> None:
    registry = collect_tools(plugin_on_path).registry()
    calls = [
        ToolCall(id="1", name="shout", input={"text": "hi"}),
        ToolCall(id="2", name="count_letters", input={"text": "banana"}),
        ToolCall(id="3", name="reverse", input={"text": "abc"}),
    ]
    assert [await invoke_tool(registry, call) for call in calls] == [
        ToolResult.ok("HI!"),
        ToolResult.ok('{"a":3}'),
        ToolResult.ok("cba"),
    ]


def test_a_spec_wins_over_a_plugin_tool_of_the_same_name(plugin_on_path: Path) -> None:
    (plugin_on_path / "mine.py").write_text("def shout(text: str) -> str:\n    return text\n")
    box = collect_tools(plugin_on_path, ["mine.py:shout"])
    assert box.sources[len(BUILTINS)] == ToolSource(
        tool="shout", kind=SourceKind.SPEC, ref=f"{plugin_on_path}/mine.py:shout"
    )
    assert [s.tool for s in box.sources].count("shout") == 1
    assert set(box.warnings) == {
        f"two tools are named 'shout': spec {plugin_on_path}/mine.py:shout and plugin shout;"
        " the plug-in's was left out",
        BROKEN_WARNING,
    }


def test_plugin_sources_load_again_and_a_broken_one_is_named(plugin_on_path: Path) -> None:
    sources = collect_tools(plugin_on_path).sources
    assert [t.name for t in load_sources(sources, plugin_on_path)] == [
        *BUILTINS,
        "shout",
        "count_letters",
        "reverse",
    ]
    broken = ToolSource(tool="x", kind=SourceKind.PLUGIN, ref="broken")
    with pytest.raises(ToolUnavailable) as info:
        load_sources([broken], plugin_on_path)
    assert str(info.value) == (
        "tool 'x' (plugin broken) can no longer be loaded: plug-in 'broken'"
        " (ruizn-plugin-example 0.1.0) could not be loaded: ModuleNotFoundError: No module"
        " named 'ruizn_plugin_example_missing_dependency'"
    )


def test_without_the_package_on_the_path_there_are_no_plugin_tools(tmp_path: Path) -> None:
    box = collect_tools(tmp_path)
    assert [(s.tool, s.kind) for s in box.sources] == [
        (name, SourceKind.BUILTIN) for name in BUILTINS
    ]
    assert box.warnings == ()
