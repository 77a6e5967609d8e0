"""`ruizn tools`: every tool a run would have, and the MCP servers' with --mcp."""

from __future__ import annotations

from typing import Any

import click

from ruizn.cli.agents_cmd import agent_options
from ruizn.cli.common import reading, run_root
from ruizn.cli.exits import EXIT_OK, Exit
from ruizn.cli.options import mcp_header_option, tool_options, where_options

__all__ = ["agent_tool_of", "tools_command"]


def agent_tool_of(workspace: str, choices: dict[str, Any]) -> list[tuple[Any, Any]]:
    """The `agent` tool as a run here would offer it (a workspace's definitions listed
    too, as they would be once accepted), or nothing when the run would have no subagents."""
    from ruizn.agentdefs import with_general
    from ruizn.cli.agents_cmd import found_definitions
    from ruizn.shell.children import AgentTool
    from ruizn.toolsource import SourceKind, ToolSource

    if choices.get("subagents") is False or choices.get("max_depth") == 0:
        return []
    own, theirs = found_definitions(workspace, tuple(choices.get("agents_dirs") or ()))
    if not (own or theirs or choices.get("subagents")):
        return []
    tool = AgentTool(with_general((*own, *theirs)), None)
    return [(tool, ToolSource(tool=tool.name, kind=SourceKind.BUILTIN, ref=tool.name))]


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
@click.option(
    "--shell",
    is_flag=True,
    help="Also list the shell's tools (bash, bash_output, bash_kill), as `ruizn run --shell`"
    " offers them.",
)
@click.option(
    "--shell-allow-domain",
    "shell_allow_domains",
    multiple=True,
    metavar="DOMAIN",
    help="With --shell: the hosts commands may reach through the run's proxy, as `ruizn run`"
    " takes it (shown under bash). Repeatable.",
)
@mcp_header_option
@tool_options
@agent_options
@where_options
def tools_command(
    *,
    as_json: bool,
    mcp: tuple[str, ...],
    shell: bool,
    shell_allow_domains: tuple[str, ...],
    mcp_headers: tuple[str, ...],
    tools: tuple[str, ...],
    no_plugins: bool,
    workspace: str,
    log_dir: str | None,
    **agent_choices: Any,
) -> None:
    """List every available tool: its name, where it comes from, whether it only reads, and
    its input schema. With --shell, the shell's tools too; with --mcp, the servers'."""
    import json

    from ruizn.cli.live import mcp_tools_of, toolbox_of
    from ruizn.cli.runoptions import options_from, settings_from_cli
    from ruizn.terminal import visible

    given = {
        "workspace": workspace,
        "tools": tools,
        "no_plugins": no_plugins,
        "mcp": mcp,
        "mcp_headers": mcp_headers,
        "shell_allow_domains": shell_allow_domains,  # (or the config file's)
    }
    settings, servers = settings_from_cli(options_from(given))
    toolbox = toolbox_of(settings, run_root(workspace, log_dir))
    found = [(loaded.tool, loaded.source) for loaded in toolbox.tools]
    found += agent_tool_of(workspace, agent_choices)
    if shell:
        found += _shell_tools(workspace, settings.shell_timeout)
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
    domains = settings.shell_allow_domains if shell else ()
    for entry in listed:  # where bash's commands may reach (--shell-allow-domain)
        if domains and entry["name"] == "bash":
            entry["allow_domains"] = list(domains)

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
            if "allow_domains" in entry:
                hosts = ", ".join(domains)
                click.echo(visible(f"  network: only through the run's proxy, to {hosts}"))
        return EXIT_OK

    raise Exit(reading(show))


def _shell_tools(workspace: str, timeout: float) -> list[tuple[Any, Any]]:
    """The shell's tools, as a run offers them after the built-ins and plug-ins (their
    descriptions and schemas do not depend on the sandbox, which is not started here)."""
    from pathlib import Path

    from ruizn.effects.tools.bash import ShellJobs, shell_config, shell_tools
    from ruizn.toolsource import SourceKind, ToolSource

    config = shell_config(
        workspace=Path(workspace),
        hidden=(),
        allow_read=(),
        network=False,
        sandbox=False,
        bwrap=None,
        environ={},
        timeout=timeout,
    )
    jobs = ShellJobs(config)
    try:
        return [
            (tool, ToolSource(tool=tool.name, kind=SourceKind.BUILTIN, ref=tool.name))
            for tool in shell_tools(jobs)
        ]
    finally:
        jobs.close()
