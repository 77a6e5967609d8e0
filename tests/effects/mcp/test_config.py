"""MCP server settings: the CLI syntax, what a run records, and what is never shown."""

from __future__ import annotations

import base64

import mcp.types as mt
import pytest

from ruizn.effects.mcp.config import (
    McpConfigError,
    MCPServer,
    header_env_name,
    parse_cli,
    servers_from_records,
    url_env_name,
)
from ruizn.effects.mcp.names import McpStartupError, api_names, input_schema_problem
from ruizn.effects.mcp.results import _render
from ruizn.media import content_of, fit
from ruizn.redact import redact_url, url_secrets
from ruizn.state import MediaTally


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
        "web",
        "https://user:pw@example.com/mcp?token=T0KEN&v=2",
        {"Authorization": "Bearer T0KEN"},
        timeout=5,
    )
    local = MCPServer.stdio("local", "srv", ["--x"], env={"API_TOKEN": "T0KEN"})
    assert web.describe() == {
        "name": "web",
        "transport": "http",
        "url": "https://***@example.com/mcp?token=***&v=***",
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
        assert "user" not in shown


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
    with pytest.raises(
        McpConfigError, match=r"set \$RUIZN_MCP_ENV_LOCAL_API_TOKEN \(or API_TOKEN\) to resume"
    ):
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


def test_tool_names_fit_the_api_whatever_order_they_are_listed_in() -> None:
    listed = [
        ("fs", "read_file"),
        ("fs", "files.read"),
        ("server", "x" * 200),
        ("server", "x" * 199),
    ]
    names = api_names(listed)
    assert names["fs", "read_file"] == "mcp__fs__read_file"
    assert names["fs", "files.read"] == "mcp__fs__files_read"
    long, longer = names["server", "x" * 199], names["server", "x" * 200]
    assert len(long) == len(longer) == 64
    assert long != longer
    # A name depends on the tool alone, never on its place in the list.
    assert api_names(listed[::-1]) == names


@pytest.mark.parametrize(
    ("listed", "message"),
    [
        (
            [("fs", "files.read"), ("fs", "files/read")],
            "MCP server fs: its tools 'files.read' and 'files/read' both become"
            " mcp__fs__files_read; rename one of them on the server",
        ),
        (
            # `a_` + `_x` and `a` + `__x`... : any two servers' tools may meet too.
            [("a", "_x"), ("a_", "x")],
            "MCP server a: its tool '_x' and tool 'x' of MCP server a_ both become"
            " mcp__a___x; rename one of the tools or servers",
        ),
        ([("fs", "read"), ("fs", "read")], "MCP server fs: it lists tool 'read' twice"),
    ],
)
def test_tools_whose_names_meet_are_refused_naming_both(
    listed: list[tuple[str, str]], message: str
) -> None:
    for order in (listed, listed[::-1]):
        with pytest.raises(McpStartupError) as caught:
            api_names(order)
        assert str(caught.value) == message


def test_results_without_text_are_described() -> None:
    structured = mt.CallToolResult(content=[], structured_content={"temp": 21.5})
    assert _render(structured) == ['{"temp": 21.5}']
    assert _render(mt.CallToolResult(content=[])) == ["(the tool returned no content)"]
    big = base64.b64encode(b"\0" * (3 * 1024 * 1024)).decode()
    image = mt.CallToolResult(content=[mt.ImageContent(type="image", data=big, mime_type="x/y")])
    # An image is passed on as a block; what the API would refuse (here: not an image type
    # it takes) becomes a line when the result is fitted to the run (ruizn.media.fit).
    content, tally = fit(content_of(_render(image)), MediaTally())
    assert content == (
        "[image not shown: x/y, about 3.0 MB: its bytes are not a JPEG, PNG, GIF or WebP image,"
        " the types the model takes]"
    )
    assert tally == MediaTally()


def test_a_tool_whose_schema_the_api_would_refuse_is_found_out() -> None:
    assert input_schema_problem({"type": "object", "properties": {"a": {"type": "string"}}}) is None
    assert input_schema_problem({"type": "object", "properties": {"a": {"type": "nope"}}})
    assert input_schema_problem({"type": "string"}) == "its type is not 'object'"


# -- URLs with secrets in them ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://example.com/mcp", "https://example.com/mcp"),
        ("https://example.com:8443/a/b", "https://example.com:8443/a/b"),
        ("https://example.com/mcp?token=abc&v=2", "https://example.com/mcp?token=***&v=***"),
        ("https://example.com/mcp?abc123", "https://example.com/mcp?***"),
        ("https://example.com/mcp?a=&b", "https://example.com/mcp?a=&***"),
        ("https://usr:pwd@example.com/mcp", "https://***@example.com/mcp"),
        ("https://tok@example.com/mcp#frag", "https://***@example.com/mcp#***"),
        ("http://[::1/", "<unparsable URL>"),
    ],
)
def test_a_url_is_shown_without_its_query_values_userinfo_or_fragment(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert redact_url(shown) == shown  # hiding twice changes nothing
    for secret in url_secrets(url):
        assert secret not in shown


def test_url_secrets_include_the_decoded_form() -> None:
    assert url_secrets("https://u%40x:p%21@h/m?t=a%2Bb") == (
        "u%40x:p%21",
        "u@x:p!",
        "u%40x",
        "u@x",
        "p%21",
        "p!",
        "a%2Bb",
        "a+b",
    )


def test_a_url_token_never_reaches_the_record_a_repr_or_an_error() -> None:
    url = "https://example.com/mcp?token=T0KEN-0123456789"
    web = MCPServer.http("web", url)
    assert web.describe()["url"] == "https://example.com/mcp?token=***"
    assert "T0KEN" not in repr(web)
    assert web.secret_values() == ("T0KEN-0123456789",)
    with pytest.raises(McpConfigError) as caught:
        MCPServer.http("web", "ftp://example.com/x?token=T0KEN-0123456789")
    assert "T0KEN" not in str(caught.value)


def test_a_recorded_url_with_secrets_is_given_again_from_the_environment() -> None:
    url = "https://example.com/mcp?token=T0KEN-0123456789"
    record = MCPServer.http("web", url).describe()
    assert url_env_name("web") == "RUIZN_MCP_URL_WEB"
    again = MCPServer.from_record(record, environ={"RUIZN_MCP_URL_WEB": url})
    assert again.url == url
    rotated = "https://example.com/mcp?token=NEW-0123456789"
    assert MCPServer.from_record(record, environ={"RUIZN_MCP_URL_WEB": rotated}).url == rotated
    assert MCPServer.from_record(record, url=rotated, environ={}).url == rotated
    with pytest.raises(McpConfigError) as caught:
        MCPServer.from_record(record, environ={})
    assert str(caught.value) == (
        "MCP server web: its URL https://example.com/mcp?token=*** had secret parts:"
        " give it again as $RUIZN_MCP_URL_WEB"
    )


def test_a_url_given_again_must_be_the_recorded_one() -> None:
    record = MCPServer.http("web", "https://example.com/mcp?token=T0KEN-0123456789").describe()
    for other in (
        "https://evil.example/mcp?token=T0KEN-0123456789",
        "https://example.com/other?token=T0KEN-0123456789",
        "https://example.com/mcp?key=T0KEN-0123456789",
    ):
        with pytest.raises(McpConfigError) as caught:
            MCPServer.from_record(record, environ={"RUIZN_MCP_URL_WEB": other})
        message = str(caught.value)
        assert message.startswith("MCP server web: the URL given again (")
        assert "T0KEN" not in message


def test_a_url_without_secrets_or_from_an_older_log_needs_nothing_again() -> None:
    plain = MCPServer.http("web", "https://example.com/mcp").describe()
    assert MCPServer.from_record(plain, environ={}).url == "https://example.com/mcp"
    # A log written before query values were hidden holds the URL whole: it still resumes.
    old = {"name": "web", "transport": "http", "url": "https://example.com/mcp?v=2"}
    assert MCPServer.from_record(old, environ={}).url == "https://example.com/mcp?v=2"


def test_the_cli_reads_a_url_from_the_environment_to_keep_it_out_of_ps() -> None:
    url = "https://example.com/mcp?token=T0KEN-0123456789"
    [web] = parse_cli(["web"], environ={"RUIZN_MCP_URL_WEB": url})
    assert web == MCPServer.http("web", url)
    with pytest.raises(McpConfigError, match=r"\$RUIZN_MCP_URL_WEB is not an http\(s\) URL"):
        parse_cli(["web"], environ={"RUIZN_MCP_URL_WEB": "rm -rf /"})
    with pytest.raises(McpConfigError) as caught:
        parse_cli(["web"], environ={})
    assert str(caught.value) == (
        "--mcp 'web': expected NAME=COMMAND or NAME=URL"
        " (or NAME alone, with the URL in $RUIZN_MCP_URL_WEB)"
    )


def test_resume_takes_urls_given_again_for_the_runs_servers_only() -> None:
    url = "https://example.com/mcp?token=T0KEN-0123456789"
    recorded = [MCPServer.http("web", url).describe()]
    [web] = servers_from_records(recorded, urls={"web": url}, environ={})
    assert web.url == url
    with pytest.raises(McpConfigError, match="the run has no MCP server 'gh'"):
        servers_from_records(recorded, urls={"gh": url}, environ={})


def test_a_secret_looking_command_word_is_hidden_and_taken_again_from_the_environment() -> None:
    (server,) = parse_cli(["e=env GH_TOKEN=ghp-abcdef123456 --env=MY_SECRET=hunter2222 cmd x=1"])
    record = server.describe()
    assert record["args"] == ["GH_TOKEN=***", "--env=MY_SECRET=***", "cmd", "x=1"]
    assert "ghp-abcdef123456" not in repr(server)
    assert set(server.secret_values()) == {"ghp-abcdef123456", "hunter2222"}
    again = MCPServer.from_record(
        record, environ={"GH_TOKEN": "ghp-again12345", "RUIZN_MCP_ENV_E_MY_SECRET": "pw-again99"}
    )
    assert again.args == ("GH_TOKEN=ghp-again12345", "--env=MY_SECRET=pw-again99", "cmd", "x=1")
    with pytest.raises(McpConfigError, match=r"GH_TOKEN=\*\*\* needs its value again"):
        MCPServer.from_record(record, environ={})
