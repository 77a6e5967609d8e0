"""The shell tools: `bash` (a command, in the foreground or the background), `bash_output`
and `bash_kill`, over one `ShellJobs` table per run.

- Each command is `bash -c COMMAND`, inside bubblewrap (ruizn.effects.tools.bwrap) unless the user
  turned the sandbox off, in a process group and session of its own, with ruizn's secrets
  removed from its environment and stdin at /dev/null. With `--shell-allow-domain`, the
  run's proxy (domainproxy.py) starts with the table, and commands get its variables.
- stdout and stderr share one pipe, so the output interleaves as a terminal would show it.
  It is kept capped (the first and the last bytes, with a line saying how much was cut),
  so a command that prints gigabytes costs a bounded amount of memory (output.py). Given a
  `CommandOutput` (the CLI at a terminal), a foreground call shows it the end of the output
  as it comes; without one it only waits.
- A foreground call ends when the command does, or at its timeout (the call's own, up to
  `MAX_TIMEOUT`; default the run's `shell_timeout`), when its whole process group is killed;
  Ctrl-C (cancellation) kills it too before the run stops.
- A background call returns an id at once; `bash_output(id)` returns what it printed since
  the last read, `bash_kill(id)` ends it. `ShellJobs.close()` kills every process the run
  started when the run ends, however it ends; a kill -9 of ruizn takes them too. Each
  command runs below a small reaper (reaper.py: a child subreaper, so a process that
  detaches stays below it; it ends everything below it when the command ends, when ruizn
  ends the command, and on ruizn's death through its parent-death signal), which covers
  `--sandbox off` and bubblewrap caught in its set-up; inside, bubblewrap's
  --die-with-parent, and `_guarded` for a kill while bubblewrap sets up.
- `bash` is not read-only: a call a crash interrupted is never run again on resume
  (resuming.interrupted_calls). Each call needs approval unless the run's rules approve it
  (rules.rule_decision: `--allow-command`, `--approval always`).

Processes are started on the event loop's thread (never a worker thread that may exit: the
parent-death signal is tied to the thread that forked).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import anyio
from attrs import field, frozen

from ruizn.defaults import DEFAULT_SHELL_TIMEOUT
from ruizn.effects.tools.base import BaseTool, ToolInputError, run_blocking
from ruizn.effects.tools.bwrap import Confinement, SandboxUnavailable, bwrap_argv, shared_netns
from ruizn.effects.tools.domainproxy import DomainProxy
from ruizn.effects.tools.gitguard import GitUnreadable, git_guard, remove_masks
from ruizn.effects.tools.lifetime import dying_with as _dying_with
from ruizn.effects.tools.output import (
    HEAD_BYTES,
    LIVE_EVERY,
    TAIL_BYTES,
    CappedOutput,
    CommandOutput,
    render,
)
from ruizn.effects.userconfig.dirs import home_folder
from ruizn.state import ErrorType, JsonObject, ToolResult

__all__ = [
    "HEAD_BYTES",
    "MAX_TIMEOUT",
    "SHELL_TOOL_NAMES",
    "TAIL_BYTES",
    "BashKillTool",
    "BashOutputTool",
    "BashTool",
    "CappedOutput",
    "CommandOutput",
    "Job",
    "Limits",
    "ShellConfig",
    "ShellJobs",
    "render",
    "shell_config",
    "shell_tools",
]

MAX_TIMEOUT = 600.0
# After the command exits, how long its output pipe may stay open (a straggler holding it).
_DRAIN_SECONDS = 2.0
# Every command runs below it (see reaper.py); run by path, stdlib only, so it starts fast.
_REAPER = Path(__file__).with_name("reaper.py")
_REAPER_GRACE = 3.0


class Job:
    """One command: its process, its output, and whether it has finished."""

    def __init__(
        self, job_id: str, command: str, proc: subprocess.Popen[bytes], *, info_fd: int | None
    ) -> None:
        self.id = job_id
        self.command = command
        self.proc = proc
        self.output = CappedOutput()
        self.began = time.monotonic()
        self.finished = threading.Event()
        self.killed_by: str | None = None
        self._eof = threading.Event()
        # The sandbox's pid 1 (a pidfd): once it has exited, so has every process in it.
        self._sandbox: int | None = None
        self._sandbox_known = threading.Event()
        self._gone = threading.Event()
        if info_fd is None:
            self._sandbox_known.set()
        else:
            threading.Thread(
                target=self._learn_sandbox,
                args=(info_fd,),
                name=f"ruizn-bash-info-{job_id}",
                daemon=True,
            ).start()
        threading.Thread(target=self._read, name=f"ruizn-bash-{job_id}", daemon=True).start()
        threading.Thread(target=self._wait, name=f"ruizn-bash-wait-{job_id}", daemon=True).start()

    def _read(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        try:
            while chunk := os.read(stream.fileno(), 65536):
                self.output.add(chunk)
        except (OSError, ValueError):
            pass
        finally:
            stream.close()
            self._eof.set()

    def _learn_sandbox(self, fd: int) -> None:
        try:
            with os.fdopen(fd, "rb") as info:
                pid = json.loads(info.read() or b"{}").get("child-pid")
            if isinstance(pid, int):
                self._sandbox = os.pidfd_open(pid)
        except (OSError, ValueError):
            pass  # bubblewrap failed before it made the sandbox: nothing to wait for
        finally:
            self._sandbox_known.set()

    def wait_gone(self, timeout: float) -> None:
        """Wait (at most `timeout` s) until the sandbox's pid 1, and so all of it, has exited."""
        self._gone.wait(timeout)

    def _wait(self) -> None:
        self.proc.wait()
        # Anything still holding the pipe is a straggler of the command's group.
        if not self._eof.wait(_DRAIN_SECONDS):
            self.kill(None)
            self._eof.wait(_DRAIN_SECONDS)
        self.finished.set()
        # bubblewrap has exited; its sandbox's pid 1 follows (--die-with-parent), and the
        # kernel ends every process in the sandbox before pid 1 is gone.
        self._sandbox_known.wait(_DRAIN_SECONDS)
        pidfd = self._sandbox
        if pidfd is not None:
            with contextlib.suppress(OSError, ValueError):
                select.select([pidfd], [], [], 5.0)
            os.close(pidfd)
        self._gone.set()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def exit_code(self) -> int | None:
        return self.proc.returncode

    def kill(self, why: str | None) -> None:
        """End the command and every process below it: the reaper does it on SIGTERM; should
        it not be gone soon, its process group is sent SIGKILL."""
        if why is not None and self.killed_by is None and self.proc.returncode is None:
            self.killed_by = why
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.proc.pid, signal.SIGTERM)
        if self.proc.returncode is None:
            force = threading.Timer(_REAPER_GRACE, self._force)
            force.daemon = True
            force.start()

    def _force(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def status(self) -> str:
        code = self.proc.returncode
        if code is None:
            return "running"
        if self.killed_by is not None:
            return f"killed ({self.killed_by})"
        return f"exited with code {code}" if code >= 0 else f"killed by signal {-code}"


@frozen(kw_only=True)
class Limits:
    """What each command may use (see docs/shell.md, "Limits")."""

    # CPU seconds, for each process (RLIMIT_CPU): then SIGXCPU ends it.
    cpu_seconds: int = int(MAX_TIMEOUT)
    # Bytes of data (heap and private memory) for each process (RLIMIT_DATA): then an
    # allocation fails. Address space is not limited: runtimes reserve much more than they use.
    memory_bytes: int = 4 << 30
    # Processes at once (RLIMIT_NPROC in the sandbox; as root, a pids cgroup: see reaper.py).
    processes: int = 1024


@frozen(kw_only=True)
class ShellConfig:
    """How the run's commands are started."""

    workspace: Path
    confinement: Confinement | None  # None: --sandbox off
    bwrap: str | None
    environ: Mapping[str, str]
    shell: str = "/bin/bash"
    timeout: float = DEFAULT_SHELL_TIMEOUT
    limits: Limits = field(factory=Limits)
    # Hosts commands reach through the run's proxy (--shell-allow-domain; domainproxy.py).
    allow_domains: tuple[str, ...] = ()


class ShellJobs:
    """The processes a run started; `close()` kills every one still alive."""

    def __init__(self, config: ShellConfig) -> None:
        self.config = config
        self.jobs: dict[str, Job] = {}
        self._closed = False
        # A pipe nobody writes to (see _guarded): the read end goes into every sandbox, the
        # write end stays in ruizn alone (neither is inheritable), so once ruizn is gone
        # the read end is at end of file.
        self._alive: tuple[int, int] | None = None
        # The run's network namespace (user, net descriptors) its commands share.
        self._netns: tuple[int, int] | None = None
        self._proxy: DomainProxy | None = None
        if config.confinement is not None:
            self._alive = os.pipe()
            if config.confinement.shared_net:
                assert config.bwrap is not None
                try:
                    self._netns = shared_netns(config.bwrap, config.environ)
                    if config.allow_domains:
                        self._proxy = DomainProxy.start(
                            config.allow_domains, self._netns, config.environ
                        )
                except BaseException:
                    self.close()
                    raise

    def start(self, command: str, *, background: bool) -> Job:
        if self._closed:
            raise RuntimeError("the run has ended: no more commands")
        config = self.config
        argv = [config.shell, "-c", command]
        box = config.confinement
        info_read: int | None = None
        info_write: int | None = None
        environ = dict(config.environ) | (self._proxy.environment() if self._proxy else {})
        passed: tuple[int, ...] = ()
        if box is not None:
            assert config.bwrap is not None
            assert self._alive is not None
            info_read, info_write = os.pipe()
            alive = self._alive[0]
            argv = _guarded(
                config.shell,
                command,
                alive,
                environ.pop("BASH_ENV", ""),
                processes=config.limits.processes,
            )
            argv = bwrap_argv(config.bwrap, box, argv, info_fd=info_write)
            passed = (info_write, alive, *(self._netns or ()))
        job_id = ("bg_" if background else "fg_") + secrets.token_hex(4)
        limits = config.limits
        argv = [
            *(sys.executable, "-I", "-S", str(_REAPER), str(os.getpid())),
            *(str(limits.cpu_seconds), str(limits.memory_bytes)),
            str(limits.processes),
            ",".join(map(str, self._netns)) if self._netns else "-",
            *argv,
        ]
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=environ,
                cwd=str(config.workspace),
                start_new_session=True,
                close_fds=True,
                pass_fds=passed,
                # Until the reaper has its own handler (it then turns this into SIGTERM, and
                # ends everything below it before it goes).
                preexec_fn=_dying_with(os.getpid()),  # noqa: PLW1509
            )
        except BaseException:
            if info_read is not None:
                os.close(info_read)
            raise
        finally:
            if info_write is not None:
                os.close(info_write)
        job = Job(job_id, command, proc, info_fd=info_read)
        self.jobs[job_id] = job
        return job

    def background(self) -> list[Job]:
        return [job for job in self.jobs.values() if job.id.startswith("bg_")]

    def close(self) -> None:
        """Kill every process the run started (the run is ending)."""
        self._closed = True
        for job in self.jobs.values():
            if job.proc.returncode is None:
                job.kill("the run ended")
        for job in self.jobs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                job.proc.wait(timeout=5)
            job.wait_gone(5)
        if self._proxy is not None:
            self._proxy.close()
            self._proxy = None
        for fds in (self._alive, self._netns):
            for fd in fds or ():
                os.close(fd)
        self._alive = self._netns = None
        if self.config.confinement is not None:
            remove_masks(self.config.confinement.git.mask)


def _guarded(shell: str, command: str, alive: int, bash_env: str, *, processes: int) -> list[str]:
    """`shell -c command`, run only if ruizn still lives once the sandbox is set up.

    bubblewrap's --die-with-parent ties the sandbox's pid 1 to bubblewrap only once it is
    set; a kill -9 of ruizn before then leaves that pid 1 orphaned, and the command would
    run on. By the time this first line runs inside, the chain ruizn -> bubblewrap -> pid 1
    is in place, so a later death of ruizn ends the command; and if ruizn is dead already,
    `alive` (the read end of ruizn's pipe) is at end of file, and the command does not
    start. The fd is closed before `command` runs. BASH_ENV, taken out of the guard's
    environment, is put back for the command, so its file is read once, as before.
    The process limit is set here, inside: the count is the sandbox's user namespace's alone
    (outside it would count every process of the user's).
    """
    guard = (
        f"if read -t 0 -u {alive}; then exit 137; fi; exec {alive}<&-; "
        f"ulimit -u {processes} 2>/dev/null; "  # fails only under a lower limit already
        '[ -z "$2" ] || export BASH_ENV="$2"; exec "$0" -c "$1"'
    )
    return [shell, "-c", guard, shell, command, bash_env]


def _seconds(value: float) -> str:
    return f"{value:.1f}s" if value < 10 else f"{math.floor(value)}s"


class BashTool(BaseTool):
    name = "bash"
    description = (
        "Run a bash command in the workspace folder and return its output (stdout and stderr"
        " together) and exit code. Confined unless the user turned the sandbox off: only the"
        " workspace is writable, /tmp is private, the home folder is hidden and there is no"
        " network unless the user allowed it; git reads the repository but cannot write it"
        " (no commit, add or checkout: leave those to the user). Each process may use"
        f" {Limits().cpu_seconds} s of CPU time and {Limits().memory_bytes >> 30} GiB of"
        " memory. Long output keeps its start and end. `timeout`"
        f" is in seconds (at most {int(MAX_TIMEOUT)}). `background: true` starts a long-running"
        " command (a server, a watcher) and returns its id at once: read what it prints with"
        " bash_output, stop it with bash_kill; it is killed when the run ends."
    )
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The bash command line."},
            "timeout": {
                "type": "integer",
                "minimum": 1,
                "maximum": int(MAX_TIMEOUT),
                "description": "Seconds before the command is killed (foreground only).",
            },
            "background": {
                "type": "boolean",
                "description": "Start it in the background and return its id at once.",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    read_only = False
    needs_approval = True
    # What the log says of a call the run's cancellation (Ctrl-C) cut short: invoke kills
    # the command's whole process group before the cancellation goes on (see the runner).
    stopped_on_cancel = (
        "the command was killed (its whole process group) because the run was cancelled"
        " (Ctrl-C) while it ran; what it did before that stands, the rest did not happen"
    )

    def __init__(self, jobs: ShellJobs, output: CommandOutput | None = None) -> None:
        # invoke_tool's own deadline must not cut a command before its timeout does.
        super().__init__(timeout=MAX_TIMEOUT + 30)
        self.jobs = jobs
        self.output = output

    async def invoke(self, input: JsonObject) -> ToolResult | str:
        command = input["command"]
        if not command.strip():
            raise ToolInputError("command is empty")
        if "\0" in command:
            raise ToolInputError("command holds a NUL character")
        if input.get("background"):
            job = self.jobs.start(command, background=True)
            return (
                f"started in the background as {job.id} (pid {job.pid}); read its output with"
                f" bash_output(id={job.id!r}), stop it with bash_kill(id={job.id!r})"
            )
        limit = float(input.get("timeout") or self.jobs.config.timeout)
        limit = min(limit, MAX_TIMEOUT)
        job = self.jobs.start(command, background=False)
        try:
            with anyio.move_on_after(limit) as scope:
                await self._finished(job)
        except BaseException:
            job.kill("ruizn was interrupted (Ctrl-C)")
            raise
        if scope.cancelled_caught:
            job.kill(f"timed out after {_seconds(limit)}")
            with anyio.CancelScope(shield=True):
                await run_blocking(lambda: job.finished.wait(10), name="ruizn-bash-wait")
        took = time.monotonic() - job.began
        text = job.output.take()
        if text and not text.endswith("\n"):
            text += "\n"
        if job.killed_by is not None:
            return ToolResult.error(
                ErrorType.TIMEOUT,
                f"{text}[killed: {job.killed_by}; the whole process group was ended]",
            )
        code = job.exit_code
        why = ""
        if code in (128 + signal.SIGXCPU, -signal.SIGXCPU):  # the shell's or the reaper's
            why = f": stopped at its CPU time limit ({self.jobs.config.limits.cpu_seconds} s)"
        done = f"{text}[exit code {code} · {_seconds(took)}{why}]"
        if code != 0:  # failed: shown and counted as such, the output kept whole
            return ToolResult(content=done, is_error=True, error_type=ErrorType.EXIT_STATUS)
        return done

    async def _finished(self, job: Job) -> None:
        """Wait for the command; with an output sink, hand it the command's last bytes as
        they change (a look every LIVE_EVERY s), and say when it is over."""
        output = self.output
        if output is None:
            await run_blocking(job.finished.wait, name="ruizn-bash-wait")
            return
        seen = 0
        try:
            while not await run_blocking(
                lambda: job.finished.wait(LIVE_EVERY), name="ruizn-bash-wait"
            ):
                if job.output.total != seen:
                    seen = job.output.total
                    output.running(job.id, job.output.last())
        finally:
            output.ended(job.id)


class BashOutputTool(BaseTool):
    name = "bash_output"
    description = (
        "What a background command (started by bash with background: true) printed since the"
        " last read, and whether it is still running."
    )
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {"id": {"type": "string", "description": "The background job's id."}},
        "required": ["id"],
        "additionalProperties": False,
    }
    read_only = True

    def __init__(self, jobs: ShellJobs) -> None:
        super().__init__()
        self.jobs = jobs

    async def invoke(self, input: JsonObject) -> ToolResult | str:
        job = _background(self.jobs, input["id"])
        text = job.output.take()
        if text and not text.endswith("\n"):
            text += "\n"
        return f"{text}[{job.id}: {job.status()}]"


class BashKillTool(BaseTool):
    name = "bash_kill"
    description = "Stop a background command started by bash (its whole process group)."
    input_schema: ClassVar[JsonObject] = {
        "type": "object",
        "properties": {"id": {"type": "string", "description": "The background job's id."}},
        "required": ["id"],
        "additionalProperties": False,
    }
    read_only = False

    def __init__(self, jobs: ShellJobs) -> None:
        super().__init__()
        self.jobs = jobs

    async def invoke(self, input: JsonObject) -> ToolResult | str:
        job = _background(self.jobs, input["id"])
        if job.proc.returncode is None:
            job.kill("bash_kill")
            await run_blocking(lambda: job.finished.wait(5), name="ruizn-bash-wait")
            await run_blocking(lambda: job.wait_gone(5), name="ruizn-bash-wait")
        return f"{job.id}: {job.status()}"


def _background(jobs: ShellJobs, job_id: object) -> Job:
    job = jobs.jobs.get(str(job_id))
    if job is None or not job.id.startswith("bg_"):
        known = ", ".join(j.id for j in jobs.background()) or "none"
        raise ToolInputError(
            f"no background command of this run has the id {str(job_id)[:40]!r} (they are:"
            f" {known}); commands of an earlier session were killed when it ended"
        )
    return job


def shell_tools(jobs: ShellJobs, output: CommandOutput | None = None) -> tuple[BaseTool, ...]:
    """The shell's tools; `output` sees a foreground command's output as it runs."""
    return (BashTool(jobs, output), BashOutputTool(jobs), BashKillTool(jobs))


SHELL_TOOL_NAMES = ("bash", "bash_output", "bash_kill")


def shell_config(
    *,
    workspace: Path,
    hidden: Sequence[Path],
    allow_read: Sequence[Path],
    network: bool,
    sandbox: bool,
    bwrap: str | None,
    environ: Mapping[str, str],
    timeout: float,
    allow_domains: Sequence[str] = (),
) -> ShellConfig:
    if allow_domains and (network or not sandbox):
        raise SandboxUnavailable(
            "--shell-allow-domain goes with the sandbox on and --shell-network off (the"
            " allowlist is the only way out of the sandbox's own network)"
        )
    home = home_folder(environ)
    box = None
    if sandbox:
        try:
            git = git_guard(workspace, dict(environ))
        except GitUnreadable as exc:
            raise SandboxUnavailable(
                f"the shell's sandbox cannot protect the workspace's git: {exc}; fix the"
                " repository, or pass --sandbox off to run commands unconfined"
            ) from None
        box = Confinement(
            workspace=workspace,
            hidden=tuple(hidden),
            allow_read=tuple(allow_read),
            network=network,
            shared_net=not network,
            home=Path(home) if home else None,
            git=git,
        )
    return ShellConfig(
        workspace=workspace,
        confinement=box,
        bwrap=bwrap,
        environ=environ,
        timeout=timeout,
        allow_domains=tuple(allow_domains),
    )
