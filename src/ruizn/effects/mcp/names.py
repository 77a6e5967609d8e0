"""What an MCP tool is called before the API, and the error a server that cannot start raises."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import jsonschema
import jsonschema.exceptions

from ruizn.effects.mcp.text import (
    one_line,
)
from ruizn.state import JsonObject

# The API's limit on tool names.
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


MAX_NAME = 64


class McpStartupError(Exception):
    """A server could not be started, connected to or listed. One line, naming the server."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"MCP server {server}: {reason}")
        self.server = server
        self.reason = reason


def input_schema_problem(schema: JsonObject) -> str | None:
    try:
        validator = jsonschema.validators.validator_for(
            schema, default=jsonschema.Draft202012Validator
        )
        validator.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        return one_line(exc.message)
    if schema.get("type") != "object":
        return "its type is not 'object'"
    return None


def api_names(listed: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Each (server, tool)'s API name, or McpStartupError naming two tools that would share
    one. Never a suffix that depends on the order a server lists its tools in: an approval
    given for `x_y` must never run `x.y` after a resume that listed them the other way."""
    names: dict[tuple[str, str], str] = {}
    holders: dict[str, tuple[str, str]] = {}
    for server, tool in listed:
        name = api_name(server, tool)
        other = holders.setdefault(name, (server, tool))
        if other != (server, tool) or (server, tool) in names:
            raise collision(name, other, (server, tool))
        names[server, tool] = name
    return names


def api_name(server: str, tool: str) -> str:
    """`mcp__SERVER__TOOL` (Claude Code's convention), made to fit the API's rule: other
    characters become '_', and a name too long ends in a short hash of the whole."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", f"mcp__{server}__{tool}")
    if TOOL_NAME.fullmatch(name):
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - len(digest) - 1]}_{digest}"


def collision(name: str, one: tuple[str, str], other: tuple[str, str]) -> McpStartupError:
    (server_a, tool_a), (server_b, tool_b) = sorted([one, other])  # the same either way round
    if (server_a, tool_a) == (server_b, tool_b):
        return McpStartupError(server_a, f"it lists tool {tool_a!r} twice")
    if server_a == server_b:
        return McpStartupError(
            server_a,
            f"its tools {tool_a!r} and {tool_b!r} both become {name};"
            " rename one of them on the server",
        )
    return McpStartupError(
        server_a,
        f"its tool {tool_a!r} and tool {tool_b!r} of MCP server {server_b} both become"
        f" {name}; rename one of the tools or servers",
    )


def mcp_ref(ref: str) -> str:
    server, _, tool = ref.partition("/")
    return f"tool {tool!r} of MCP server {server}"
