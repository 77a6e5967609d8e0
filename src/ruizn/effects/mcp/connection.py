"""One MCP server's connection: started, listed, called, watched for tool-list changes, stopped."""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, ClassVar, cast

import anyio
import anyio.abc
import httpx2
import mcp.types as mt
from mcp.client import Client, Transport
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from ruizn.effects.mcp.config import MCPServer
from ruizn.effects.mcp.names import McpStartupError
from ruizn.effects.mcp.results import tool_result
from ruizn.effects.mcp.stderr import StderrFile, StderrPipe
from ruizn.effects.mcp.text import (
    Shown,
    describe,
    leaf,
    one_line,
    quote,
    seconds,
    times,
)
from ruizn.effects.tools.base import BaseTool
from ruizn.state import ErrorType, JsonObject, ToolResult
from ruizn.terminal import Notice
from ruizn.toolsource import SourceKind, ToolSource
from ruizn.version import __version__

MAX_LIST_PAGES = 100


# Lines of non-JSON-RPC output reported per connection; a server that logs to stdout would
# otherwise flood the terminal. The rest are counted in one last notice.
MAX_GARBAGE_NOTICES = 3


class McpTool(BaseTool):
    """One tool of an MCP server. Each MCP tool gets a subclass of its own (see `tool_class`),
    because a ruizn tool's name, description and schema are class attributes."""

    server_name: ClassVar[str]
    mcp_name: ClassVar[str]  # the server's own name for the tool
    # Approval is needed unless the server says the tool only reads (readOnlyHint).
    needs_approval = True

    def __init__(self, server: Server, *, timeout: float) -> None:
        super().__init__(timeout=timeout)
        # A timeout in the server's own config wins over the run's --tool-timeout.
        self.own_timeout = server.config.timeout or None
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


def tool_class(server: str, name: str, spec: mt.Tool) -> type[McpTool]:
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


class Server:
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
        stderr: StderrFile,
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
        self._connection: Connection | None = None
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
                    self.name, f"listing its tools failed: {describe(exc)}{conn.tail()}"
                ) from None
            self._started = True
            return tools
        raise McpStartupError(
            self.name, f"did not list its tools within {seconds(self._startup_timeout)}"
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
                    self.name, f"listing its changed tools failed: {describe(exc)}"
                ) from None
        raise McpStartupError(
            self.name, f"did not list its changed tools within {seconds(self._startup_timeout)}"
        )

    def _listed_again(self) -> None:
        self.list_changed = True

    async def _list_tools(self, conn: Connection) -> list[mt.Tool]:
        client = conn.client
        if client is None:
            raise McpStartupError(self.name, f"stopped before listing its tools{conn.tail()}")
        tools: list[mt.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return tools
        raise McpStartupError(self.name, f"its tool list runs past {MAX_LIST_PAGES} pages")

    def stop(self) -> None:
        self._closing = True
        if self._connection is not None:
            self._connection.stop()

    def close_stderr(self) -> None:
        self._stderr.close()

    def _spawn(self) -> Connection:
        conn = Connection(
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

    def _broken(self, conn: Connection) -> None:
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
                f"{self._who()} stopped and was restarted {times(self._restarts)} already;"
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
                f"{note}{self._who()} answered with error {exc.code}: {one_line(exc.message)}",
            )
        except ValidationError as exc:
            errors = exc.errors()
            why = str(errors[0]["msg"]) if errors else str(exc)
            return ToolResult.error(
                ErrorType.RUNTIME_ERROR,
                f"{note}{self._who()} sent a result that is not valid MCP: {one_line(why)}",
            )
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            return self._lost(conn, note, f"could not be reached ({describe(exc)})")
        return tool_result(result, note)

    def _lost(self, conn: Connection, note: str, what: str) -> ToolResult:
        tail = conn.tail()
        conn.mark_broken()
        if self._reconnect_owed:
            then = "ruizn will reconnect before the next call to it"
        elif self._connection is not conn:
            then = "ruizn is starting it again for the next call"
        else:
            then = (
                f"it was restarted {times(self._restarts)} already: its tools are now unavailable"
            )
        return ToolResult.error(
            ErrorType.RUNTIME_ERROR,
            f"{note}{self._who()} {what}{tail}; the call may or may not have taken effect; {then}",
        )

    def _who(self) -> str:
        return f"MCP server {self.name}"


class Connection:
    """One connection to a server, owned by its own task (`run`), which enters and exits the
    SDK's client. Everything else only reads its state and calls `stop` or `mark_broken`."""

    def __init__(
        self,
        config: MCPServer,
        *,
        startup_timeout: float,
        cwd: Path | None,
        stderr: StderrFile,
        notice: Notice,
        shown: Shown,
        on_broken: Callable[[Connection], None],
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
        self._pipe: StderrPipe | None = None  # a stdio server's stderr, while `run` runs
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
        return f" (its stderr ends: {quote(self._shown, line)})" if line else ""

    async def run(self) -> None:
        if self.config.transport == "stdio":
            try:
                self._pipe = StderrPipe(self._stderr)
            except OSError as exc:
                self.failure = f"cannot make a pipe for its stderr: {describe(exc)}"
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
                        if announces_tool_changes(client):
                            following.start_soon(self._follow_tool_list, client)
                        await self._stop.wait()
                        following.cancel_scope.cancel()
            if self._scope.cancelled_caught and not self._stop.is_set():
                self.failure = (
                    "did not complete the MCP handshake (initialize) within"
                    f" {seconds(self._startup_timeout)}{self.tail()}"
                )
        except Exception as exc:  # the owner task never raises: its state says what happened
            if not self.settled.is_set():
                self.failure = startup_failure(self.config, exc) + self.tail()
            elif not self._stop.is_set():
                self._notice(f"MCP server {self.config.name}: connection failed: {describe(exc)}")
        finally:
            self.client = None
            if not self.settled.is_set():
                self.failure = self.failure or "stopped while starting"
                self.settled.set()
            self.mark_broken()

    def _client(self) -> Client:
        pipe = self._pipe
        return Client(
            watched(
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
        return http_transport(config.url, dict(config.headers))

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
                    f" ({describe(exc)}); a change to it is not seen until a resume"
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
        if self._garbage <= MAX_GARBAGE_NOTICES:
            self._notice(
                f"MCP server {self.config.name} sent something that is not JSON-RPC"
                f" (ignored): {quote(self._shown, str(message))}"
            )
        elif self._garbage == MAX_GARBAGE_NOTICES + 1:
            self._notice(f"MCP server {self.config.name}: more non-JSON-RPC output, not shown")


def announces_tool_changes(client: Client) -> bool:
    """Whether the server says it tells of tool list changes (notifications/tools/
    list_changed)."""
    tools = client.server_capabilities.tools
    return tools is not None and bool(tools.list_changed)


@contextlib.asynccontextmanager
async def http_transport(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    # The SDK's documented way to send headers: an HTTP client of our own (ours to close),
    # with the SDK's default limits (30 s to connect or send, 300 s between reads).
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


@contextlib.asynccontextmanager
async def watched(
    transport: Transport, *, on_end: Callable[[], None], on_spawned: Callable[[], None]
) -> AsyncIterator[Any]:
    """The transport, with its read stream watched for its end: then the server is gone (a
    stdio server exited), and the next call starts it again rather than fail first.
    `on_spawned` runs once the transport is open (a stdio server is running) or failed to."""
    try:
        async with transport as (read, write):
            on_spawned()
            yield EndWatch(read, on_end), write
    finally:
        on_spawned()


class EndWatch:
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

    def __aiter__(self) -> EndWatch:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> EndWatch:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return cast(bool | None, await self._inner.__aexit__(*exc_info))


def startup_failure(config: MCPServer, exc: BaseException) -> str:
    """One line for why a connection did not come up."""
    exc = leaf(exc)
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
            return f"refused the MCP handshake: {one_line(exc.message)} (error {exc.code})"
        case _:
            if config.transport == "http":
                return f"cannot connect to {config.describe()['url']}: {describe(exc)}"
            return describe(exc)
