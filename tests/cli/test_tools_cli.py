"""Tools from the command line: `run --tool MODULE:ATTR`, plug-ins, `--no-plugins` and
`ruizn tools`, through the real CLI, the real SDK and the local Messages API server."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from ruizn.effects.tools.loader import BUILTINS
from tests.cli.conftest import cli_env, run_cli
from tests.conftest import run_python
from tests.fakeapi import Stream, Text, ToolUse

pytestmark = pytest.mark.slow

MY_TOOLS = '''
import ruizn


@ruizn.tool(read_only=True)
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b
'''

BROKEN_WARNING = (
    "ruizn: warning: plug-in 'broken' (ruizn-plugin-example 0.1.0) could not be loaded:"
    " ModuleNotFoundError: No module named 'ruizn_plugin_example_missing_dependency';"
    " it was left out"
)


@pytest.fixture
def tools_workspace(workspace: Path) -> Path:
    (workspace / "my_tools.py").write_text(MY_TOOLS, encoding="utf-8")
    return workspace


def _add_then_answer() -> list[Stream]:
    return [
        Stream(
            (ToolUse("toolu_1", "add", {"a": 2, "b": 3}),),
            stop_reason="tool_use",
        ),
        Stream((Text("2 + 3 = 5"),)),
    ]


def _tool_results(server: Any, index: int) -> list[Any]:
    return [
        (block["tool_use_id"], block["content"], block.get("is_error", False))
        for block in server.requests[index].body["messages"][-1]["content"]
    ]


@pytest.mark.parametrize("spec", ["my_tools.py:add", "my_tools:add"], ids=["file", "module"])
def test_run_with_a_tool_from_a_file_or_a_module(
    tools_workspace: Path, server_factory: Any, spec: str
) -> None:
    server = server_factory(_add_then_answer())
    result = run_cli(
        ["run", "--goal", "What is 2 + 3?", "--tool", spec, "--no-plugins"],
        workspace=tools_workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    assert '[tool] add {"a": 2, "b": 3}' in result.stdout
    assert "2 + 3 = 5" in result.stdout.splitlines()
    sent = server.requests[0].body["tools"]
    assert [t["name"] for t in sent] == [*BUILTINS, "add"]
    add = sent[len(BUILTINS)]
    assert add["description"] == "Add two integers."
    assert add["input_schema"]["properties"]["a"] == {
        "type": "integer",
        "description": "The first number.",
    }
    assert _tool_results(server, 1) == [("toolu_1", "5", False)]
    started = result.events()[0]
    assert [t["name"] for t in started["settings"]["tools"]] == [*BUILTINS, "add"]


def test_the_console_script_finds_a_module_in_the_current_directory(
    tools_workspace: Path, server_factory: Any
) -> None:
    # `ruizn` (not `python -m ruizn`): its sys.path[0] is the venv's bin/, not the cwd.
    script = Path(sys.executable).with_name("ruizn")
    server = server_factory(_add_then_answer())
    done = run_cli(
        ["run", "--goal", "2 + 3?", "--tool", "my_tools:add", "--no-plugins"],
        workspace=tools_workspace,
        base_url=server.base_url,
        command=[str(script)],
    )
    assert done.code == 0, done.stderr
    assert _tool_results(server, 1) == [("toolu_1", "5", False)]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("my_tools.py", "tool spec 'my_tools.py' must be MODULE:ATTR (e.g. tools.py:add)"),
        ("my_tools.py:sub", "tool spec 'my_tools.py:sub': my_tools.py has no 'sub'"),
        ("nowhere.py:add", "tool spec 'nowhere.py:add': no such file: nowhere.py"),
    ],
)
def test_a_bad_tool_spec_is_one_line_exit_2_and_no_log(
    tools_workspace: Path, spec: str, message: str
) -> None:
    result = run_cli(
        ["run", "--model", "test", "--goal", "hi", "--tool", spec],
        workspace=tools_workspace,
    )
    assert result.code == 2
    assert result.stderr == f"ruizn: error: {message}\n"
    assert result.new_logs == ()


def test_a_plugin_tool_is_offered_and_run_and_a_broken_one_is_one_warning(
    workspace: Path, server_factory: Any, installed_plugin: Path
) -> None:
    server = server_factory(
        [
            Stream((ToolUse("toolu_1", "shout", {"text": "hi"}),), stop_reason="tool_use"),
            Stream((Text("done"),)),
        ]
    )
    env = cli_env(server.base_url, PYTHONPATH=str(installed_plugin))
    result = run_cli(["run", "--goal", "shout hi"], workspace=workspace, env=env)
    assert result.code == 0, result.stderr
    assert result.stderr.splitlines()[0] == BROKEN_WARNING
    assert "Traceback" not in result.stderr
    names = [t["name"] for t in server.requests[0].body["tools"]]
    assert names == [*BUILTINS, "shout", "count_letters", "reverse"]
    assert _tool_results(server, 1) == [("toolu_1", "HI!", False)]


def test_no_plugins_leaves_them_out_without_a_warning(
    workspace: Path, server_factory: Any, installed_plugin: Path
) -> None:
    server = server_factory([Stream((Text("ok"),))])
    env = cli_env(server.base_url, PYTHONPATH=str(installed_plugin))
    result = run_cli(["run", "--goal", "hi", "--no-plugins"], workspace=workspace, env=env)
    assert result.code == 0, result.stderr
    assert "warning" not in result.stderr
    assert [t["name"] for t in server.requests[0].body["tools"]] == [*BUILTINS]


def test_tools_lists_every_tool_with_source_and_schema_as_json(
    tools_workspace: Path, installed_plugin: Path
) -> None:
    env = cli_env(None, PYTHONPATH=str(installed_plugin))
    result = run_cli(
        ["tools", "--json", "--tool", "my_tools.py:add"], workspace=tools_workspace, env=env
    )
    assert result.code == 0, result.stderr
    assert result.stderr == BROKEN_WARNING + "\n"
    listed = json.loads(result.stdout)
    assert [(t["name"], t["source"]["kind"], t["source"]["ref"]) for t in listed] == [
        *((name, "builtin", name) for name in BUILTINS),
        ("add", "spec", f"{tools_workspace.resolve()}/my_tools.py:add"),
        ("shout", "plugin", "shout"),
        ("count_letters", "plugin", "text_tools"),
        ("reverse", "plugin", "text_tools"),
    ]
    shout = listed[len(BUILTINS) + 1]
    assert shout["description"] == "Say the text in capitals."
    assert shout["input_schema"] == {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "What to say."}},
        "required": ["text"],
        "additionalProperties": False,
    }


def test_tools_as_text_names_each_source_and_prints_its_schema(
    tools_workspace: Path,
) -> None:
    result = run_cli(["tools", "--tool", "my_tools:add", "--no-plugins"], workspace=tools_workspace)
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    # Three lines a tool: name and source, description, input schema.
    builtin_lines = 3 * len(BUILTINS)
    # The tools that only read say so (they run without approval, and again on resume).
    assert lines[:builtin_lines:3] == [
        "read_file  (builtin · read-only)",
        "list_dir  (builtin · read-only)",
        "glob  (builtin · read-only)",
        "grep  (builtin · read-only)",
        "write_file  (builtin)",
        "edit_file  (builtin)",
    ]
    assert all(line.startswith("  input schema: {") for line in lines[2:builtin_lines:3])
    assert lines[builtin_lines:] == [
        "add  (spec my_tools:add · read-only)",
        "  Add two integers.",
        '  input schema: {"additionalProperties":false,"properties":{"a":{"description":'
        '"The first number.","type":"integer"},"b":{"description":"The second number.",'
        '"type":"integer"}},"required":["a","b"],"type":"object"}',
    ]


def test_help_imports_neither_the_sdk_nor_anyio_nor_pydantic(workspace: Path) -> None:
    done = run_python("-X", "importtime", "-m", "ruizn", "--help", cwd=workspace)
    assert done.returncode == 0
    assert "--tool MODULE:ATTR" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "click" in imported  # the check sees imports at all
    heavy = {name.split(".")[0] for name in imported} & {"anthropic", "anyio", "pydantic"}
    assert heavy == set()


def test_tools_shell_lists_the_shells_tools_after_the_others(workspace: Path) -> None:
    result = run_cli(["tools", "--json", "--shell", "--no-plugins"], workspace=workspace)
    assert result.code == 0, result.stderr
    listed = json.loads(result.stdout)
    reads = {"read_file", "list_dir", "glob", "grep"}
    assert [(t["name"], t["source"]["kind"], t["read_only"]) for t in listed] == [
        *((name, "builtin", name in reads) for name in BUILTINS),
        ("bash", "builtin", False),
        ("bash_output", "builtin", True),
        ("bash_kill", "builtin", False),
    ]
    assert "cannot write it" in listed[len(BUILTINS)]["description"]  # git, in the sandbox
    plain = run_cli(["tools", "--no-plugins"], workspace=workspace)
    assert "bash" not in plain.stdout
