"""Tools from MCP servers, through the official `mcp` SDK (no protocol code of ruizn's own).

`McpToolset` is an async context manager: it starts or connects every server, lists their
tools and yields one ruizn tool per MCP tool, named `mcp__SERVER__TOOL`, with the server's
own description and input schema. Leaving it stops every server, on every way out.

Why a task per connection: an MCP `Client` is a stack of task groups and cancel scopes, and
anyio requires those to be exited by the task that entered them, in order. A tool call runs
inside the runner's own cancel scopes (its timeout, Ctrl-C), so it must never enter or exit a
connection itself. Each connection therefore lives in a task of its own (`Connection.run`),
in a task group that the toolset owns; a call only sends a request over a live session, and
a restart starts a new connection task. The toolset's task group is entered and exited by
the task that holds the toolset open around the whole run (`async with McpToolset(...)`).

What a server may not do (README: MCP servers, Trust): show the user terminal controls or a
secret through its stderr (every quoted line goes through `ruizn.terminal.visible` and a
`Redactor` of the environment's secrets and the servers' own), fill the disk through its
stderr file (`StderrFile` keeps its head and tail), make two tools answer to one name
(refused at start), or read ruizn's environment (`keep_secrets_from_children`).

Beside it in this package: `connection` (one server's connection and its tools), `names`
(API names, collisions, schemas), `results` (a call's answer as a ToolResult), `stderr`
(the capped stderr file), `text` (one-line wording) and `config` (which servers a run uses).

Faults, as the model sees them: a call past its timeout is `timeout` (invoke_tool's limit;
the SDK then tells the server the request was cancelled); `isError`, a JSON-RPC error, an
invalid result or a server that went away is `runtime_error`. A server that stopped is
started again once, before the next call to it, and that call's result says so.
"""

from __future__ import annotations

import ctypes
import os
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import anyio
import anyio.abc
import mcp.types as mt
from attrs import frozen

from ruizn.defaults import DEFAULT_TOOL_TIMEOUT
from ruizn.effects.mcp.config import MCPServer
from ruizn.effects.mcp.connection import McpTool, Server, tool_class
from ruizn.effects.mcp.names import McpStartupError, api_names, input_schema_problem, mcp_ref
from ruizn.effects.mcp.stderr import StderrFile, open_problem, open_stderr_file
from ruizn.effects.mcp.text import (
    Shown,
)
from ruizn.redact import Redactor, secrets_from_env
from ruizn.state import JsonObject
from ruizn.terminal import Notice, visible
from ruizn.toolsource import SourceKind, ToolSource

DEFAULT_STARTUP_TIMEOUT = 30.0


class McpToolset:
    """Start `servers`, yield their tools, stop them all on the way out.

    `default_timeout` is each call's limit where the server sets none. `startup_timeout`
    bounds start-up, `initialize` and the tool listing of each server. A server's stderr goes
    to `stderr_dir/mcp-NAME.stderr` when given (else to a temporary file), capped (see
    `StderrFile`); its last line is quoted when the server fails. `on_notice` hears of
    restarts and of non-JSON-RPC output. Everything of a server's that is quoted, in a notice,
    a `McpStartupError` or a result's "its stderr ends", is made visible (no terminal control
    acts) and redacted: the secrets of `environ` (ANTHROPIC_API_KEY, `*_TOKEN`, ...) and the
    servers' own header values, `env` values and URL secrets.
    """

    def __init__(
        self,
        servers: Sequence[MCPServer],
        *,
        default_timeout: float = DEFAULT_TOOL_TIMEOUT,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        max_restarts: int = 1,
        cwd: Path | None = None,
        stderr_dir: Path | None = None,
        on_notice: Notice | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        names = [s.name for s in servers]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"two MCP servers are named {name!r}")
        self.servers = tuple(servers)
        self._default_timeout = default_timeout
        self._startup_timeout = startup_timeout
        self._max_restarts = max_restarts
        self._cwd = cwd
        self._stderr_dir = stderr_dir
        self._shown = shown_safely(
            environ if environ is not None else os.environ,
            [value for server in self.servers for value in server.secret_values()],
        )
        notice = on_notice or (lambda _text: None)
        self._notice: Notice = lambda text: notice(self._shown(text))
        self._group: anyio.abc.TaskGroup | None = None
        self._running: list[Server] = []
        # Each server's tools as last listed, those with a valid schema (see `_valid`).
        self._listings: dict[str, list[mt.Tool]] = {}
        self.tools: tuple[McpTool, ...] = ()

    def describe(self) -> tuple[JsonObject, ...]:
        """The servers as a run records them (RunStarted): no secret values."""
        return tuple(server.describe() for server in self.servers)

    def sources(self) -> tuple[ToolSource, ...]:
        """Where each tool came from (RunStarted.tool_sources), once the toolset is open."""
        return tuple(tool.source() for tool in self.tools)

    def alive(self, name: str) -> bool:
        """Whether server `name` is connected and not known to have stopped."""
        return any(server.name == name and server.alive for server in self._running)

    async def __aenter__(self) -> tuple[McpTool, ...]:
        if self._group is not None:
            raise RuntimeError("an McpToolset is entered once")
        if any(server.transport == "stdio" for server in self.servers):
            # Before the first server starts: from then on a server could read the key.
            keep_secrets_from_children()
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        try:
            self.tools = await self._start_all(group)
        except McpStartupError as exc:
            # Its reason may quote the server (its stderr, its error text): shown safely.
            failure = McpStartupError(exc.server, self._shown(exc.reason))
            await self._close(type(failure), failure, None)
            raise failure from None
        except BaseException as exc:
            await self._close(type(exc), exc, exc.__traceback__)
            raise
        return self.tools

    async def _start_all(self, group: anyio.abc.TaskGroup) -> tuple[McpTool, ...]:
        for config in self.servers:  # one by one, so _close closes what was opened
            self._running.append(self._server(config, group))
        listings: dict[str, list[mt.Tool]] = {}
        failures: list[McpStartupError] = []

        async def start(server: Server) -> None:
            try:
                listings[server.name] = await server.start()
            except McpStartupError as exc:
                failures.append(exc)

        # All at once: five servers that take two seconds each should cost two seconds.
        async with anyio.create_task_group() as starting:
            for server in self._running:
                starting.start_soon(start, server)
        if failures:
            raise first_failure(failures)
        self._listings = {
            server.name: self._valid(server, listings[server.name]) for server in self._running
        }
        return self._all_tools(self._listings)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._close(exc_type, exc, tb)

    async def _close(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        group, self._group = self._group, None
        for server in self._running:
            server.stop()
        try:
            if group is None:
                return None
            # Waits for every connection task, so every server has been stopped (the SDK
            # closes stdin, then SIGTERMs and SIGKILLs the process group) when this returns.
            # Only a cancellation is the group's business; any other exception passed in would
            # come back wrapped in an ExceptionGroup instead of reaching the caller as it is.
            if isinstance(exc, anyio.get_cancelled_exc_class()):
                return await group.__aexit__(exc_type, exc, tb)
            return await group.__aexit__(None, None, None)
        finally:
            for server in self._running:
                server.close_stderr()

    def _server(self, config: MCPServer, group: anyio.abc.TaskGroup) -> Server:
        try:
            stderr = self._open_stderr(config.name)
        except OSError as exc:
            raise McpStartupError(
                config.name, f"cannot open a file for its stderr: {open_problem(exc)}"
            ) from None
        return Server(
            config,
            group,
            startup_timeout=self._startup_timeout,
            max_restarts=self._max_restarts,
            cwd=self._cwd,
            stderr=stderr,
            notice=self._notice,
            shown=self._shown,
        )

    def _open_stderr(self, name: str) -> StderrFile:
        if self._stderr_dir is None:
            with tempfile.TemporaryFile() as temporary:  # unlinked: it lives as long as an fd
                return StderrFile(os.dup(temporary.fileno()))
        return StderrFile(open_stderr_file(self._stderr_dir, f"mcp-{name}.stderr"))

    @property
    def list_changed(self) -> bool:
        """Whether a server said its tool list changed (notifications/tools/list_changed)
        since its tools were last listed."""
        return any(server.list_changed for server in self._running)

    async def relist(self) -> Relisted | None:
        """List again the tools of every server that said its list changed, checked as at
        start: a tool whose schema is invalid is left out (a notice says so), and a list that
        would give two tools one API name is refused (McpStartupError naming them; the toolset
        keeps its previous tools). None when no server said its list changed."""
        changed = [server for server in self._running if server.list_changed]
        if not changed:
            return None
        listings = dict(self._listings)
        for server in changed:
            server.list_changed = False  # a notice that comes during the listing lists again
            listings[server.name] = self._valid(server, await server.relist())
        tools = self._all_tools(listings)
        self._listings, self.tools = listings, tools
        names = {server.name for server in changed}
        return Relisted(
            servers=tuple(server.name for server in self._running if server.name in names),
            tools=tuple(tool for tool in tools if tool.server_name in names),
        )

    def _valid(self, server: Server, specs: list[mt.Tool]) -> list[mt.Tool]:
        valid = []
        for spec in specs:
            problem = input_schema_problem(spec.input_schema)
            if problem is not None:
                self._notice(
                    f"MCP server {server.name}: tool {spec.name!r} left out:"
                    f" its input schema is invalid ({problem})"
                )
                continue
            valid.append(spec)
        return valid

    def _all_tools(self, listings: dict[str, list[mt.Tool]]) -> tuple[McpTool, ...]:
        """Every server's tools, one API name each (or McpStartupError naming a collision)."""
        offered = [(server, spec) for server in self._running for spec in listings[server.name]]
        names = api_names([(server.name, spec.name) for server, spec in offered])
        return tuple(
            tool_class(server.name, names[server.name, spec.name], spec)(
                server, timeout=server.config.timeout or self._default_timeout
            )
            for server, spec in offered
        )


@frozen(kw_only=True)
class Relisted:
    """The servers whose tool lists changed, and their tools now (`McpToolset.relist`)."""

    servers: tuple[str, ...]
    tools: tuple[McpTool, ...]


def shown_safely(environ: Mapping[str, str], secrets: Iterable[str] = ()) -> Shown:
    """How text from an MCP server is shown: secrets redacted (those of `environ`, see
    `ruizn.redact`, and `secrets`), then every terminal control made visible."""
    redactor = Redactor(secrets=(*secrets_from_env(environ), *secrets))
    return lambda text: visible(redactor.redact(text))


def keep_secrets_from_children() -> bool:
    """Make this process non-dumpable where the OS allows it (Linux: `prctl(PR_SET_DUMPABLE,
    0)`), so that no other process of the same user, such as an MCP server ruizn started, can
    read its environment (`/proc/PID/environ`, where ANTHROPIC_API_KEY is) or its memory.

    What remains (measured, README: MCP servers): a process running as root that holds
    CAP_SYS_PTRACE, CAP_PERFMON or CAP_SYS_ADMIN still reads the environment. The setting
    lasts for the life of the process (no core dumps; a debugger or profiler of the same user
    cannot attach); children are dumpable as usual (exec resets it). Returns whether it took
    effect.
    """
    if not sys.platform.startswith("linux"):
        return False
    pr_set_dumpable = 4
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(pr_set_dumpable, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):  # no libc to call: nothing more can be done
        return False


def first_failure(failures: list[McpStartupError]) -> McpStartupError:
    first = failures[0]
    if len(failures) == 1:
        return first
    others = ", ".join(f.server for f in failures[1:])
    return McpStartupError(first.server, f"{first.reason} (also failed: {others})")


def mcp_tool_changes(
    *,
    recorded_sources: Iterable[ToolSource],
    recorded_tools: Iterable[JsonObject],
    current_sources: Iterable[ToolSource],
    current_tools: Iterable[JsonObject],
) -> dict[str, str]:
    """For resume: each MCP tool a run recorded (its `tool_sources` and its `tools`, the API
    schemas) that its server now lists differently, as {API name: one line saying what
    changed}; the current side is `McpToolset.sources()` and the open tools' `schema()`.

    Changed means: no longer listed; its API name now maps to another of the server's tools,
    or its own name to another API name; its input schema differs; its read-only flag
    (readOnlyHint) flipped. A call of such a tool must not run as recorded: what the user
    approved, or what ruizn re-runs because it only reads, is no longer what would run.
    A log from before MCP sources were recorded is compared by API name and schema alone.
    """
    recorded_schema = {str(t.get("name")): t.get("input_schema") for t in recorded_tools}
    now_schema = {str(t.get("name")): t.get("input_schema") for t in current_tools}
    now = [s for s in current_sources if s.kind is SourceKind.MCP]
    now_by_ref = {s.ref: s for s in now}
    now_by_name = {s.tool: s for s in now}
    problems: dict[str, str] = {}
    sourced: set[str] = set()
    for source in recorded_sources:
        if source.kind is not SourceKind.MCP:
            continue
        sourced.add(source.tool)
        what = f"{source.tool} ({mcp_ref(source.ref)})"
        current = now_by_ref.get(source.ref)
        if current is None:
            holder = now_by_name.get(source.tool)
            problems[source.tool] = (
                f"{what}: its server no longer lists it"
                if holder is None
                else f"{what}: that name is now {mcp_ref(holder.ref)}"
            )
            continue
        changes = []
        if current.tool != source.tool:
            changes.append(f"it is now named {current.tool}")
        if recorded_schema.get(source.tool) != now_schema.get(current.tool):
            changes.append("its input schema changed")
        if current.read_only != source.read_only:
            changes.append(
                "it now says it only reads (readOnlyHint)"
                if current.read_only
                else "it no longer says it only reads (readOnlyHint)"
            )
        if changes:
            problems[source.tool] = f"{what}: {'; '.join(changes)}"
    for name, schema in recorded_schema.items():
        if not name.startswith("mcp__") or name in sourced:
            continue
        if name not in now_schema:
            problems[name] = f"{name}: no MCP server lists a tool of that name now"
        elif now_schema[name] != schema:
            problems[name] = f"{name}: its input schema changed"
    return problems
