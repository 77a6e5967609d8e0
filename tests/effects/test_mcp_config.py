"""MCP server settings: the CLI syntax, what a run records, and what is never shown."""

from __future__ import annotations

import base64

import mcp.types as mt
import pytest

from ruizn.effects.mcp_config import (
    McpConfigError,
    MCPServer,
    header_env_name,
    parse_cli,
    servers_from_records,
)
from ruizn.effects.mcp_tools import _api_name, _render, _schema_problem


def test_cli_stdio_command_is_split_like_a_shell() -> None:
    [server] = parse_cli(["fs=npx -y '@scope/server files' --root \"my dir\""])
    assert server == MCPServer.stdio("fs", "npx", ["-y", "@scope/server files", "--root", "my dir"])


def test_cli_url_is_an_http_server_with_its_headers() -> None:
    servers = parse_cli(
        ["gh=https://api.example.com/mcp", "local=python server.py"],
        ["gh:Authorization=Bearer abc=def", "gh:X-Team=core"],
    )
    assert servers[0] == MCPServer.http(
        "gh",
        "https://api.example.com/mcp",
        {"Authorization": "Bearer abc=def", "X-Team": "core"},
    )
    assert servers[1].transport == "stdio"


def test_cli_header_without_a_value_reads_the_environment() -> None:
    env = {"RUIZN_MCP_HEADER_GH_AUTHORIZATION": "Bearer from-env"}
    [server] = parse_cli(["gh=http://127.0.0.1:9/mcp"], ["gh:Authorization"], environ=env)
    assert server.headers == (("Authorization", "Bearer from-env"),)
    assert header_env_name("my-srv", "X-Api-Key") == "RUIZN_MCP_HEADER_MY_SRV_X_API_KEY"


@pytest.mark.parametrize(
    ("specs", "headers", "message"),
    [
        (["nocommand"], [], "--mcp 'nocommand': expected NAME=COMMAND or NAME=URL"),
        (["x="], [], "--mcp x: the command is empty"),
        (["x='unclosed"], [], "--mcp x: cannot split the command: No closing quotation"),
        (["x=a", "x=b"], [], "--mcp: two servers are named 'x'"),
        (["bad name=cmd"], [], "bad MCP server name 'bad name'"),
        (["a__b=cmd"], [], "bad MCP server name 'a__b'"),
        (["x=cmd"], ["x:Auth=secret-value"], "--mcp-header x:Auth: 'x' is a stdio server"),
        (["x=cmd"], ["y:Auth=secret-value"], "--mcp-header y:Auth: 'y' is not a --mcp server"),
        (["x=http://h/mcp"], ["x-Auth=secret-value"], "--mcp-header 'x-Auth=***': expected"),
        (["x=http://h/mcp"], ["x:Auth"], "--mcp-header x:Auth: $RUIZN_MCP_HEADER_X_AUTH is not"),
        (["x=http://h/mcp"], ["x:Bad Name=v"], "MCP server x: bad header name 'Bad Name'"),
        (["x=http:///nohost"], [], "MCP server x: 'http:///nohost' is not an http(s) URL"),
    ],
)
def test_cli_mistakes_are_one_line_and_never_echo_a_secret(
    specs: list[str], headers: list[str], message: str
) -> None:
    with pytest.raises(McpConfigError) as caught:
        parse_cli(specs, headers, environ={})
    text = str(caught.value)
    assert text.startswith(message)
    assert "\n" not in text
    assert "secret-value" not in text


def test_a_record_has_names_but_no_secret_values() -> None:
    web = MCPServer.http(
        "web", "https://user:pw@example.com/mcp", {"Authorization": "Bearer T0KEN"}, timeout=5
    )
    local = MCPServer.stdio("local", "srv", ["--x"], env={"API_TOKEN": "T0KEN"})
    assert web.describe() == {
        "name": "web",
        "transport": "http",
        "url": "https://example.com/mcp",
        "headers": ["Authorization"],
        "timeout": 5,
    }
    assert local.describe() == {
        "name": "local",
        "transport": "stdio",
        "command": "srv",
        "args": ["--x"],
        "env": ["API_TOKEN"],
    }
    for shown in (repr(web), repr(local), str(web.describe()), str(local.describe())):
        assert "T0KEN" not in shown
        assert "pw@" not in shown


def test_a_record_rebuilds_the_server_with_values_given_again() -> None:
    web = MCPServer.http("web", "https://example.com/mcp", {"Authorization": "old"}, timeout=5)
    again = MCPServer.from_record(web.describe(), headers={"Authorization": "new"})
    assert again == MCPServer.http("web", "https://example.com/mcp", {"Authorization": "new"}, 5)
    local = MCPServer.stdio("local", "srv", ["--x"], env={"API_TOKEN": "old"})
    assert MCPServer.from_record(local.describe(), environ={"API_TOKEN": "now"}).env == (
        ("API_TOKEN", "now"),
    )


def test_a_record_whose_secret_is_missing_says_where_to_put_it() -> None:
    web = MCPServer.http("web", "https://example.com/mcp", {"Authorization": "old"})
    with pytest.raises(McpConfigError) as caught:
        MCPServer.from_record(web.describe(), environ={})
    assert str(caught.value) == (
        "MCP server web: header Authorization needs its value again:"
        " --mcp-header web:Authorization=VALUE or $RUIZN_MCP_HEADER_WEB_AUTHORIZATION"
    )
    local = MCPServer.stdio("local", "srv", env={"API_TOKEN": "old"})
    with pytest.raises(McpConfigError, match=r"set API_TOKEN to resume"):
        MCPServer.from_record(local.describe(), environ={})
    with pytest.raises(McpConfigError, match="incomplete"):
        MCPServer.from_record({"name": "x"})


def test_resume_rebuilds_every_recorded_server_with_headers_given_again() -> None:
    recorded = [
        MCPServer.http("web", "https://example.com/mcp", {"Authorization": "old"}).describe(),
        MCPServer.stdio("local", "srv", ["--x"]).describe(),
    ]
    web, local = servers_from_records(recorded, ["web:Authorization=new"], environ={})
    assert web.headers == (("Authorization", "new"),)
    assert local == MCPServer.stdio("local", "srv", ["--x"])
    with pytest.raises(McpConfigError, match="the run has no MCP server 'gh'"):
        servers_from_records(recorded, ["gh:Authorization=x"], environ={})


def test_tool_names_fit_the_api_and_never_collide() -> None:
    taken: set[str] = set()
    plain = _api_name("fs", "read_file", taken)
    assert plain == "mcp__fs__read_file"
    taken.add(plain)
    dotted = _api_name("fs", "files.read", taken)
    assert dotted == "mcp__fs__files_read"
    taken.add(dotted)
    clash = _api_name("fs", "files/read", taken)  # sanitises to the same name
    assert clash != dotted
    assert clash.startswith("mcp__fs__files_read_")
    long = _api_name("server", "x" * 200, taken)
    assert len(long) == 64
    assert long != _api_name("server", "x" * 199, taken)


def test_results_without_text_are_described() -> None:
    structured = mt.CallToolResult(content=[], structured_content={"temp": 21.5})
    assert _render(structured) == '{"temp": 21.5}'
    assert _render(mt.CallToolResult(content=[])) == "(the tool returned no content)"
    big = base64.b64encode(b"\0" * (3 * 1024 * 1024)).decode()
    image = mt.CallToolResult(content=[mt.ImageContent(type="image", data=big, mime_type="x/y")])
    assert _render(image) == "[image: x/y, 3.0 MB, not shown]"


def test_a_tool_whose_schema_the_api_would_refuse_is_found_out() -> None:
    assert _schema_problem({"type": "object", "properties": {"a": {"type": "string"}}}) is None
    assert _schema_problem({"type": "object", "properties": {"a": {"type": "nope"}}})
    assert _schema_problem({"type": "string"}) == "its type is not 'object'"
