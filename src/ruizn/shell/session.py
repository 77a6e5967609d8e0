"""One process's run: wire the effects, drive the runner under signals, return the exit code."""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path

import anyio

from ruizn.config import TEST_MODEL, ConfigError, RunConfig
from ruizn.decide import ResumePlan, ResumeRefused, plan_resume, resume_decisions
from ruizn.effects.approval import Approver, needs_approval_of
from ruizn.effects.logfile import LogError, TornTail, replay_file
from ruizn.effects.mcp_config import MCPServer
from ruizn.effects.printer import StdoutPrinter
from ruizn.effects.provider import Provider
from ruizn.effects.sandbox import workspace_sandbox
from ruizn.effects.sink import LogLost, SinkError
from ruizn.effects.tool_loader import Toolbox
from ruizn.effects.tools import BaseTool, ToolRegistry
from ruizn.effects.writer import EventWriter, RunLocked
from ruizn.events import Event, LlmResponse, ToolCallFinished
from ruizn.redact import Redactor
from ruizn.redact import api_key_problem as key_whitespace_problem
from ruizn.runner import AgentRunner, Subscriber, first_error
from ruizn.shell.approval import awaiting_report, terminal_approver
from ruizn.shell.exits import EXIT_CODES, EXIT_ERROR, EXIT_OK, EXIT_USAGE, echo_error, fail
from ruizn.state import ExecutionContext, JsonObject, Status
from ruizn.store import RunNotFound, default_root, new_run_id, resolve_run


def api_key_problem(model: str) -> str | None:
    if model == TEST_MODEL:
        return None
    key = os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        return "ANTHROPIC_API_KEY is not set: set it, or try --model test (offline)"
    # A key read from a CRLF file keeps its \r; the HTTP client would put the key itself
    # into its error text. Refuse it before anything is sent or logged.
    return key_whitespace_problem(os.environ)


def make_toolbox(config: RunConfig, workspace: Path, root: Path) -> Toolbox:
    """The built-ins, the --tool specs and the plug-ins; one line and exit 2 if one fails."""
    from ruizn.effects.tool_loader import ToolLoadError, collect_tools

    sandbox = workspace_sandbox(workspace, root, allow_secret_files=config.allow_secret_files)
    try:
        toolbox = collect_tools(
            sandbox, config.tools, plugins=config.plugins, timeout=config.tool_timeout
        )
    except ToolLoadError as exc:
        fail(str(exc))
    for warning in toolbox.warnings:
        echo_warning(warning)
    return toolbox


def reload_tools(state: ExecutionContext, workspace: Path, root: Path) -> ToolRegistry:
    """The tools the run started with, loaded again from where they came from; a tool that is
    gone stops the resume before any model call."""
    from ruizn.effects.tool_loader import ToolLoadError, collect_tools, load_sources

    sandbox = workspace_sandbox(workspace, root, allow_secret_files=state.allow_secret_files)
    try:
        if not state.tool_sources:  # a run from before sources were recorded: the built-ins
            return collect_tools(sandbox, plugins=False).registry()
        return ToolRegistry(load_sources(state.tool_sources, sandbox))
    except ToolLoadError as exc:
        fail(str(exc))


def make_provider(config: RunConfig, workspace: Path) -> Provider:
    if config.model == TEST_MODEL:
        from ruizn.effects.test_model import TestModelProvider

        return TestModelProvider(workspace)
    from ruizn.effects.anthropic_provider import AnthropicProvider
    from ruizn.effects.provider import ProviderConfigError

    # The SDK makes no retries of its own (decide.after_failure makes them all); a bad
    # ANTHROPIC_BASE_URL or key is one line, exit 2.
    try:
        return AnthropicProvider(read_timeout=config.read_timeout)
    except ProviderConfigError as exc:
        fail(str(exc), EXIT_USAGE)


def printer() -> StdoutPrinter:
    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    return StdoutPrinter(sys.stdout, color=color)


def build_runner(
    config: RunConfig,
    workspace: Path,
    writer: EventWriter,
    registry: ToolRegistry,
    state: ExecutionContext | None = None,
    *,
    approver: Approver | None = None,
    subscribers: Sequence[Subscriber] = (),
) -> AgentRunner:
    return AgentRunner(
        provider=make_provider(config, workspace),
        registry=registry,
        tool_concurrency=config.tool_concurrency,
        sink=writer,
        subscribers=[printer(), *subscribers, _freeze_at_step_ends],
        clock=time.time,
        timer=time.monotonic,
        state=state,
        redact=redactor(),
        approver=approver,
    )


def _freeze_at_step_ends(event: Event) -> None:
    """What a step leaves behind lives as long as the run (the history): take it out of the
    cyclic collector's reach, so a full collection does not rescan the whole history, which
    would make each step slower as the run grows. Garbage is still freed by refcounting."""
    if type(event) in _STEP_ENDS:
        gc.freeze()


_STEP_ENDS = (LlmResponse, ToolCallFinished)


def redactor() -> Callable[[Event], Event] | None:
    """Scrubs the API key and every *_API_KEY/*_TOKEN value ruizn was given from each event;
    None when there is none, so the token path pays nothing."""
    found = Redactor.from_env(os.environ)
    return found.redact_event if found else None


def new_run(
    config: RunConfig,
    goal: str,
    mcp_servers: tuple[MCPServer, ...] = (),
    subscribers: Sequence[Subscriber] = (),
) -> int:
    problem = api_key_problem(config.model)
    if problem:
        fail(problem)
    workspace = Path(config.workspace).resolve()
    if not workspace.is_dir():
        fail(f"the workspace {config.workspace} is not a folder")
    root = default_root(workspace, config.log_dir)
    run_id = new_run_id()
    log_path = root / run_id / "events.jsonl"
    toolbox = make_toolbox(config, workspace, root)
    writer = EventWriter.new(log_path)

    def start(mcp_tools: tuple[BaseTool, ...], mcp_records: tuple[JsonObject, ...]) -> AgentRunner:
        registry = ToolRegistry([*(loaded.tool for loaded in toolbox.tools), *mcp_tools])
        approver = terminal_approver(config.approval)
        runner = build_runner(
            config, workspace, writer, registry, approver=approver, subscribers=subscribers
        )
        try:
            runner.begin(
                run_id=run_id,
                goal=goal,
                config=config,
                workspace=str(workspace),
                tool_sources=toolbox.sources,
                mcp_servers=mcp_records,
            )
        except SinkError as exc:
            # Nothing was created: the run folder appears only with its first line. A log
            # dir we may not write is bad input (2); a full disk or an I/O error is 1.
            cause = exc.__context__
            usage = isinstance(cause, OSError) and cause.errno in _USAGE_ERRNOS
            fail(str(exc), EXIT_USAGE if usage else EXIT_ERROR)
        return runner

    return drive(start, writer, mcp_servers, workspace, root / ".mcp" / run_id)


_USAGE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EROFS, errno.EEXIST})


def resume_run(
    run: str,
    *,
    root: Path,
    max_steps: int | None,
    max_tokens: int | None,
    read_timeout: float,
    mcp_headers: tuple[str, ...] = (),
    approve: tuple[str, ...] = (),
    deny: tuple[str, ...] = (),
    reason: str | None = None,
) -> int:
    try:
        path = resolve_run(run, root)
    except RunNotFound as exc:
        fail(str(exc))
    try:
        # The lock first: nobody may append while we read the log and decide.
        writer = EventWriter.append(path)
    except RunLocked as exc:
        fail(str(exc))
    except SinkError as exc:
        fail(str(exc))
    try:
        return _resume_locked(
            writer,
            path,
            root,
            max_steps,
            max_tokens,
            read_timeout,
            mcp_headers,
            (approve, deny, reason),
        )
    finally:
        writer.close()


def _resume_locked(  # noqa: PLR0917 - private, called once, every argument needed
    writer: EventWriter,
    path: Path,
    root: Path,
    max_steps: int | None,
    max_tokens: int | None,
    read_timeout: float,
    mcp_headers: tuple[str, ...],
    decided: tuple[tuple[str, ...], tuple[str, ...], str | None],
) -> int:
    def note(tail: TornTail) -> None:
        echo_warning(f"{tail.describe(path)}; cutting it before resuming")

    try:
        replayed = replay_file(path, torn=note)
    except LogError as exc:
        fail(str(exc) if str(exc).startswith(str(path)) else f"{path}: {exc}")
    state = replayed.state
    try:
        plan: ResumePlan | None = plan_resume(state, max_steps=max_steps, max_tokens=max_tokens)
    except ResumeRefused as exc:
        fail(str(exc))
    approve, deny, reason = decided
    if plan is None:
        if approve or deny:  # a decision for a run that waits for none is a mistake
            fail(f"run {state.run_id} finished with {state.status.value}: no call awaits approval")
        print(f"run {state.run_id} already finished with {state.status.value}; nothing to resume")
        return EXIT_OK
    problem = api_key_problem(state.model)
    if problem:
        fail(problem + " to resume this run" if "not set" in problem else problem)
    workspace = Path(state.workspace or ".")
    if not workspace.is_dir():
        fail(f"the run's workspace {workspace} no longer exists")
    registry = reload_tools(state, workspace, root)  # before anything is cut or written
    servers = reload_mcp(state, mcp_headers)
    try:  # --approve/--deny name calls that wait: checked before anything is written
        decisions = resume_decisions(
            state, needs_approval_of(registry), approve=approve, deny=deny, reason=reason
        )
    except ResumeRefused as exc:
        fail(str(exc))
    torn_bytes = 0
    if replayed.torn is not None:
        # Only the unfinished last write is cut; every whole line stays byte for byte.
        torn_bytes = replayed.torn.size
        os.truncate(path, replayed.torn.offset)
    config = RunConfig(
        model=state.model,
        max_steps=plan.max_steps,
        max_tokens=state.max_tokens,
        system=state.system,
        workspace=str(workspace),
        read_timeout=read_timeout,
        max_retries=state.max_retries,
        retry_base_delay=state.retry_base_delay,
        tool_concurrency=max(1, state.tool_concurrency),
        allow_secret_files=state.allow_secret_files,
        approval=state.approval,
    )

    def start(mcp_tools: tuple[BaseTool, ...], _: tuple[JsonObject, ...]) -> AgentRunner:
        tools = ToolRegistry([*registry, *mcp_tools])
        approver = terminal_approver(state.approval)
        runner = build_runner(config, workspace, writer, tools, state=state, approver=approver)
        try:
            runner.resume(plan, torn_bytes=torn_bytes, decisions=decisions)
        except SinkError as exc:
            fail(str(exc), EXIT_ERROR)
        return runner

    return drive(start, writer, servers, workspace, path.parent)


def reload_mcp(state: ExecutionContext, header_specs: tuple[str, ...]) -> tuple[MCPServer, ...]:
    """The MCP servers the run started with, with header values given again (never logged)."""
    if not state.mcp_servers:
        return ()
    from ruizn.effects.mcp_config import McpConfigError, servers_from_records

    try:
        return servers_from_records(state.mcp_servers, header_specs)
    except McpConfigError as exc:
        fail(str(exc))


Start = Callable[[tuple[BaseTool, ...], tuple[JsonObject, ...]], AgentRunner]


def drive(
    start: Start,
    writer: EventWriter,
    mcp_servers: tuple[MCPServer, ...] = (),
    workspace: Path | None = None,
    mcp_stderr: Path | None = None,
) -> int:
    """Run to the end under signal handling; the log is closed on every way out.

    MCP servers start first, in the same task that stops them, and are held open around the
    whole run: a server that fails to start is one line, exit 2, before any model call and
    with no run created; every server is stopped on every way out.
    """
    runners: list[AgentRunner] = []

    async def main() -> ExecutionContext:
        async with _mcp_tools(mcp_servers, workspace, mcp_stderr) as (tools, records):
            runner = start(tools, records)
            runners.append(runner)
            # The objects made at start-up live as long as the run: keep the collector off.
            gc.freeze()
            return await _with_signals(runner.drive)

    def run_main() -> ExecutionContext:
        try:
            with _mcp_notices(bool(mcp_servers)):
                return anyio.run(main)
        except BaseExceptionGroup as failed:  # the MCP servers' task group wraps errors
            raise first_error(failed) from None

    try:
        state = run_main()
    except KeyboardInterrupt:
        if not runners:  # Ctrl-C before the run began (MCP servers starting)
            return EXIT_CODES["cancelled"]
        state = runners[0].state
    except LogLost as exc:
        writer.close()
        echo_error(str(exc))
        return EXIT_ERROR
    except SinkError as exc:
        echo_error(f"{exc}; the run stopped (every line before it is kept)")
        return EXIT_ERROR
    except Exception as exc:
        from ruizn.effects.mcp_tools import McpStartupError

        if isinstance(exc, McpStartupError):
            fail(str(exc), EXIT_USAGE)
        raise
    finally:
        writer.close()
    echo_err(f"log: {_shown(writer.path)}")
    for line in awaiting_report(state):  # the calls a stopped run waits on, with their ids
        echo_err(line)
    if state.status in (Status.MAX_STEPS, Status.CANCELLED):
        echo_err(f"continue with: ruizn resume {state.run_id}")
    return EXIT_CODES[state.status]


@contextlib.asynccontextmanager
async def _mcp_tools(
    servers: tuple[MCPServer, ...], workspace: Path | None, stderr_dir: Path | None
) -> AsyncIterator[tuple[tuple[BaseTool, ...], tuple[JsonObject, ...]]]:
    if not servers:
        yield (), ()
        return
    from ruizn.effects.mcp_tools import McpToolset

    def notice(text: str) -> None:
        echo_err(f"ruizn: mcp: {text}")

    toolset = McpToolset(servers, cwd=workspace, stderr_dir=stderr_dir, on_notice=notice)
    async with toolset as tools:
        yield tuple(tools), toolset.describe()


@contextlib.contextmanager
def _mcp_notices(active: bool) -> Iterator[None]:
    if not active:
        yield
        return
    from ruizn.effects.mcp_tools import sdk_logs_as_notices

    with sdk_logs_as_notices(lambda text: echo_err(f"ruizn: mcp: {text}")):
        yield


async def _with_signals(
    work: Callable[[], Awaitable[ExecutionContext]],
) -> ExecutionContext:
    """First SIGINT/SIGTERM/SIGHUP cancels the run cleanly; a second one exits at once."""
    result: list[ExecutionContext] = []
    try:
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                with anyio.open_signal_receiver(
                    signal.SIGINT, signal.SIGTERM, signal.SIGHUP
                ) as sigs:
                    cancelled = False
                    async for _ in sigs:
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
    except BaseExceptionGroup as failed:
        # One error ended the run (a log that cannot be written, a server that would not
        # start...): raise it as itself, so the caller maps it to its one line.
        raise first_error(failed) from None
    if not result:
        raise KeyboardInterrupt
    return result[0]


def config_from_options(**options: object) -> RunConfig:
    try:
        return RunConfig(**options)  # type: ignore[arg-type]
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)


def echo_err(message: str) -> None:
    with contextlib.suppress(BrokenPipeError, ValueError):
        print(message, file=sys.stderr, flush=True)


def echo_warning(message: str) -> None:
    echo_err("ruizn: warning: " + " ".join(message.split()))


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
