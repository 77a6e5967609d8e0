"""One process's run: an `Agent` with the terminal's parts (printer, prompt, notices), driven
under signals, its errors turned into one line and an exit code.

How a run is built is `ruizn.shell.agent`'s business; this module only adds what a process at a
terminal has, and maps the library's typed exceptions to exit codes (`ruizn.cli.exits`).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import math
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO, TypeVar

import anyio
from attrs import evolve

from ruizn.cli.approval import awaiting_report, terminal_approver
from ruizn.cli.exits import EXIT_CODES, EXIT_ERROR, EXIT_OK, EXIT_USAGE, echo_error, fail
from ruizn.cli.printer import StdoutPrinter
from ruizn.effects.mcp.config import McpConfigError, MCPServer
from ruizn.effects.models.provider import ProviderConfigError
from ruizn.effects.runlog.reader import LogError
from ruizn.effects.runlog.sink import LogLost, SinkError
from ruizn.effects.runlog.store import FileStore, RunNotFound
from ruizn.effects.runlog.writer import RunLocked
from ruizn.effects.tools.bwrap import SandboxUnavailable
from ruizn.effects.tools.loader import Toolbox, ToolLoadError
from ruizn.events import Event, LlmResponse, RunResumed, RunStarted, ToolCallFinished
from ruizn.fork import ForkRefused
from ruizn.format import counted
from ruizn.grant import Grant
from ruizn.recording import RecordingError
from ruizn.resuming import ResumeRefused, UntrustedRun
from ruizn.rules import resume_fix
from ruizn.settings import ConfigError, RunSettings
from ruizn.shell.agent import Agent
from ruizn.shell.outcome import NothingToResume, Resume, RunResult, Session
from ruizn.shell.runner import Subscriber
from ruizn.shell.toolcalls import first_error
from ruizn.state import ExecutionContext, Status

T = TypeVar("T")

# The library's refusals that are the user's to fix: one line, exit 2, nothing written.
_USAGE_ERRORS: tuple[type[Exception], ...] = (
    ConfigError,
    ProviderConfigError,
    ToolLoadError,
    McpConfigError,
    RunNotFound,
    LogError,
    RunLocked,
    ResumeRefused,
    ForkRefused,
    RecordingError,
    SandboxUnavailable,
)
# The errors a command that works on a run reports as bad input (one line, exit 2).
USAGE_ERRORS = _USAGE_ERRORS
# A log dir we may not write is bad input (2); a full disk or an I/O error is 1.
_USAGE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EROFS, errno.EEXIST})


def printer(stream: TextIO | None = None, *, conversation: bool = False) -> StdoutPrinter:
    """The transcript's printer; at a terminal, one that draws running commands' lines too."""
    stream = sys.stdout if stream is None else stream
    tty = stream.isatty()
    color = tty and not os.environ.get("NO_COLOR")
    return StdoutPrinter(stream, color=color, live=tty, conversation=conversation)


def terminal_agent(
    settings: RunSettings,
    *,
    log_dir: str | None,
    mcp: tuple[MCPServer, ...] = (),
    mcp_headers: tuple[str, ...] = (),
    subscribers: Sequence[Subscriber] = (),
    conversation: bool = False,
) -> Agent:
    """The Agent of `ruizn run`/`resume`: the transcript on stdout, the prompt at the terminal
    (when there is one), notices on stderr; `subscribers` see every event too (the live
    OpenTelemetry export of `ruizn run --otlp`). A run with an output schema keeps stdout
    for its JSON answer alone (so it pipes into jq): its transcript goes to stderr."""
    transcript = printer(
        sys.stderr if settings.output_schema is not None else None, conversation=conversation
    )
    return Agent(
        settings=settings,
        mcp=mcp,
        mcp_headers=mcp_headers,
        approver=terminal_approver(),
        log_dir=log_dir,
        subscribers=(transcript, *subscribers, _freeze_at_step_ends),
        on_notice=notice,
        on_output=transcript.command_output,
    )


def toolbox_of(settings: RunSettings, root: Path) -> Toolbox:
    """The tools `ruizn run` with these settings would load (for `ruizn tools`)."""
    agent = Agent(settings=settings, store=FileStore(root), on_notice=notice)
    try:
        return agent.toolbox()
    except ToolLoadError as exc:
        fail(str(exc))


def mcp_tools_of(settings: RunSettings, servers: tuple[MCPServer, ...]) -> tuple[Any, ...]:
    """The tools `servers` offer (for `ruizn tools --mcp`): started, listed, stopped. A server
    that cannot start is one line, exit 2."""
    from ruizn.effects.mcp.names import McpStartupError

    agent = Agent(settings=settings, mcp=servers, log=False, on_notice=notice)
    try:
        with _sdk_notices():
            return anyio.run(agent.mcp_tools)
    except BaseExceptionGroup as failed:  # the servers' task group wraps what failed
        error = first_error(failed)
        if isinstance(error, McpStartupError):
            fail(str(error))
        raise error from None
    except McpStartupError as exc:
        fail(str(exc))


def new_run(agent: Agent, goal: str) -> int:
    return drive(lambda: agent.start(goal))


def resume_run(agent: Agent, run: str, request: Resume) -> int:
    """Resume `run`. A run this ruizn did not start (or whose log changed) is shown with its
    grant and put to the person at the terminal; with no terminal it is refused in one line
    naming `--trust`, and nothing runs."""
    try:
        return drive(lambda: agent.start_resume(run, request))
    except NothingToResume as done:
        print(str(done))
        return EXIT_OK
    except UntrustedRun as untrusted:
        if request.trust or not _can_ask():
            fail(str(untrusted))
        if not _accepted(untrusted):
            fail(f"run {untrusted.run_id} was not resumed: its grant was not accepted")
        keep, shell = _what_to_keep(untrusted.grant)
        accepted = evolve(request, trust=True, keep_approvals=keep, keep_shell=shell)
        return resume_run(agent, run, accepted)


def _what_to_keep(grant: Grant) -> tuple[bool, bool]:
    """Once a grant is accepted: whether the log's approvals, and its shell's loosening
    (--sandbox off, --allow-command patterns, --shell-allow-domain hosts), are applied too:
    each asked on its own, no unless the person says yes."""
    from ruizn.terminal import revealed_line

    keep = shell = False
    if grant.preapproved or grant.always_tools:
        count = len(grant.preapproved) + len(grant.always_tools)
        echo_err(
            f"apply all {count} approval{'s' if count > 1 else ''} the log records, as"
            " listed above? (no: each call is asked again, one by one) [y/N] "
        )
        keep = sys.stdin.readline().strip().lower() in ("y", "yes")
    if grant.unconfined or grant.allow_commands or grant.allow_domains:
        what = ["bash commands UNCONFINED (--sandbox off)"] if grant.unconfined else []
        if grant.allow_commands:
            patterns = ", ".join(f"'{revealed_line(p)}'" for p in grant.allow_commands)
            what.append(f"commands approved without asking by {patterns}")
        if grant.allow_domains:
            hosts = ", ".join(revealed_line(p) for p in grant.allow_domains)
            what.append(f"commands reaching these hosts through a proxy: {hosts}")
        echo_err(
            f"apply the log's shell settings: {'; '.join(what)}? (no: commands run in the"
            " sandbox, no pattern approves one, no proxy is given) [y/N] "
        )
        shell = sys.stdin.readline().strip().lower() in ("y", "yes")
    return keep, shell


def fork_run(agent: Agent, run: str, *, at: int, trust: bool, into: str | None = None) -> int:
    """Fork `run` at `at`: the new run id on stdout; a fork nobody vouches for says so."""
    from ruizn.effects.checkpoints.store import CheckpointError

    try:
        fork = agent.fork(run, at=at, trust=trust, into=into)
    except _USAGE_ERRORS as exc:
        fail(str(exc))
    except CheckpointError as exc:
        fail(str(exc))
    print(fork.run_id)
    if into is not None:
        echo_err(
            f"workspace: {_shown(Path(fork.state.settings.workspace))} (the files at seq {at})"
        )
    if fork.log_path is not None:
        echo_err(f"log: {_shown(fork.log_path)}")
    if agent.trust_problem(fork.run_id) is not None:
        from ruizn.terminal import visible

        echo_err(
            f"ruizn: {visible(run)} was not started by ruizn on this machine, so neither was"
            f" its fork: `ruizn resume {fork.run_id}` will show what it grants and ask"
        )
    return EXIT_OK


def rerun_run(agent: Agent, run: str, *, trust: bool, in_place: bool = False) -> int:
    """Re-drive `run`: one line and exit 0 when the re-drive is identical to the recording,
    the divergence (where, and a short diff) and exit 1 when it is not. A recording this
    ruizn did not make is put to the person at the terminal, as resume does."""
    from ruizn.cassette.rerun import rerun_async
    from ruizn.terminal import visible

    async def main() -> Any:
        return await _with_signals(lambda: rerun_async(agent, run, trust=trust, in_place=in_place))

    try:
        with _sdk_notices():
            done = anyio.run(main)
    except UntrustedRun as untrusted:
        if trust or not _can_ask():
            fail(str(untrusted))
        if not _accepted(untrusted, verb="re-drive"):
            fail(f"run {untrusted.run_id} was not re-driven: its grant was not accepted")
        return rerun_run(agent, run, trust=True, in_place=in_place)
    except KeyboardInterrupt:
        return EXIT_CODES["cancelled"]
    except BaseExceptionGroup as failed:
        return _failed(first_error(failed), [])
    except Exception as exc:
        return _failed(exc, [])
    if done.log_path is not None:
        echo_err(f"log: {_shown(done.log_path)}")
    echo_err(f"files: the tools ran in {done.files}: {_shown(done.workspace)}")
    if done.state.status is Status.CANCELLED:
        return EXIT_CODES["cancelled"]
    head = f"rerun {done.run_id} of {done.recording}"
    if done.divergence is None:
        calls = counted(done.calls, "model call")
        results = f"{done.results} tool result" + ("" if done.results == 1 else "s")
        print(f"identical: {head} ({calls}, {results}, status {done.state.status.value})")
        return EXIT_OK
    first, *rest = done.divergence.lines()
    print(visible(f"{head} {first}"))
    for line in rest:
        print(visible(line))
    return EXIT_ERROR


def _can_ask() -> bool:
    return sys.stdin.isatty() and sys.stderr.isatty()


def _accepted(untrusted: UntrustedRun, verb: str = "resume") -> bool:
    """Show what the log would grant, and ask."""
    from ruizn.terminal import revealed_line, visible

    echo_err(f"ruizn: run {visible(untrusted.run_id)} {untrusted.reason}. Its log would grant:")
    for line in untrusted.grant.lines():
        echo_err(f"  {revealed_line(line)}")
    if untrusted.grant.approval == "always":
        echo_err("  (an `always` approval from a log is not applied: calls will be asked)")
    if untrusted.grant.preapproved or untrusted.grant.always_tools:
        echo_err("  (the log's approvals are asked again, call by call, unless you accept them)")
    echo_err(f"{verb} it with this? [y/N] ")
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


Opening = Callable[[], contextlib.AbstractAsyncContextManager[Session]]


def drive(opening: Opening) -> int:
    """Build the run, then drive it to the end under signal handling; every way out is one
    line and an exit code. The run's MCP servers start first and are held open around the
    whole run: a server that fails to start is one line, exit 2, before any model call."""
    sessions: list[Session] = []

    async def main() -> RunResult:
        try:
            async with opening() as session:
                sessions.append(session)
                # The objects made at start-up live as long as the run: keep the collector
                # off them, and on for what the run makes.
                gc.freeze()
                gc.enable()
                return await _with_signals(session.drive)
        finally:
            gc.enable()

    # Off while the run is built: importing the SDK makes thousands of classes and little
    # garbage, and collecting as it goes costs a sixth of that import's time, all of it
    # before the first request.
    gc.disable()
    try:
        with _sdk_notices():
            result = anyio.run(main)
    except BaseExceptionGroup as failed:  # the MCP servers' task group wraps errors
        return _failed(first_error(failed), sessions)
    except KeyboardInterrupt:
        if not sessions:  # Ctrl-C before the run began (MCP servers starting)
            return EXIT_CODES["cancelled"]
        result = sessions[0].result()
    except NothingToResume:
        raise
    except Exception as exc:
        return _failed(exc, sessions)
    return _report(result)


def _failed(exc: BaseException, sessions: list[Session]) -> int:
    if isinstance(exc, NothingToResume):
        raise exc
    if isinstance(exc, LogLost):
        echo_error(str(exc))
        return EXIT_ERROR
    if isinstance(exc, SinkError):
        if not sessions:  # the first line could not be written: nothing was created
            cause = exc.__context__
            usage = isinstance(cause, OSError) and cause.errno in _USAGE_ERRNOS
            fail(str(exc), EXIT_USAGE if usage else EXIT_ERROR)
        echo_error(f"{exc}; the run stopped (every line before it is kept)")
        return EXIT_ERROR
    if isinstance(exc, _USAGE_ERRORS):
        fail(str(exc))
    from ruizn.effects.mcp.names import McpStartupError

    if isinstance(exc, McpStartupError):
        fail(str(exc), EXIT_USAGE)
    raise exc


def _report(result: RunResult) -> int:
    state = result.state
    if state.settings.output_schema is not None and state.output_valid:
        # The validated answer alone, one line of JSON, for a pipe (jq...).
        print(json.dumps(state.output, ensure_ascii=False), flush=True)
    if result.log_path is not None:
        echo_err(f"log: {_shown(result.log_path)}")
        from ruizn.cli.runs_list import remember

        remember(result.log_path, state)  # `ruizn runs` lists it next without its log
    for line in awaiting_report(state):  # the calls a stopped run waits on, with their ids
        echo_err(line)
    if state.status in (Status.MAX_STEPS, Status.CANCELLED):
        echo_err(f"continue with: ruizn resume {state.run_id}")
    elif state.status is Status.MAX_COST:
        echo_err(f"continue with: ruizn resume {state.run_id}{_next_budget(state)}")
    elif (fix := resume_fix(state)) is not None:  # a limit of this run ended it in error
        echo_err(f"continue with: ruizn resume {state.run_id} {fix}")
    return EXIT_CODES[state.status]


def _next_budget(state: ExecutionContext) -> str:
    """`--max-cost N` for a run its own budget stopped: a budget as big again (N is a total)."""
    budget = state.settings.max_cost
    if budget is None or state.cost < budget:
        return ""  # a shared budget stopped it: its own goes on as it is
    return f" --max-cost {math.ceil((state.cost + budget) * 100) / 100:.2f}"


def _freeze_at_step_ends(event: Event) -> None:
    """What a step leaves behind lives as long as the run (the history): take it out of the
    cyclic collector's reach, so a full collection does not rescan the whole history, which
    would make each step slower as the run grows. Garbage is still freed by refcounting."""
    if type(event) in _STEP_ENDS:
        gc.freeze()


_STEP_ENDS = (RunStarted, RunResumed, LlmResponse, ToolCallFinished)


@contextlib.contextmanager
def _sdk_notices() -> Iterator[None]:
    """The MCP SDK's own log lines, as notices, redacted (cli/sdklog.py: installed before
    the SDK is imported, which a run does lazily)."""
    from ruizn.cli.sdklog import lines_to

    with lines_to(echo_err):
        yield


async def _with_signals(work: Callable[[], Awaitable[T]]) -> T:
    """First SIGINT/SIGTERM/SIGHUP cancels the run cleanly; a second one exits at once."""
    result: list[T] = []
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
        # One error ended the run (a log that cannot be written...): raise it as itself, so
        # the caller maps it to its one line.
        raise first_error(failed) from None
    if not result:
        raise KeyboardInterrupt
    return result[0]


def settings_or_fail(*, workspace: str = ".", read_timeout: float | None = None) -> RunSettings:
    """The settings of a command that goes on from a run (resume, compact, rerun): its
    workspace, and this session's stream timeout (checked as `run`'s is); the rest default."""
    from attrs import evolve

    try:
        settings = RunSettings(workspace=workspace)
        return settings if read_timeout is None else evolve(settings, read_timeout=read_timeout)
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)


def echo_err(message: str) -> None:
    with contextlib.suppress(BrokenPipeError, ValueError):
        print(message, file=sys.stderr, flush=True)


def notice(message: str) -> None:
    """A library notice ("warning: ...", "mcp: ...") as one inert line on stderr."""
    from ruizn.terminal import visible

    echo_err("ruizn: " + visible(" ".join(message.split())))


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def with_project_hooks(settings: RunSettings, *, trust: bool) -> RunSettings:
    """The settings with the workspace's `.ruizn/hooks.json` hooks, if a person accepts them:
    they are code from the workspace, so each command is shown and asked about at the
    terminal (or accepted with --trust). With neither, they do not run, and a line says so."""
    from ruizn.effects.hooks.config import PROJECT_HOOKS, HookConfigError, project_file
    from ruizn.grant import hook_line
    from ruizn.terminal import revealed_line

    try:
        found, warning = project_file(Path(settings.workspace))
    except HookConfigError as exc:
        fail(str(exc))
    if warning is not None:
        echo_err(f"ruizn: {warning}")
    if not found:
        return settings
    if not trust:
        if not _can_ask():
            echo_err(
                f"ruizn: {PROJECT_HOOKS} holds {len(found)} hook command(s) from the workspace;"
                " they do not run without a person's yes at a terminal, or --trust"
            )
            return settings
        echo_err(f"ruizn: this workspace's {PROJECT_HOOKS} would run these commands:")
        for spec in found:
            # Every field escaped, as one line: a matcher's escape codes could otherwise
            # erase the real command and draw another.
            echo_err(f"  {revealed_line(hook_line(spec))}")
        echo_err("run them in this run? [y/N] ")
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            echo_err("ruizn: the project's hooks do not run in this run")
            return settings
    return evolve(settings, hooks=(*settings.hooks, *found))


def with_user_hooks(settings: RunSettings) -> RunSettings:
    """The settings with the hooks of the user's own config file (its `[hooks]` table, in
    Claude Code's shape) before the --hooks files': the person's own file, like --hooks."""
    from ruizn.configlayers import ConfigFileError
    from ruizn.effects.hooks.config import HookConfigError, parse, unrun_events
    from ruizn.effects.userconfig.reader import read_toml, user_config_path

    path = user_config_path(os.environ)
    try:
        document = read_toml(path, required=bool(os.environ.get("RUIZN_CONFIG")))
        if document is None or "hooks" not in document:
            return settings
        found = parse(document["hooks"], f"{path} [hooks]", own=True)
        warning = unrun_events(document["hooks"], f"{path} [hooks]")
    except (ConfigFileError, HookConfigError) as exc:
        fail(str(exc))
    if warning is not None:
        echo_err(f"ruizn: {warning}")
    return evolve(settings, hooks=(*found, *settings.hooks))
