"""A real MCP server (the `mcp` SDK's MCPServer) for ruizn's tests.

Run over stdio: `python tests/mcp_servers/demo.py`; over Streamable HTTP on 127.0.0.1:
`python tests/mcp_servers/demo.py --http PORT`. Its tools cover what ruizn must handle:
text, images and other content, errors, slowness, a crash, garbage on stdout.
"""

from __future__ import annotations

import base64
import os
import sys

import anyio
from mcp.server.mcpserver import Audio, Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    BlobResourceContents,
    EmbeddedResource,
    ResourceLink,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)

# 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)
READ_ONLY = ToolAnnotations(read_only_hint=True)

server = MCPServer("demo")


@server.tool(description="Echo the text back, unchanged.", annotations=READ_ONLY)
def echo(text: str) -> str:
    return text


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> str:
    return str(a + b)


@server.tool(description="The server's process id.", annotations=READ_ONLY)
def pid() -> str:
    return str(os.getpid())


@server.tool(description="A caption and a 1x1 PNG.", annotations=READ_ONLY, structured_output=False)
def picture() -> list[object]:
    return ["a tiny picture:", Image(data=PNG, format="png")]


@server.tool(
    description="One block of every other content type.",
    annotations=READ_ONLY,
    structured_output=False,
)
def assorted() -> list[object]:
    return [
        TextContent(type="text", text="first"),
        Audio(data=b"RIFF0000WAVE", format="wav"),
        EmbeddedResource(
            type="resource",
            resource=TextResourceContents(
                uri="file:///notes.txt", mime_type="text/plain", text="note text"
            ),
        ),
        EmbeddedResource(
            type="resource",
            resource=BlobResourceContents(
                uri="file:///data.bin", blob=base64.b64encode(b"\0" * 2048).decode()
            ),
        ),
        ResourceLink(
            type="resource_link",
            name="report",
            uri="https://example.com/report.pdf",
            mime_type="application/pdf",
        ),
        TextContent(type="text", text="last"),
    ]


@server.tool(description="Always fails with the given message.")
def fail(message: str) -> str:
    raise ToolError(message)


@server.tool(description="Sleeps, then says how long.", annotations=READ_ONLY)
async def slow(seconds: float) -> str:
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(description="Exits the server process at once, without answering.")
def crash() -> str:
    os._exit(3)


@server.tool(description="Writes a line that is not JSON-RPC to stdout, then answers.")
def garbage() -> str:
    os.write(1, b"this is not json-rpc\n")
    return "answered after the garbage"


@server.tool(
    description="The value of one HTTP request header, or '(none)'.", annotations=READ_ONLY
)
def header(name: str, ctx: Context) -> str:
    headers = ctx.headers or {}
    return headers.get(name.lower(), "(none)")


@server.tool(description="Environment variable of the server process, or '(unset)'.")
def getenv(name: str) -> str:
    return os.environ.get(name, "(unset)")


def main() -> None:
    print(f"demo server pid {os.getpid()} starting", file=sys.stderr, flush=True)
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()


if __name__ == "__main__":
    main()
