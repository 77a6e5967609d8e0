"""One process's run: wire the effects, drive the runner, handle signals, return the exit code."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

from ruizn.effects.printer import StdoutPrinter
from ruizn.effects.provider import Provider, RetryNotice
from ruizn.effects.read_file import ReadFileTool
from ruizn.effects.tools import BaseTool, ToolRegistry
from ruizn.effects.writer import EventWriter
from ruizn.shell.cli import EXIT_CODES, EXIT_USAGE, fail
from ruizn.shell.runner import AgentRunner
from ruizn.state import ExecutionContext

if TYPE_CHECKING:
    from ruizn.effects.mcp_config import MCPServer

TEST_MODEL = "test"


def run_id_now() -> str:
    """`YYYYMMDD-HHMMSS-xxxxxx`: sortable by start time, unique by 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def retry_base_delay() -> float:
    # Tests set this to keep retry back-offs short; users keep the default.
    return float(os.environ.get("RUIZN_RETRY_BASE_DELAY", "0.5"))


def make_registry(workspace: Path, extra_tools: Sequence[BaseTool] = ()) -> ToolRegistry:
    return ToolRegistry([ReadFileTool(workspace), *extra_tools])  # WIRING(mcp): extra_tools


def make_provider(
    model: str,
    workspace: Path,
    read_timeout: float,
    max_retries: int,
    on_retry: Callable[[RetryNotice], None],
) -> Provider:
    if model == TEST_MODEL:
        from ruizn.effects.test_model import TestModelProvider

        return TestModelProvider(workspace)
    from ruizn.effects.anthropic_provider import AnthropicProvider

    return AnthropicProvider(read_timeout=read_timeout, max_retries=max_retries, on_retry=on_retry)


def printer() -> StdoutPrinter:
    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    return StdoutPrinter(sys.stdout, color=color)


def open_writer(log_path: Path) -> EventWriter:
    try:
        return EventWriter(log_path)
    except OSError as exc:
        fail(f"cannot write the event log at {log_path}: {exc.strerror or exc}", EXIT_USAGE)


def new_run(
    *,
    run_id: str,
    log_path: Path,
    goal: str,
    model: str,
    max_steps: int,
    max_tokens: int,
    system: str,
    workspace: Path,
    read_timeout: float,
    max_retries: int,
    mcp_servers: tuple[MCPServer, ...] = (),  # WIRING(mcp)
) -> int:
    if mcp_servers:  # WIRING(mcp)
        return _new_run_with_mcp(
            run_id=run_id,
            log_path=log_path,
            goal=goal,
            model=model,
            max_steps=max_steps,
            max_tokens=max_tokens,
            system=system,
            workspace=workspace,
            read_timeout=read_timeout,
            max_retries=max_retries,
            mcp_servers=mcp_servers,
        )
    writer = open_writer(log_path)
    runner = build_runner(
        model=model,
        workspace=workspace,
        read_timeout=read_timeout,
        max_retries=max_retries,
        writer=writer,
    )
    runner.begin(
        run_id=run_id,
        goal=goal,
        model=model,
        max_steps=max_steps,
        max_tokens=max_tokens,
        system=system,
        workspace=str(workspace),
    )
    return drive(runner, log_path)


def build_runner(
    *,
    model: str,
    workspace: Path,
    read_timeout: float,
    max_retries: int,
    writer: EventWriter,
    state: ExecutionContext | None = None,
    extra_tools: Sequence[BaseTool] = (),  # WIRING(mcp)
) -> AgentRunner:
    runner: AgentRunner | None = None

    def on_retry(notice: RetryNotice) -> None:
        if runner is not None:
            runner.notify_retry(notice)

    runner = AgentRunner(
        provider=make_provider(model, workspace, read_timeout, max_retries, on_retry),
        registry=make_registry(workspace, extra_tools),
        writer=writer,
        subscribers=[printer()],
        clock=time.time,
        timer=time.monotonic,
        # Mid-stream failures get as many tries as the SDK gives a failed request.
        max_attempts=max_retries + 1,
        retry_base_delay=retry_base_delay(),
        state=state,
    )
    return runner


def _new_run_with_mcp(
    *,
    run_id: str,
    log_path: Path,
    goal: str,
    model: str,
    max_steps: int,
    max_tokens: int,
    system: str,
    workspace: Path,
    read_timeout: float,
    max_retries: int,
    mcp_servers: tuple[MCPServer, ...],
) -> int:
    """WIRING(mcp): `new_run` with MCP servers. The servers start before the log is opened and
    before the first model call (a start-up failure is exit 2, with no run), and the toolset is
    held open, in this one task, around the whole run, so every server is stopped on every
    way out. Notices (restarts, garbage on a server's stdout, the SDK's warnings) go to stderr:
    stdout is the transcript that replay reproduces."""
    from ruizn.effects.mcp_tools import McpStartupError, McpToolset, sdk_logs_as_notices

    def notice(text: str) -> None:
        click_echo_err(f"ruizn: mcp: {text}")

    runners: list[AgentRunner] = []

    async def main() -> ExecutionContext:
        toolset = McpToolset(
            mcp_servers, cwd=workspace, stderr_dir=log_path.parent, on_notice=notice
        )
        async with toolset as mcp_tools:
            runner = build_runner(
                model=model,
                workspace=workspace,
                read_timeout=read_timeout,
                max_retries=max_retries,
                writer=open_writer(log_path),
                extra_tools=mcp_tools,
            )
            runners.append(runner)
            runner.begin(
                run_id=run_id,
                goal=goal,
                model=model,
                max_steps=max_steps,
                max_tokens=max_tokens,
                system=system,
                workspace=str(workspace),
            )
            return await _with_signals(runner.drive)

    try:
        with sdk_logs_as_notices(notice):
            state = anyio.run(main)
    except McpStartupError as exc:
        fail(str(exc), EXIT_USAGE)
    except KeyboardInterrupt:
        if not runners:  # Ctrl-C while the servers were starting: no run began
            return EXIT_CODES["cancelled"]
        state = runners[0].state
    click_echo_err(f"log: {_shown(log_path)}")
    return EXIT_CODES[state.status]


def drive(runner: AgentRunner, log_path: Path) -> int:
    """Run to the end under signal handling; the log is closed on every way out."""
    try:
        state = anyio.run(_with_signals, runner.drive)
    except KeyboardInterrupt:
        state = runner.state
    click_echo_err(f"log: {_shown(log_path)}")
    return EXIT_CODES[state.status]


async def _with_signals(
    work: Callable[[], Awaitable[ExecutionContext]],
) -> ExecutionContext:
    """First SIGINT/SIGTERM cancels the run cleanly; a second one exits at once."""
    result: list[ExecutionContext] = []
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                cancelled = False
                async for _ in signals:
                    if cancelled:
                        os._exit(130)  # the user insists; every line so far is on disk
                    cancelled = True
                    worker.cancel()

        async def run() -> None:
            try:
                with worker:
                    result.append(await work())
            finally:
                group.cancel_scope.cancel()

        worker = anyio.CancelScope()
        group.start_soon(watch)
        group.start_soon(run)
    if not result:
        raise KeyboardInterrupt
    return result[0]


def click_echo_err(message: str) -> None:
    with contextlib.suppress(BrokenPipeError, ValueError):
        print(message, file=sys.stderr, flush=True)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
