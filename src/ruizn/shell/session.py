"""One process's run: wire the effects, drive the runner, handle signals, return the exit code."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from ruizn.effects.printer import StdoutPrinter
from ruizn.effects.provider import Provider, RetryNotice
from ruizn.effects.read_file import ReadFileTool
from ruizn.effects.tools import ToolRegistry
from ruizn.effects.writer import EventWriter
from ruizn.shell.cli import EXIT_CODES, EXIT_USAGE, fail
from ruizn.shell.runner import AgentRunner
from ruizn.state import ExecutionContext

TEST_MODEL = "test"


def run_id_now() -> str:
    """`YYYYMMDD-HHMMSS-xxxxxx`: sortable by start time, unique by 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def retry_base_delay() -> float:
    # Tests set this to keep retry back-offs short; users keep the default.
    return float(os.environ.get("RUIZN_RETRY_BASE_DELAY", "0.5"))


def make_registry(workspace: Path, registry: ToolRegistry | None = None) -> ToolRegistry:
    # WIRING(functools): a registry the CLI built from --tool and the plug-ins wins.
    return registry if registry is not None else ToolRegistry([ReadFileTool(workspace)])


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
    registry: ToolRegistry | None = None,  # WIRING(functools)
) -> int:
    writer = open_writer(log_path)
    runner = build_runner(
        model=model,
        workspace=workspace,
        read_timeout=read_timeout,
        max_retries=max_retries,
        writer=writer,
        registry=registry,  # WIRING(functools)
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
    registry: ToolRegistry | None = None,  # WIRING(functools)
) -> AgentRunner:
    runner: AgentRunner | None = None

    def on_retry(notice: RetryNotice) -> None:
        if runner is not None:
            runner.notify_retry(notice)

    runner = AgentRunner(
        provider=make_provider(model, workspace, read_timeout, max_retries, on_retry),
        registry=make_registry(workspace, registry),  # WIRING(functools)
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
