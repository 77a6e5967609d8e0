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

Faults, as the model sees them: a call past its timeout is `timeout` (invoke_tool's limit;
the SDK then tells the server the request was cancelled); `isError`, a JSON-RPC error, an
invalid result or a server that went away is `runtime_error`. A server that stopped is
started again once, before the next call to it, and that call's result says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, ClassVar, cast

import anyio
import anyio.abc
import httpx2
import jsonschema
import jsonschema.exceptions
import mcp.types as mt
from mcp.client import Client, Transport
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from ruizn.effects.mcp_config import MCPServer
from ruizn.effects.tools import DEFAULT_TIMEOUT, BaseTool
from ruizn.state import ErrorType, JsonObject, ToolResult
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

Notice = Callable[[str], None]


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


class McpToolset:
    """Start `servers`, yield their tools, stop them all on the way out.

    `default_timeout` is each call's limit where the server sets none. `startup_timeout`
    bounds start-up, `initialize` and the tool listing of each server. A server's stderr goes
    to `stderr_dir/mcp-NAME.stderr` when given (else to a temporary file); its last line is
    quoted when the server fails. `on_notice` hears of restarts and of non-JSON-RPC output.
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
        self._notice = on_notice or (lambda _text: None)
        self._group: anyio.abc.TaskGroup | None = None
        self._running: list[_Server] = []
        self.tools: tuple[McpTool, ...] = ()

    def describe(self) -> tuple[JsonObject, ...]:
        """The servers as a run records them (RunStarted): no secret values."""
        return tuple(server.describe() for server in self.servers)

    def alive(self, name: str) -> bool:
        """Whether server `name` is connected and not known to have stopped."""
        return any(server.name == name and server.alive for server in self._running)

    async def __aenter__(self) -> tuple[McpTool, ...]:
        if self._group is not None:
            raise RuntimeError("an McpToolset is entered once")
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        try:
            self.tools = await self._start_all(group)
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
        return self._all_tools(listings)

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
                config.name, f"cannot open a file for its stderr: {_describe(exc)}"
            ) from None
        return _Server(
            config,
            group,
            startup_timeout=self._startup_timeout,
            max_restarts=self._max_restarts,
            cwd=self._cwd,
            stderr=stderr,
            notice=self._notice,
        )

    def _open_stderr(self, name: str) -> IO[str]:
        if self._stderr_dir is None:
            return tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
        self._stderr_dir.mkdir(parents=True, exist_ok=True)
        path = self._stderr_dir / f"mcp-{name}.stderr"
        return path.open("a+", encoding="utf-8", errors="replace")

    def _all_tools(self, listings: dict[str, list[mt.Tool]]) -> tuple[McpTool, ...]:
        tools: list[McpTool] = []
        taken: set[str] = set()
        for server in self._running:
            for spec in listings[server.name]:
                problem = _schema_problem(spec.input_schema)
                if problem is not None:
                    self._notice(
                        f"MCP server {server.name}: tool {spec.name!r} left out:"
                        f" its input schema is invalid ({problem})"
                    )
                    continue
                name = _api_name(server.name, spec.name, taken)
                taken.add(name)
                timeout = server.config.timeout or self._default_timeout
                tools.append(_tool_class(server.name, name, spec)(server, timeout=timeout))
        return tuple(tools)


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


def _api_name(server: str, tool: str, taken: set[str]) -> str:
    """`mcp__SERVER__TOOL` (Claude Code's convention), made to fit the API's rule: other
    characters become '_', and a name too long or already taken ends in a short hash."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", f"mcp__{server}__{tool}")
    if _TOOL_NAME.fullmatch(name) and name not in taken:
        return name
    digest = hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()
    for size in range(8, len(digest) + 1):
        candidate = f"{name[: _MAX_NAME - size - 1]}_{digest[:size]}"
        if candidate not in taken:
            return candidate
    raise ValueError(f"no free name for {tool!r} of MCP server {server}")  # pragma: no cover


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
        stderr: IO[str],
        notice: Notice,
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
        self._closing = False
        self._started = False  # listed its tools: from then on a stop means a restart
        self._connection: _Connection | None = None
        # Said in the result of the first call after a restart, so the model and the log know.
        self._restart_note = ""
        self._reconnect_owed = False

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
                    self.name, f"listing its tools failed: {_describe(exc)}{self._tail()}"
                ) from None
            self._started = True
            return tools
        raise McpStartupError(
            self.name, f"did not list its tools within {_seconds(self._startup_timeout)}"
        )

    async def _list_tools(self, conn: _Connection) -> list[mt.Tool]:
        client = conn.client
        if client is None:
            raise McpStartupError(self.name, f"stopped before listing its tools{self._tail()}")
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
            on_broken=self._broken,
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
            self._notice(f"MCP server {self.name} stopped{self._tail()}; not restarting it again")
            return
        self._restarts += 1
        if self.config.transport == "stdio":
            self._notice(f"MCP server {self.name} stopped{self._tail()}; restarting it")
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
        tail = self._tail()  # before a restart adds its own lines
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

    def _tail(self) -> str:
        conn = self._connection
        return _tail(self._stderr, conn.stderr_start if conn is not None else 0)


class _Connection:
    """One connection to a server, owned by its own task (`run`), which enters and exits the
    SDK's client. Everything else only reads its state and calls `stop` or `mark_broken`."""

    def __init__(
        self,
        config: MCPServer,
        *,
        startup_timeout: float,
        cwd: Path | None,
        stderr: IO[str],
        notice: Notice,
        on_broken: Callable[[_Connection], None],
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
        self._notice = notice
        self._on_broken = on_broken
        self._stop = anyio.Event()
        self._scope = anyio.CancelScope()
        self._garbage = 0
        self.stderr_start = _stderr_size(stderr)

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

    async def run(self) -> None:
        self._scope.deadline = anyio.current_time() + self._startup_timeout
        try:
            with self._scope:
                async with self._client() as client:
                    self._scope.deadline = math.inf
                    self.client = client
                    self.settled.set()
                    await self._stop.wait()
            if self._scope.cancelled_caught and not self._stop.is_set():
                self.failure = (
                    "did not complete the MCP handshake (initialize) within"
                    f" {_seconds(self._startup_timeout)}"
                    f"{_tail(self._stderr, self.stderr_start)}"
                )
        except Exception as exc:  # the owner task never raises: its state says what happened
            if not self.settled.is_set():
                self.failure = _startup_failure(self.config, exc) + _tail(
                    self._stderr, self.stderr_start
                )
            elif not self._stop.is_set():
                self._notice(f"MCP server {self.config.name}: connection failed: {_describe(exc)}")
        finally:
            self.client = None
            if not self.settled.is_set():
                self.failure = self.failure or "stopped while starting"
                self.settled.set()
            self.mark_broken()

    def _client(self) -> Client:
        return Client(
            _watched(self._transport(), self.mark_broken),
            client_info=mt.Implementation(name="ruizn", version=__version__),
            message_handler=self._on_message,
            # Tool lists are read once per connection; a cache would only hide a change.
            cache=None,
        )

    def _transport(self) -> Transport:
        config = self.config
        if config.transport == "stdio":
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=self._cwd,
            )
            return stdio_client(params, errlog=cast(Any, self._stderr))
        return _http_transport(config.url, dict(config.headers))

    async def _on_message(self, message: Any) -> None:
        if not isinstance(message, Exception):
            return
        # The SDK passes on what it could not parse and goes on: tell the user, once or a few
        # times, and let the call wait for its real answer (or its timeout).
        self._garbage += 1
        if self._garbage <= _MAX_GARBAGE_NOTICES:
            self._notice(
                f"MCP server {self.config.name} sent something that is not JSON-RPC"
                f" (ignored): {_clip(_one_line(str(message)), 200)}"
            )
        elif self._garbage == _MAX_GARBAGE_NOTICES + 1:
            self._notice(f"MCP server {self.config.name}: more non-JSON-RPC output, not shown")


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
async def _watched(transport: Transport, on_end: Callable[[], None]) -> AsyncIterator[Any]:
    """The transport, with its read stream watched for its end: then the server is gone (a
    stdio server exited), and the next call starts it again rather than fail first."""
    async with transport as (read, write):
        yield _EndWatch(read, on_end), write


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
    text = _clip_result(note + _render(result))
    if result.is_error:
        return ToolResult.error(
            ErrorType.RUNTIME_ERROR, text or "the tool failed without a message"
        )
    return ToolResult.ok(text)


def _render(result: mt.CallToolResult) -> str:
    """Text blocks as they are, joined by newlines; every other block described in one line,
    so nothing the server sent is dropped without a trace."""
    parts: list[str] = []
    for block in result.content:
        match block:
            case mt.TextContent():
                parts.append(block.text)
            case mt.ImageContent():
                parts.append(
                    f"[image: {block.mime_type}, {_size(_b64_size(block.data))}, not shown]"
                )
            case mt.AudioContent():
                parts.append(
                    f"[audio: {block.mime_type}, {_size(_b64_size(block.data))}, not shown]"
                )
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
        return json.dumps(result.structured_content, ensure_ascii=False)
    if not parts:
        return "" if result.is_error else "(the tool returned no content)"
    return "\n".join(parts)


def _clip_result(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[:MAX_RESULT_CHARS] + TRUNCATED


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


def _tail(stderr: IO[str], since: int) -> str:
    line = _last_line(stderr, since)
    return f" (its stderr ends: {line})" if line else ""


def _stderr_size(stderr: IO[str]) -> int:
    try:
        return os.fstat(stderr.fileno()).st_size
    except (OSError, ValueError):
        return 0


def _last_line(stderr: IO[str], since: int) -> str:
    """The last line the server wrote to stderr after offset `since` (an older line would
    blame this connection for an earlier one's words). pread, not read: the server shares
    the file offset and would write over what a read skipped past."""
    try:
        fd = stderr.fileno()
        size = os.fstat(fd).st_size
        start = max(since, size - 4096)
        data = os.pread(fd, max(0, size - start), start).decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""
    lines = [line.strip() for line in data.splitlines() if line.strip()]
    return _clip(lines[-1], 200) if lines else ""


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
def sdk_logs_as_notices(notice: Notice) -> Iterator[None]:
    """While open, the SDK's warnings reach `notice` as one line each, without tracebacks
    (unconfigured, Python would print its logger.exception tracebacks on stderr). For the
    CLI; a library user configures logging as they like."""

    class _Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            with contextlib.suppress(Exception):
                notice(f"{record.name}: {_clip(_one_line(record.getMessage()), 300)}")

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
