"""What resume compares: each MCP tool a run recorded against what its server lists now.
`mcp_tool_changes` is pure; the last test feeds it a real server before and after a change."""

from __future__ import annotations

import sys

import pytest

from ruizn.effects.mcp.config import MCPServer
from ruizn.effects.mcp.toolset import McpToolset, mcp_tool_changes
from ruizn.state import JsonObject
from ruizn.toolsource import SourceKind, ToolSource
from tests.mcp_servers import SERVERS

ECHO_SCHEMA: JsonObject = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
}


def mcp(name: str, ref: str, *, read_only: bool = False) -> ToolSource:
    return ToolSource(tool=name, kind=SourceKind.MCP, ref=ref, read_only=read_only)


def schema(name: str, input_schema: JsonObject = ECHO_SCHEMA) -> JsonObject:
    return {"name": name, "description": "d", "input_schema": input_schema}


ECHO = mcp("mcp__s__echo", "s/echo", read_only=True)
ADD = mcp("mcp__s__add", "s/add")
READ_FILE = ToolSource(tool="read_file", kind=SourceKind.BUILTIN, ref="read_file")
RECORDED = {
    "recorded_sources": [READ_FILE, ECHO, ADD],
    "recorded_tools": [schema("read_file"), schema("mcp__s__echo"), schema("mcp__s__add")],
}


def changes(sources: list[ToolSource], tools: list[JsonObject]) -> dict[str, str]:
    return mcp_tool_changes(**RECORDED, current_sources=sources, current_tools=tools)


def test_nothing_changed_is_no_problem() -> None:
    assert changes([ECHO, ADD], [schema("mcp__s__echo"), schema("mcp__s__add")]) == {}
    # Another description, or a tool the run never saw, is no reason to refuse a call.
    described = {**schema("mcp__s__echo"), "description": "new words"}
    extra = mcp("mcp__s__new", "s/new")
    assert changes([ECHO, ADD, extra], [described, schema("mcp__s__add"), schema("x")]) == {}


def test_a_tool_no_longer_listed() -> None:
    assert changes([ECHO], [schema("mcp__s__echo")]) == {
        "mcp__s__add": "mcp__s__add (tool 'add' of MCP server s): its server no longer lists it"
    }


def test_a_name_that_now_belongs_to_another_tool() -> None:
    # The run approved `add`; the server now offers another tool under the same API name.
    other = mcp("mcp__s__add", "s/add.v2")
    assert changes([ECHO, other], [schema("mcp__s__echo"), schema("mcp__s__add")]) == {
        "mcp__s__add": "mcp__s__add (tool 'add' of MCP server s): that name is now"
        " tool 'add.v2' of MCP server s"
    }


def test_a_tool_now_under_another_name() -> None:
    # A log from a ruizn that gave clashing names an order-dependent suffix.
    renamed = mcp("mcp__s__add_1a2b3c4d", "s/add")
    found = changes([ECHO, renamed], [schema("mcp__s__echo"), schema("mcp__s__add_1a2b3c4d")])
    assert found == {
        "mcp__s__add": "mcp__s__add (tool 'add' of MCP server s): it is now named"
        " mcp__s__add_1a2b3c4d"
    }


def test_a_changed_input_schema_and_read_only_flag_are_one_line() -> None:
    wider = {**ECHO_SCHEMA, "properties": {"text": {"type": "string"}, "n": {"type": "integer"}}}
    writes = mcp("mcp__s__echo", "s/echo", read_only=False)
    reads = mcp("mcp__s__add", "s/add", read_only=True)
    found = changes([writes, reads], [schema("mcp__s__echo", wider), schema("mcp__s__add")])
    assert found == {
        "mcp__s__echo": "mcp__s__echo (tool 'echo' of MCP server s): its input schema changed;"
        " it no longer says it only reads (readOnlyHint)",
        "mcp__s__add": "mcp__s__add (tool 'add' of MCP server s): it now says it only reads"
        " (readOnlyHint)",
    }
    assert all("\n" not in line for line in found.values())


def test_a_log_without_mcp_sources_is_compared_by_name_and_schema() -> None:
    old = {
        "recorded_sources": [READ_FILE],
        "recorded_tools": [schema("read_file"), schema("mcp__s__echo"), schema("mcp__s__add")],
    }
    wider = {**ECHO_SCHEMA, "required": []}
    found = mcp_tool_changes(
        **old, current_sources=[ECHO], current_tools=[schema("mcp__s__echo", wider)]
    )
    assert found == {
        "mcp__s__echo": "mcp__s__echo: its input schema changed",
        "mcp__s__add": "mcp__s__add: no MCP server lists a tool of that name now",
    }


@pytest.mark.anyio
async def test_a_real_server_upgraded_between_run_and_resume() -> None:
    def hostile(*flags: str) -> MCPServer:
        return MCPServer.stdio("h", sys.executable, [str(SERVERS / "hostile.py"), *flags])

    before = McpToolset([hostile()])
    async with before as tools:
        sources, schemas = before.sources(), [tool.schema() for tool in tools]
    by_name = {source.tool: source for source in sources}
    assert by_name["mcp__h__echo"] == ToolSource(
        tool="mcp__h__echo", kind=SourceKind.MCP, ref="h/echo", read_only=True
    )
    assert by_name["mcp__h__flood"].read_only is False
    after = McpToolset([hostile("--changed")])
    async with after as tools:
        found = mcp_tool_changes(
            recorded_sources=sources,
            recorded_tools=schemas,
            current_sources=after.sources(),
            current_tools=[tool.schema() for tool in tools],
        )
    assert found == {
        "mcp__h__die": "mcp__h__die (tool 'die' of MCP server h): its server no longer lists it",
        "mcp__h__echo": "mcp__h__echo (tool 'echo' of MCP server h): its input schema changed;"
        " it no longer says it only reads (readOnlyHint)",
    }
