"""From the command line to a run's settings: the options `settings_options` collects, as
one typed record (`RunOptions`), over the config files' values; the files they name (an
output schema, hook files) read; the MCP servers they describe parsed. Imported only by the
commands that make a run, never by `--help`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import click
from attrs import field, fields, frozen

from ruizn.cli.exits import fail
from ruizn.cli.options import UsageFailure
from ruizn.defaults import (
    DEFAULT_APPROVAL,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_STEPS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL,
    DEFAULT_OUTPUT_RETRIES,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRY_BASE_DELAY,
    DEFAULT_SHELL_TIMEOUT,
    DEFAULT_SYSTEM,
    DEFAULT_TOOL_CONCURRENCY,
    DEFAULT_TOOL_TIMEOUT,
    ApprovalMode,
    Effort,
    ThinkingMode,
)

if TYPE_CHECKING:
    from ruizn.effects.mcp.config import MCPServer
    from ruizn.settings import RunSettings

_words = field(default=(), converter=tuple)


@frozen(kw_only=True)
class RunOptions:
    """A run's options as the command line (and the config files under it) give them, by
    their option names; each default is the setting's own (ruizn.defaults). `ruizn tools`
    gives a few; `run`, `chat`, `batch` and `submit` give them all."""

    workspace: str = "."
    model: str = DEFAULT_MODEL
    max_steps: int = DEFAULT_MAX_STEPS
    max_tokens: int = DEFAULT_MAX_TOKENS
    max_cost: float | None = None
    max_context: int | None = None
    compact_at: int | None = None
    compact: Literal["on", "off"] = "on"
    compact_instructions: str | None = None
    system: str = DEFAULT_SYSTEM
    read_timeout: float = DEFAULT_READ_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES
    thinking: ThinkingMode | None = None
    show_thinking: bool = False
    effort: Effort | None = None
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT
    tool_concurrency: int = DEFAULT_TOOL_CONCURRENCY
    tools: tuple[str, ...] = _words
    no_plugins: bool = False
    mcp: tuple[str, ...] = _words
    mcp_headers: tuple[str, ...] = _words
    mcp_envs: tuple[str, ...] = _words
    allow_secret_files: bool = False
    shell: bool = False
    sandbox: bool = True
    shell_network: bool = False
    shell_allow_read: tuple[str, ...] = _words
    shell_allow_domains: tuple[str, ...] = _words
    allow_commands: tuple[str, ...] = _words
    shell_timeout: float = DEFAULT_SHELL_TIMEOUT
    approval: ApprovalMode = DEFAULT_APPROVAL
    output_schema: str | None = None
    """A JSON Schema file (read when the settings are made)."""
    output_retries: int = DEFAULT_OUTPUT_RETRIES
    hooks_files: tuple[str, ...] = _words
    no_checkpoints: bool = False
    no_project_instructions: bool = False


def options_from(given: Mapping[str, Any], *, profile: str | None = None) -> RunOptions:
    """The record of click's values for a run's options, each one the command line did not
    give taken from the config files (ruizn.configlayers); the one place the command's
    untyped values become typed."""
    from ruizn.cli.configured import configured

    values = dict(given)
    configured(values, workspace=values.get("workspace", "."), profile=profile)
    known = {f.name for f in fields(RunOptions)}
    unknown = sorted(set(values) - known)
    if unknown:  # pragma: no cover - a command's options and this record disagree
        raise click.ClickException(f"not a run option: {unknown[0]}")
    return RunOptions(**values)


def settings_from_cli(options: RunOptions) -> tuple[RunSettings, tuple[MCPServer, ...]]:
    """The run's settings, and the MCP servers with their header values (which are never
    part of the settings). A bad value or file is one line and exit 2."""
    from ruizn.settings import ConfigError, RunSettings

    servers = _servers(options)
    try:
        settings = RunSettings(
            model=options.model,
            max_steps=options.max_steps,
            max_tokens=options.max_tokens,
            system=options.system,
            workspace=options.workspace,
            read_timeout=options.read_timeout,
            tool_timeout=options.tool_timeout,
            max_retries=options.max_retries,
            retry_base_delay=retry_base_delay(),
            max_cost=options.max_cost,
            max_context=options.max_context,
            tool_concurrency=options.tool_concurrency,
            allow_secret_files=options.allow_secret_files,
            checkpoints=not options.no_checkpoints,
            shell=options.shell,
            sandbox=options.sandbox,
            shell_network=options.shell_network,
            shell_allow_read=options.shell_allow_read,
            shell_allow_domains=options.shell_allow_domains,
            allow_commands=options.allow_commands,
            shell_timeout=options.shell_timeout,
            approval=options.approval,
            thinking=options.thinking,
            show_thinking=options.show_thinking,
            effort=options.effort,
            tool_specs=options.tools,
            plugins=not options.no_plugins,
            mcp_servers=tuple(server.describe() for server in servers),
            project_instructions=not options.no_project_instructions,
            output_schema=None
            if options.output_schema is None
            else read_schema(options.output_schema),
            output_retries=options.output_retries,
            hooks=read_hooks(options.hooks_files),
            compact_at=0 if options.compact == "off" else options.compact_at,
            compact_instructions=options.compact_instructions,
        )
    except (ConfigError, TypeError) as exc:  # (TypeError: what settings_from says too)
        fail(str(exc))
    return settings, servers


def _servers(options: RunOptions) -> tuple[MCPServer, ...]:
    if not (options.mcp or options.mcp_headers or options.mcp_envs):
        return ()
    from ruizn.cli.sdklog import install
    from ruizn.effects.mcp.config import McpConfigError, parse_cli

    try:
        servers = parse_cli(options.mcp, options.mcp_headers, env_specs=options.mcp_envs)
    except McpConfigError as exc:
        raise UsageFailure(str(exc)) from None
    # Their values are secrets too in what the SDK logs.
    install(value for server in servers for value in server.secret_values())
    return servers


def retry_base_delay() -> float:
    # Tests set this to keep retry back-offs short; users keep the default.
    raw = os.environ.get("RUIZN_RETRY_BASE_DELAY")
    if raw is None:
        return DEFAULT_RETRY_BASE_DELAY
    try:
        return float(raw)
    except ValueError:
        fail(f"RUIZN_RETRY_BASE_DELAY must be a number of seconds, not {raw!r}")


def read_schema(path: str) -> dict[str, Any]:
    """--output-schema FILE: a JSON Schema, or one line saying why not (exit 2)."""
    import json

    from ruizn.rules import schema_problem

    try:
        with open(path, encoding="utf-8") as handle:
            schema = json.load(handle)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        fail(f"--output-schema {path}: cannot read it as JSON ({type(exc).__name__}: {exc})")
    problem = schema_problem(schema)
    if problem is not None:
        fail(f"--output-schema {path}: {problem}")
    assert isinstance(schema, dict)  # schema_problem says so
    return schema


def read_hooks(paths: tuple[str, ...]) -> tuple[Any, ...]:
    """--hooks FILE...: their hooks, in order, or one line saying what is wrong (exit 2)."""
    if not paths:
        return ()
    from pathlib import Path

    from ruizn.effects.hooks.config import HookConfigError, parse, read_json, unrun_events

    specs: list[Any] = []
    for path in paths:
        try:
            data = read_json(Path(path))
            specs.extend(parse(data, path, own=True))
            warning = unrun_events(data, path)
        except HookConfigError as exc:
            fail(f"--hooks {exc}")
        if warning is not None:
            click.echo(f"ruizn: {warning}", err=True)
    return tuple(specs)


__all__: Sequence[str] = (
    "RunOptions",
    "options_from",
    "read_hooks",
    "read_schema",
    "retry_base_delay",
    "settings_from_cli",
)
