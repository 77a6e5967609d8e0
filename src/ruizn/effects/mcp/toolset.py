"""Tools from MCP servers, through the official `mcp` SDK (no protocol code of ruizn's own).

`McpToolset` is an async context manager: it starts or connects every server, lists their
tools and yields one ruizn tool per MCP tool, named `mcp__SERVER__TOOL`, with the server's
own description and input schema. Leaving it stops every server, on every way out.

Why a task per connection: an MCP `Client` is a stack of task groups and cancel scopes, and
anyio requires those to be exited by the task that entered them, in order. A tool call runs
inside the runner's own cancel scopes (its timeout, Ctrl-C), so it must never enter or exit a
connection itself. Each connection therefore lives in a task of its own (`_Connection.run`),
in a task group that the toolset owns; a call only sends a request over a live session, and
a restart starts a new connection task. The toolset's task group is entered and exited by
the task that holds the toolset open around the whole run (`async with McpToolset(...)`).

What a server may not do (README: MCP servers, Trust): show the user terminal controls or a
secret through its stderr (every quoted line goes through `ruizn.terminal.visible` and a
`Redactor` of the environment's secrets and the servers' own), fill the disk through its
stderr file (`_StderrFile` keeps its head and tail), make two tools answer to one name
(refused at start), or read ruizn's environment (`keep_secrets_from_children`).

Faults, as the model sees them: a call past its timeout is `timeout` (invoke_tool's limit;
the SDK then tells the server the request was cancelled); `isError`, a JSON-RPC error, an
invalid result or a server that went away is `runtime_error`. A server that stopped is
started again once, before the next call to it, and that call's result says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import math
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, ClassVar, cast

import anyio
import anyio.abc
import httpx2
import jsonschema
import jsonschema.exceptions
import mcp.types as mt
from attrs import frozen
from mcp.client import Client, Transport
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from ruizn.effects.mcp.config import MCPServer
from ruizn.effects.tools.base import DEFAULT_TIMEOUT, BaseTool
from ruizn.media import content_of
from ruizn.redact import Redactor, secrets_from_env
from ruizn.state import ErrorType, ImageBlock, ImageSource, JsonObject, ToolResult
from ruizn.terminal import visible
from ruizn.toolsource import SourceKind, ToolSource
from ruizn.version import __version__

DEFAULT_STARTUP_TIMEOUT = 30.0
# What one result may put in front of the model; more is cut (read_file's limit too).
MAX_RESULT_CHARS = 512 * 1024
TRUNCATED = "\n[truncated]"
# The API's limit on tool names.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_NAME = 64
_MAX_LIST_PAGES = 100
# Lines of non-JSON-RPC output reported per connection; a server that logs to stdout would
# otherwise flood the terminal. The rest are counted in one last notice.
_MAX_GARBAGE_NOTICES = 3
# What each start of the servers may add to a server's stderr file: its first and last
# STDERR_KEEP bytes, and one line between them saying how many were dropped.
STDERR_KEEP = 512 * 1024
# The tail of that file lives in memory and is written out at most this often (and at the end).
_STDERR_FLUSH_SECONDS = 1.0
# How much of a connection's latest stderr is kept to quote its last line.
_RECENT_STDERR = 4096
# A quoted stderr line is cut to this many characters, once made visible and redacted.
_QUOTED_LINE = 200

Notice = Callable[[str], None]
Shown = Callable[[str], str]


class McpStartupError(Exception):
    """A server could not be started, connected to or listed. One line, naming the server."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"MCP server {server}: {reason}")
        self.server = server
        self.reason = reason


class McpTool(BaseTool):
    """One tool of an MCP server. Each MCP tool gets a subclass of its own (see `_tool_class`),
    because a ruizn tool's name, description and schema are class attributes."""

    server_name: ClassVar[str]
    mcp_name: ClassVar[str]  # the server's own name for the tool
    # Approval is needed unless the server says the tool only reads (readOnlyHint).
    needs_approval = True

    def __init__(self, server: _Server, *, timeout: float) -> None:
        super().__init__(timeout=timeout)
        self._server = server

    async def invoke(self, input: JsonObject) -> ToolResult | str:
        return await self._server.call(self.mcp_name, input)

    @classmethod
    def source(cls) -> ToolSource:
        """Where the tool came from, as a run records it: the server's own name for it, and
        whether the server said it only reads (which decides approval and re-running)."""
        return ToolSource(
            tool=cls.name,
            kind=SourceKind.MCP,
            ref=f"{cls.server_name}/{cls.mcp_name}",
            read_only=cls.read_only,
        )


class McpToolset:
    """Start `servers`, yield their tools, stop them all on the way out.

    `default_timeout` is each call's limit where the server sets none. `startup_timeout`
    bounds start-up, `initialize` and the tool listing of each server. A server's stderr goes
    to `stderr_dir/mcp-NAME.stderr` when given (else to a temporary file), capped (see
    `_StderrFile`); its last line is quoted when the server fails. `on_notice` hears of
    restarts and of non-JSON-RPC output. Everything of a server's that is quoted, in a notice,
    a `McpStartupError` or a result's "its stderr ends", is made visible (no terminal control
    acts) and redacted: the secrets of `environ` (ANTHROPIC_API_KEY, `*_TOKEN`, ...) and the
    servers' own header values, `env` values and URL secrets.
    """

    def __init__(
        self,
        servers: Sequence[MCPServer],
        *,
        default_timeout: float = DEFAULT_TIMEOUT,
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
        self._running: list[_Server] = []
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

        async def start(server: _Server) -> None:
            try:
                listings[server.name] = await server.start()
            except McpStartupError as exc:
                failures.append(exc)

        # All at once: five servers that take two seconds each should cost two seconds.
        async with anyio.create_task_group() as starting:
            for server in self._running:
                starting.start_soon(start, server)
        if failures:
            raise _first_failure(failures)
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

    def _server(self, config: MCPServer, group: anyio.abc.TaskGroup) -> _Server:
        try:
            stderr = self._open_stderr(config.name)
        except OSError as exc:
            raise McpStartupError(
                config.name, f"cannot open a file for its stderr: {_open_problem(exc)}"
            ) from None
        return _Server(
            config,
            group,
            startup_timeout=self._startup_timeout,
            max_restarts=self._max_restarts,
            cwd=self._cwd,
            stderr=stderr,
            notice=self._notice,
            shown=self._shown,
        )

    def _open_stderr(self, name: str) -> _StderrFile:
        if self._stderr_dir is None:
            with tempfile.TemporaryFile() as temporary:  # unlinked: it lives as long as an fd
                return _StderrFile(os.dup(temporary.fileno()))
        return _StderrFile(_open_stderr_file(self._stderr_dir, f"mcp-{name}.stderr"))

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

    def _valid(self, server: _Server, specs: list[mt.Tool]) -> list[mt.Tool]:
        valid = []
        for spec in specs:
            problem = _schema_problem(spec.input_schema)
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
        names = _api_names([(server.name, spec.name) for server, spec in offered])
        return tuple(
            _tool_class(server.name, names[server.name, spec.name], spec)(
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


def _first_failure(failures: list[McpStartupError]) -> McpStartupError:
    first = failures[0]
    if len(failures) == 1:
        return first
    others = ", ".join(f.server for f in failures[1:])
    return McpStartupError(first.server, f"{first.reason} (also failed: {others})")


def _schema_problem(schema: JsonObject) -> str | None:
    try:
        validator = jsonschema.validators.validator_for(
            schema, default=jsonschema.Draft202012Validator
        )
        validator.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        return _one_line(exc.message)
    if schema.get("type") != "object":
        return "its type is not 'object'"
    return None


def _api_names(listed: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Each (server, tool)'s API name, or McpStartupError naming two tools that would share
    one. Never a suffix that depends on the order a server lists its tools in: an approval
    given for `x_y` must never run `x.y` after a resume that listed them the other way."""
    names: dict[tuple[str, str], str] = {}
    holders: dict[str, tuple[str, str]] = {}
    for server, tool in listed:
        name = _api_name(server, tool)
        other = holders.setdefault(name, (server, tool))
        if other != (server, tool) or (server, tool) in names:
            raise _collision(name, other, (server, tool))
        names[server, tool] = name
    return names


def _api_name(server: str, tool: str) -> str:
    """`mcp__SERVER__TOOL` (Claude Code's convention), made to fit the API's rule: other
    characters become '_', and a name too long ends in a short hash of the whole."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", f"mcp__{server}__{tool}")
    if _TOOL_NAME.fullmatch(name):
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:8]
    return f"{name[: _MAX_NAME - len(digest) - 1]}_{digest}"


def _collision(name: str, one: tuple[str, str], other: tuple[str, str]) -> McpStartupError:
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
        what = f"{source.tool} ({_mcp_ref(source.ref)})"
        current = now_by_ref.get(source.ref)
        if current is None:
            holder = now_by_name.get(source.tool)
            problems[source.tool] = (
                f"{what}: its server no longer lists it"
                if holder is None
                else f"{what}: that name is now {_mcp_ref(holder.ref)}"
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


def _mcp_ref(ref: str) -> str:
    server, _, tool = ref.partition("/")
    return f"tool {tool!r} of MCP server {server}"


def _tool_class(server: str, name: str, spec: mt.Tool) -> type[McpTool]:
    read_only = bool(spec.annotations is not None and spec.annotations.read_only_hint)
    description = spec.description or (spec.title or f"Tool {spec.name} of MCP server {server}.")
    namespace = {
        "name": name,
        "description": description,
        "input_schema": spec.input_schema,
        "read_only": read_only,
        "needs_approval": not read_only,
        "server_name": server,
        "mcp_name": spec.name,
    }
    return cast(type[McpTool], type(f"McpTool[{name}]", (McpTool,), namespace))


class _Server:
    """A configured server across its connections: the first one and at most `max_restarts`
    more. When a connection stops (the server exited, or a call found it gone), the next one
    is started at once, in the background, so the next call finds it ready or nearly so and
    the start-up does not eat that call's timeout."""

    def __init__(
        self,
        config: MCPServer,
        group: anyio.abc.TaskGroup,
        *,
        startup_timeout: float,
        max_restarts: int,
        cwd: Path | None,
        stderr: _StderrFile,
        notice: Notice,
        shown: Shown,
    ) -> None:
        self.config = config
        self.name = config.name
        self._group = group
        self._startup_timeout = startup_timeout
        self._max_restarts = max_restarts
        self._restarts = 0
        self._cwd = cwd
        self._stderr = stderr
        self._notice = notice
        self._shown = shown
        self._closing = False
        self._started = False  # listed its tools: from then on a stop means a restart
        self._connection: _Connection | None = None
        # Said in the result of the first call after a restart, so the model and the log know.
        self._restart_note = ""
        self._reconnect_owed = False
        # The server said its tool list changed (notifications/tools/list_changed): the
        # runner lists it again between steps (McpToolset.relist).
        self.list_changed = False

    def describe(self) -> JsonObject:
        return self.config.describe()

    @property
    def alive(self) -> bool:
        """Connected, and not known to have stopped."""
        conn = self._connection
        return conn is not None and conn.client is not None and not conn.broken

    @property
    def restarts(self) -> int:
        return self._restarts

    async def start(self) -> list[mt.Tool]:
        conn = self._spawn()
        await conn.settled.wait()
        if conn.failure is not None:
            raise McpStartupError(self.name, conn.failure)
        # The listing shares the start-up limit: a server that answers initialize but never
        # tools/list would otherwise hang the run before its first model call.
        with anyio.move_on_after(self._startup_timeout):
            try:
                tools = await self._list_tools(conn)
            except (MCPError, ValidationError, OSError) as exc:
                raise McpStartupError(
                    self.name, f"listing its tools failed: {_describe(exc)}{conn.tail()}"
                ) from None
            self._started = True
            return tools
        raise McpStartupError(
            self.name, f"did not list its tools within {_seconds(self._startup_timeout)}"
        )

    async def relist(self) -> list[mt.Tool]:
        """The server's tools now, within the start-up limit; McpStartupError if they cannot
        be listed (the server stopped, or answered with an error)."""
        conn = self._connection
        assert conn is not None, "start() first"
        with anyio.move_on_after(self._startup_timeout):
            await conn.settled.wait()
            try:
                return await self._list_tools(conn)
            except (MCPError, ValidationError, OSError) as exc:
                raise McpStartupError(
                    self.name, f"listing its changed tools failed: {_describe(exc)}"
                ) from None
        raise McpStartupError(
            self.name, f"did not list its changed tools within {_seconds(self._startup_timeout)}"
        )

    def _listed_again(self) -> None:
        self.list_changed = True

    async def _list_tools(self, conn: _Connection) -> list[mt.Tool]:
        client = conn.client
        if client is None:
            raise McpStartupError(self.name, f"stopped before listing its tools{conn.tail()}")
        tools: list[mt.Tool] = []
        cursor: str | None = None
        for _ in range(_MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools
        raise McpStartupError(self.name, f"its tool list runs past {_MAX_LIST_PAGES} pages")

    def stop(self) -> None:
        self._closing = True
        if self._connection is not None:
            self._connection.stop()

    def close_stderr(self) -> None:
        self._stderr.close()

    def _spawn(self) -> _Connection:
        conn = _Connection(
            self.config,
            startup_timeout=self._startup_timeout,
            cwd=self._cwd,
            stderr=self._stderr,
            notice=self._notice,
            shown=self._shown,
            on_broken=self._broken,
            on_list_changed=self._listed_again,
        )
        self._connection = conn
        self._group.start_soon(conn.run, name=f"mcp-{self.name}")
        return conn

    def _broken(self, conn: _Connection) -> None:
        """`conn`, which had come up, is of no more use: start the server again, once. A stdio
        server is started at once, so the next call does not wait for it; an HTTP server is
        someone else's process, so ruizn reconnects when the next call comes, giving it the
        most time to come back."""
        if self._closing or not self._started or conn is not self._connection:
            return
        conn.stop()  # its task leaves the SDK's client, which reaps the process
        if self._restarts >= self._max_restarts:
            self._notice(f"MCP server {self.name} stopped{conn.tail()}; not restarting it again")
            return
        self._restarts += 1
        if self.config.transport == "stdio":
            self._notice(f"MCP server {self.name} stopped{conn.tail()}; restarting it")
            self._restart_note = f"[ruizn restarted MCP server {self.name}, which had stopped]\n"
            self._spawn()
        else:
            self._notice(f"MCP server {self.name} went away; reconnecting before the next call")
            self._restart_note = f"[ruizn reconnected to MCP server {self.name}]\n"
            self._reconnect_owed = True

    async def call(self, tool: str, arguments: JsonObject) -> ToolResult:
        if self._reconnect_owed:
            self._reconnect_owed = False
            self._spawn()
        conn = self._connection
        assert conn is not None, "start() first"
        # A restart may still be starting; its start-up limit ends this wait, and the call's
        # own timeout may end it sooner (the start-up then goes on for the next call).
        await conn.settled.wait()
        note, self._restart_note = self._restart_note, ""
        if conn.failure is not None:
            again = "started again" if self.config.transport == "stdio" else "reconnected to"
            return ToolResult.error(
                ErrorType.RUNTIME_ERROR,
                f"{self._who()} stopped and could not be {again}: {conn.failure}",
            )
        client = conn.client
        if client is None or conn.broken:
            return ToolResult.error(
                ErrorType.RUNTIME_ERROR,
                f"{self._who()} stopped and was restarted {_times(self._restarts)} already;"
                " its tools are unavailable for the rest of the run",
            )
        try:
            result = await client.call_tool(tool, arguments)
        except MCPError as exc:
            if exc.code == mt.CONNECTION_CLOSED:
                return self._lost(conn, note, "closed the connection during the call")
            if exc.code == mt.REQUEST_TIMEOUT:
                return ToolResult.error(ErrorType.TIMEOUT, f"{note}{self._who()}: {exc.message}")
            return ToolResult.error(
                ErrorType.RUNTIME_ERROR,
                f"{note}{self._who()} answered with error {exc.code}: {_one_line(exc.message)}",
            )
        except ValidationError as exc:
            errors = exc.errors()
            why = str(errors[0]["msg"]) if errors else str(exc)
            return ToolResult.error(
                ErrorType.RUNTIME_ERROR,
                f"{note}{self._who()} sent a result that is not valid MCP: {_one_line(why)}",
            )
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            return self._lost(conn, note, f"could not be reached ({_describe(exc)})")
        return _result(result, note)

    def _lost(self, conn: _Connection, note: str, what: str) -> ToolResult:
        tail = conn.tail()
        conn.mark_broken()
        if self._reconnect_owed:
            then = "ruizn will reconnect before the next call to it"
        elif self._connection is not conn:
            then = "ruizn is starting it again for the next call"
        else:
            then = (
                f"it was restarted {_times(self._restarts)} already: its tools are now unavailable"
            )
        return ToolResult.error(
            ErrorType.RUNTIME_ERROR,
            f"{note}{self._who()} {what}{tail}; the call may or may not have taken effect; {then}",
        )

    def _who(self) -> str:
        return f"MCP server {self.name}"


class _Connection:
    """One connection to a server, owned by its own task (`run`), which enters and exits the
    SDK's client. Everything else only reads its state and calls `stop` or `mark_broken`."""

    def __init__(
        self,
        config: MCPServer,
        *,
        startup_timeout: float,
        cwd: Path | None,
        stderr: _StderrFile,
        notice: Notice,
        shown: Shown,
        on_broken: Callable[[_Connection], None],
        on_list_changed: Callable[[], None],
    ) -> None:
        self.config = config
        self.client: Client | None = None
        self.settled = anyio.Event()  # connected, or failed to
        self.failure: str | None = None  # why start-up failed, one line
        # Of no more use: its transport ended (the server exited), a call found it gone, or
        # it was stopped.
        self.broken = False
        self._startup_timeout = startup_timeout
        self._cwd = cwd
        self._stderr = stderr
        self._pipe: _StderrPipe | None = None  # a stdio server's stderr, while `run` runs
        self._notice = notice
        self._shown = shown
        self._on_broken = on_broken
        self._on_list_changed = on_list_changed
        self._stop = anyio.Event()
        self._scope = anyio.CancelScope()
        self._garbage = 0

    def stop(self) -> None:
        self._stop.set()
        if not self.settled.is_set():
            # Still starting: the SDK is waiting for the server, not for our event.
            self._scope.cancel()

    def mark_broken(self) -> None:
        if self.broken:
            return
        self.broken = True
        if self.settled.is_set() and self.failure is None:
            self._on_broken(self)

    def tail(self) -> str:
        """` (its stderr ends: LINE)`, the last line this connection's server wrote to its
        stderr, shown safely; "" when it wrote none."""
        line = self._pipe.last_line() if self._pipe is not None else ""
        return f" (its stderr ends: {_quote(self._shown, line)})" if line else ""

    async def run(self) -> None:
        if self.config.transport == "stdio":
            try:
                self._pipe = _StderrPipe(self._stderr)
            except OSError as exc:
                self.failure = f"cannot make a pipe for its stderr: {_describe(exc)}"
                self.settled.set()
                return
        try:
            async with anyio.create_task_group() as pumping:
                if self._pipe is not None:
                    pumping.start_soon(self._pipe.pump)
                await self._connect()
                pumping.cancel_scope.cancel()
        finally:
            if self._pipe is not None:
                self._pipe.close()

    async def _connect(self) -> None:
        self._scope.deadline = anyio.current_time() + self._startup_timeout
        try:
            with self._scope:
                async with self._client() as client:
                    self._scope.deadline = math.inf
                    self.client = client
                    self.settled.set()
                    async with anyio.create_task_group() as following:
                        if _announces_tool_changes(client):
                            following.start_soon(self._follow_tool_list, client)
                        await self._stop.wait()
                        following.cancel_scope.cancel()
            if self._scope.cancelled_caught and not self._stop.is_set():
                self.failure = (
                    "did not complete the MCP handshake (initialize) within"
                    f" {_seconds(self._startup_timeout)}{self.tail()}"
                )
        except Exception as exc:  # the owner task never raises: its state says what happened
            if not self.settled.is_set():
                self.failure = _startup_failure(self.config, exc) + self.tail()
            elif not self._stop.is_set():
                self._notice(f"MCP server {self.config.name}: connection failed: {_describe(exc)}")
        finally:
            self.client = None
            if not self.settled.is_set():
                self.failure = self.failure or "stopped while starting"
                self.settled.set()
            self.mark_broken()

    def _client(self) -> Client:
        pipe = self._pipe
        return Client(
            _watched(
                self._transport(),
                on_end=self.mark_broken,
                on_spawned=pipe.spawned if pipe is not None else lambda: None,
            ),
            client_info=mt.Implementation(name="ruizn", version=__version__),
            message_handler=self._on_message,
            # Tool lists are read once per connection; a cache would only hide a change.
            cache=None,
        )

    def _transport(self) -> Transport:
        config = self.config
        if self._pipe is not None:
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=self._cwd,
            )
            return stdio_client(params, errlog=cast(Any, self._pipe.child_end))
        return _http_transport(config.url, dict(config.headers))

    async def _follow_tool_list(self, client: Client) -> None:
        """At the 2026-07-28 protocol a server tells of a changed tool list only on a
        `subscriptions/listen` stream the client opened (older servers send the bare
        notification, which `_on_message` takes): open one for the connection's life."""
        try:
            async with client.listen(tools_list_changed=True) as events:
                async for _ in events:
                    self._on_list_changed()
        except ListenNotSupportedError:
            return  # an older protocol: the server sends the bare notification
        except (MCPError, SubscriptionLost, TimeoutError) as exc:
            if not self._stop.is_set() and not self.broken:
                self._notice(
                    f"MCP server {self.config.name}: its tool list cannot be followed"
                    f" ({_describe(exc)}); a change to it is not seen until a resume"
                )

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            self._on_list_changed()
            return
        if not isinstance(message, Exception):
            return
        # The SDK passes on what it could not parse and goes on: tell the user, once or a few
        # times, and let the call wait for its real answer (or its timeout).
        self._garbage += 1
        if self._garbage <= _MAX_GARBAGE_NOTICES:
            self._notice(
                f"MCP server {self.config.name} sent something that is not JSON-RPC"
                f" (ignored): {_quote(self._shown, str(message))}"
            )
        elif self._garbage == _MAX_GARBAGE_NOTICES + 1:
            self._notice(f"MCP server {self.config.name}: more non-JSON-RPC output, not shown")


def _announces_tool_changes(client: Client) -> bool:
    """Whether the server says it tells of tool list changes (notifications/tools/
    list_changed)."""
    tools = client.server_capabilities.tools
    return tools is not None and bool(tools.list_changed)


def _open_stderr_file(folder: Path, name: str) -> int:
    """An fd for appending to `folder/name`, opened like hostile input: neither the folder
    nor the one that holds it may be a link (a planted `.mcp` or run folder would send the
    file elsewhere), and nothing is created through one; the file may not be a link
    (O_NOFOLLOW) and must be a regular file (a FIFO would hang, a device eat or spew), and
    no open blocks (O_NONBLOCK)."""
    folder.parent.parent.mkdir(parents=True, exist_ok=True)
    here = os.open(folder.parent.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for step in (folder.parent, folder):
            with contextlib.suppress(FileExistsError):
                os.mkdir(step.name, 0o700, dir_fd=here)
            try:
                inner = os.open(step.name, _NO_LINK_FOLDER, dir_fd=here)
            except OSError as exc:
                raise _not_a(exc, step, "folder") from None
            os.close(here)
            here = inner
        path = folder / name
        try:
            fd = os.open(name, _NO_LINK_FILE, 0o600, dir_fd=here)
        except OSError as exc:
            raise _not_a(exc, path, "file") from None
    finally:
        os.close(here)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _StderrFileRefused(f"{path} is not a regular file")
    os.set_blocking(fd, True)
    return fd


_NO_LINK_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NO_LINK_FILE = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _StderrFileRefused(OSError):
    """A stderr file or folder that ruizn will not write through; the message says why."""


def _not_a(exc: OSError, path: Path, what: str) -> OSError:
    """`exc` in words when a link or another kind of file stood at `path` (O_NOFOLLOW says
    ELOOP or ENOTDIR); else `exc` itself."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return exc
    if stat.S_ISLNK(mode):
        return _StderrFileRefused(f"{path} is a symbolic link, not a {what}")
    if what == "folder" and not stat.S_ISDIR(mode):
        return _StderrFileRefused(f"{path} is not a folder")
    return exc


def _open_problem(exc: OSError) -> str:
    return str(exc) if isinstance(exc, _StderrFileRefused) else _describe(exc)


class _StderrFile:
    """A server's stderr file, capped. What one start of the servers adds to it keeps the
    first `keep` bytes the server wrote (up to its last whole line) and the last `keep` bytes
    (from a line start), with one line between them, `[ruizn: N bytes of its stderr dropped
    here]`, so N says exactly how much is missing. The tail is held in memory and written out
    at most once a second and when the file is closed; a kill -9 of ruizn loses at most the
    last second of it. A restarted server appends to the same file. A write that fails (a
    full disk) ends the file's writing, never the server's connection."""

    def __init__(self, fd: int, *, keep: int = STDERR_KEEP) -> None:
        self._fd = fd
        self._start = self._end = os.lseek(fd, 0, os.SEEK_END)
        self._keep = keep
        self._line_end = self._start  # just past the head's last newline
        self._cut: int | None = None  # where the head ends, once it is full
        self._tail = bytearray()
        self._tail_at_line_start = True
        self._written = 0  # what the server wrote to it since it was opened
        self._dirty = False
        self._flushed_at = -math.inf
        self._failed = False

    def write(self, data: bytes) -> None:
        if self._fd < 0 or self._failed:
            return
        try:
            self._write(data)
        except OSError:
            self._failed = True

    def _write(self, data: bytes) -> None:
        self._written += len(data)
        if self._cut is None:
            head = data[: self._start + self._keep - self._end]
            _pwrite_all(self._fd, head, self._end)
            if (newline := head.rfind(b"\n")) >= 0:
                self._line_end = self._end + newline + 1
            self._end += len(head)
            data = data[len(head) :]
            if not data:
                return
            # Full: the head ends with its last whole line; the part line after it is dropped.
            self._cut = self._line_end if self._line_end > self._start else self._end
            self._tail_at_line_start = head.endswith(b"\n") or (not head and self._at_line_end())
        self._tail += data
        if len(self._tail) > self._keep:
            excess = len(self._tail) - self._keep
            self._tail_at_line_start = self._tail[excess - 1] == ord("\n")
            del self._tail[:excess]
        self._dirty = True
        if time.monotonic() - self._flushed_at >= _STDERR_FLUSH_SECONDS:
            self._flush()

    def _at_line_end(self) -> bool:
        return self._end == self._line_end

    def flush(self) -> None:
        """Write the tail out after the head, with the line that counts what is missing."""
        if self._cut is None or not self._dirty or self._fd < 0 or self._failed:
            return
        try:
            self._flush()
        except OSError:
            self._failed = True

    def _flush(self) -> None:
        cut = self._cut
        if cut is None:  # the head is not full: everything is on disk already
            return
        tail = bytes(self._tail)
        if not self._tail_at_line_start:
            tail = tail.partition(b"\n")[2]  # from its first whole line (maybe none)
        dropped = self._written - (cut - self._start) - len(tail)
        gap = b""
        if dropped:
            newline = b"" if cut == self._line_end else b"\n"
            gap = newline + f"[ruizn: {dropped} bytes of its stderr dropped here]\n".encode()
        os.ftruncate(self._fd, cut)
        _pwrite_all(self._fd, gap + tail, cut)
        self._dirty = False
        self._flushed_at = time.monotonic()

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            self.flush()
        finally:
            os.close(self._fd)
            self._fd = -1


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


class _StderrPipe:
    """One server process's stderr: a pipe ruizn reads, rather than a file the server writes
    itself, so ruizn can cap the file and quote the server's last line. `child_end` is what
    the server is started with; ruizn closes its own copy once the server is running."""

    def __init__(self, sink: _StderrFile) -> None:
        read, write = os.pipe()  # close-on-exec: the server gets only the end given to it
        os.set_blocking(read, False)
        self._read = read
        self.child_end: IO[str] | None = os.fdopen(write, "w")
        self._sink = sink
        self._recent = bytearray()
        self._recent_whole = True  # `_recent` starts at a line start
        self._eof = False

    def spawned(self) -> None:
        """The server has its copy of the write end (or failed to start): close ours, so the
        pipe ends when the server and whatever it started close theirs."""
        if self.child_end is not None:
            self.child_end.close()
            self.child_end = None

    async def pump(self) -> None:
        while not self._eof:
            await anyio.wait_readable(self._read)
            self.drain()

    def drain(self) -> None:
        """Copy what is in the pipe now to the file, without waiting for more."""
        while not self._eof and self._read >= 0:
            try:
                chunk = os.read(self._read, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self._eof = True
                return
            self._sink.write(chunk)
            self._recent += chunk
            if len(self._recent) > _RECENT_STDERR:
                excess = len(self._recent) - _RECENT_STDERR
                self._recent_whole = self._recent[excess - 1] == ord("\n")
                del self._recent[:excess]

    def last_line(self) -> str:
        """The last non-blank line written so far; never a line cut at its start (it could
        begin with the end of a secret, which no redactor would recognise)."""
        self.drain()
        data = bytes(self._recent)
        if not self._recent_whole:
            data = data.partition(b"\n")[2]
        lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines()]
        return next((line for line in reversed(lines) if line), "")

    def close(self) -> None:
        self.spawned()
        self.drain()
        if self._read >= 0:
            os.close(self._read)
            self._read = -1
        self._sink.flush()


@contextlib.asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    # The SDK's documented way to send headers: an HTTP client of our own (ours to close),
    # with the SDK's default limits (30 s to connect or send, 300 s between reads).
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


@contextlib.asynccontextmanager
async def _watched(
    transport: Transport, *, on_end: Callable[[], None], on_spawned: Callable[[], None]
) -> AsyncIterator[Any]:
    """The transport, with its read stream watched for its end: then the server is gone (a
    stdio server exited), and the next call starts it again rather than fail first.
    `on_spawned` runs once the transport is open (a stdio server is running) or failed to."""
    try:
        async with transport as (read, write):
            on_spawned()
            yield _EndWatch(read, on_end), write
    finally:
        on_spawned()


class _EndWatch:
    """Passes a transport's read stream through unchanged, calling `on_end` when it ends."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        # The SDK reads this off the HTTP transport's stream (the sender's contextvars).
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> _EndWatch:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _EndWatch:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return cast(bool | None, await self._inner.__aexit__(*exc_info))


def _result(result: mt.CallToolResult, note: str) -> ToolResult:
    parts = _render(result)
    if note:
        parts.insert(0, note.rstrip("\n"))
    content = content_of(_clipped(parts))
    if result.is_error:
        return ToolResult(
            content=content or "the tool failed without a message",
            is_error=True,
            error_type=ErrorType.RUNTIME_ERROR.value,
        )
    return ToolResult.ok(content)


def _render(result: mt.CallToolResult) -> list[str | ImageBlock]:
    """Text blocks as they are; images as image blocks, for the model to see (the runner
    checks them against the API's limits, ruizn.media); every other block described in one
    line, so nothing the server sent is dropped without a trace."""
    parts: list[str | ImageBlock] = []
    for block in result.content:
        match block:
            case mt.TextContent():
                parts.append(block.text)
            case mt.ImageContent():
                source = ImageSource(media_type=block.mime_type, data=block.data)
                parts.append(ImageBlock(source=source))
            case mt.AudioContent():
                size = _size(_b64_size(block.data))
                parts.append(f"[audio: {block.mime_type}, {size}: not shown, the model hears none]")
            case mt.EmbeddedResource(resource=mt.TextResourceContents() as res):
                # A text resource is text the tool meant the caller to read: keep it.
                parts.append(f"[resource: {res.uri}{_mime(res.mime_type)}]\n{res.text}")
            case mt.EmbeddedResource(resource=mt.BlobResourceContents() as res):
                size = _size(_b64_size(res.blob))
                parts.append(
                    f"[resource: {res.uri}{_mime(res.mime_type)}, {size} binary, not shown]"
                )
            case mt.ResourceLink():
                size = f", {_size(block.size)}" if block.size is not None else ""
                parts.append(
                    f"[resource link: {block.name} {block.uri}{_mime(block.mime_type)}{size}]"
                )
            case _:
                parts.append(f"[{getattr(block, 'type', type(block).__name__)} content, not shown]")
    if not parts and result.structured_content is not None:
        # The spec asks servers to send structured results as text too; not all do.
        return [json.dumps(result.structured_content, ensure_ascii=False)]
    if not parts and not result.is_error:
        return ["(the tool returned no content)"]
    return parts


def _clipped(parts: list[str | ImageBlock]) -> list[str | ImageBlock]:
    """The parts with their text cut to MAX_RESULT_CHARS in all (read_file's limit too),
    counting the newlines that will join them; images are kept (media.fit bounds them)."""
    if all(isinstance(part, str) for part in parts):
        text = "\n".join(cast(list[str], parts))
        return [text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + TRUNCATED]
    kept: list[str | ImageBlock] = []
    room = MAX_RESULT_CHARS
    for part in parts:
        if not isinstance(part, str):
            kept.append(part)
        elif len(part) <= room:
            kept.append(part)
            room -= len(part) + 1
        elif room >= 0:  # the first text past the limit: cut, and the rest left out
            kept.append(part[:room] + TRUNCATED)
            room = -1
    return kept


def _mime(mime: str | None) -> str:
    return f" ({mime})" if mime else ""


def _b64_size(data: str) -> int:
    return len(data) * 3 // 4 - data.count("=", -2)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / 1024 / 1024:.1f} MB"


def _startup_failure(config: MCPServer, exc: BaseException) -> str:
    """One line for why a connection did not come up."""
    exc = _leaf(exc)
    match exc:
        case FileNotFoundError() if config.transport == "stdio":
            return f"command not found: {config.command}"
        case PermissionError() if config.transport == "stdio":
            return f"cannot run {config.command}: permission denied"
        case MCPError() if exc.code == mt.CONNECTION_CLOSED:
            if config.transport == "stdio":
                return "exited during the MCP handshake (initialize)"
            return "closed the connection during the MCP handshake (initialize)"
        case MCPError():
            return f"refused the MCP handshake: {_one_line(exc.message)} (error {exc.code})"
        case _:
            if config.transport == "http":
                return f"cannot connect to {config.describe()['url']}: {_describe(exc)}"
            return _describe(exc)


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside nested exception groups (anyio's task groups wrap)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _quote(shown: Shown, text: str) -> str:
    """`text` from a server as one shown line: redacted and made visible first, then cut,
    so a cut can never leave part of a secret that the redactor would no longer find."""
    return _clip(shown(_one_line(text)), _QUOTED_LINE)


def _describe(exc: BaseException) -> str:
    exc = _leaf(exc)
    text = _one_line(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _seconds(value: float) -> str:
    return f"{int(value)}s" if math.isclose(value, round(value)) else f"{value:g}s"


def _times(n: int) -> str:
    return {0: "no times", 1: "once"}.get(n, f"{n} times")


@contextlib.contextmanager
def sdk_logs_as_notices(notice: Notice, shown: Shown | None = None) -> Iterator[None]:
    """While open, the SDK's warnings reach `notice` as one line each, without tracebacks
    (unconfigured, Python would print its logger.exception tracebacks on stderr), shown
    safely: they can quote what a server sent. `shown` defaults to redacting the secrets of
    the environment. For the CLI; a library user configures logging as they like."""
    show = shown if shown is not None else shown_safely(os.environ)

    class _Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            with contextlib.suppress(Exception):
                message = _clip(show(_one_line(record.getMessage())), 300)
                notice(f"{record.name}: {message}")

    handler = _Lines(logging.WARNING)
    # The SDK logs under "mcp.*" and, for its client session, under "client".
    loggers = [logging.getLogger("mcp"), logging.getLogger("client")]
    saved = [(lg, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.propagate = False
    try:
        yield
    finally:
        for lg, propagate in saved:
            lg.removeHandler(handler)
            lg.propagate = propagate
