"""`ruizn tools`: every tool a run would have, and the MCP servers' with --mcp."""

from __future__ import annotations

import click

from ruizn.cli.common import reading, run_root
from ruizn.cli.exits import EXIT_OK, Exit
from ruizn.cli.options import mcp_header_option, tool_options, where_options

__all__ = ["tools_command"]


@click.command("tools")
@click.option("--json", "as_json", is_flag=True, help="Print the tools as a JSON array.")
@click.option(
    "--mcp",
    "mcp",
    multiple=True,
    metavar="NAME=COMMAND|URL",
    help="Also list the tools of this MCP server (started, listed, stopped); as `ruizn run`"
    " takes it. Repeatable.",
)
@mcp_header_option
@tool_options
@where_options
def tools_command(
    *,
    as_json: bool,
    mcp: tuple[str, ...],
    mcp_headers: tuple[str, ...],
    tools: tuple[str, ...],
    no_plugins: bool,
    workspace: str,
    log_dir: str | None,
) -> None:
    """List every available tool: its name, where it comes from, whether it only reads, and
    its input schema. With --mcp, the servers' tools too."""
    import json

    from ruizn.cli.live import mcp_tools_of, toolbox_of
    from ruizn.cli.options import settings_from_cli
    from ruizn.terminal import visible

    settings, servers = settings_from_cli(
        workspace=workspace, tools=tools, no_plugins=no_plugins, mcp=mcp, mcp_headers=mcp_headers
    )
    toolbox = toolbox_of(settings, run_root(workspace, log_dir))
    found = [(loaded.tool, loaded.source) for loaded in toolbox.tools]
    if servers:
        found += [(tool, tool.source()) for tool in mcp_tools_of(settings, servers)]
    listed = [
        {
            "name": tool.name,
            "source": {"kind": source.kind.value, "ref": source.ref},
            "read_only": bool(tool.read_only),
            "description": tool.description,
            "input_schema": tool.input_schema,
        }
        for tool, source in found
    ]

    def show() -> int:
        if as_json:
            click.echo(json.dumps(listed, ensure_ascii=False, indent=2))
            return EXIT_OK
        for (_, source), entry in zip(found, listed, strict=True):
            reads = " · read-only" if entry["read_only"] else ""
            click.echo(visible(f"{entry['name']}  ({source.describe()}{reads})"))
            for line in str(entry["description"]).splitlines():
                click.echo(visible(f"  {line}".rstrip()))
            schema = json.dumps(entry["input_schema"], ensure_ascii=False, separators=(",", ":"))
            click.echo(visible(f"  input schema: {schema}"))
        return EXIT_OK

    raise Exit(reading(show))
