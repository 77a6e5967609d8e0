"""Running one hook command: JSON on stdin, its exit code, stdout and stderr, killed (its
whole process group) at its timeout. Works with no terminal at all (stdin is the JSON,
never the person's terminal), so hooks fire in CI and under `< /dev/null` too.

The timeout bounds the whole hook, its output included: a child it left running that holds
its stdout open is killed with it at the deadline. Its environment is ruizn's without the
secrets (the API key, `*_TOKEN`, `*_KEY`, `*_SECRET`, `*_PASSWORD`, ...; the shell's rule),
but for the variables the hook's own `env` names."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import anyio
from anyio.abc import ByteReceiveStream
from attrs import frozen

from ruizn.effects.tools.bwrap import shell_environment
from ruizn.hooks import Outcome, outcome
from ruizn.settings import HookSpec, JsonObject

# What is read of a hook's stdout and stderr; the rest is drained and dropped.
MAX_OUTPUT = 64 * 1024


@frozen(kw_only=True)
class HookRun:
    """How one hook command ended and what it decided."""

    exit_code: int | None
    outcome: Outcome
    duration: float


class HookExecutor(Protocol):
    async def run(self, spec: HookSpec, payload: JsonObject) -> HookRun: ...


class CommandHooks:
    """Runs hook commands with `sh -c` in the workspace, `CLAUDE_PROJECT_DIR` and
    `RUIZN_PROJECT_DIR` set to it (scripts written for Claude Code find their files)."""

    def __init__(self, workspace: Path, environ: Mapping[str, str] | None = None) -> None:
        self._workspace = workspace
        self._environ = dict(os.environ if environ is None else environ)
        base = shell_environment(self._environ)
        base["CLAUDE_PROJECT_DIR"] = str(workspace)
        base["RUIZN_PROJECT_DIR"] = str(workspace)
        self._env = base

    def _env_for(self, spec: HookSpec) -> dict[str, str]:
        """The hook's environment: without secrets, but for those its `env` names."""
        passed = {name: self._environ[name] for name in spec.env if name in self._environ}
        return {**self._env, **passed} if passed else self._env

    async def run(self, spec: HookSpec, payload: JsonObject) -> HookRun:
        began = time.monotonic()
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        try:
            process = await anyio.open_process(
                ["/bin/sh", "-c", spec.command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self._workspace,
                env=self._env_for(spec),
                start_new_session=True,  # its own group: a timeout kills what it started too
            )
        except OSError as exc:
            failed = outcome(spec.event, None, "", f"the hook could not start: {exc}")
            return HookRun(exit_code=None, outcome=failed, duration=time.monotonic() - began)
        out: list[bytes] = []
        err: list[bytes] = []
        timed_out = False
        async with process:
            try:
                # The deadline covers the output too: a child the hook left running that
                # holds stdout open would otherwise keep the run waiting after the hook ends.
                with anyio.move_on_after(spec.timeout) as scope:
                    async with anyio.create_task_group() as group:
                        group.start_soon(_feed, process.stdin, data)
                        assert process.stdout is not None
                        assert process.stderr is not None
                        group.start_soon(_drain, process.stdout, out)
                        group.start_soon(_drain, process.stderr, err)
                        await process.wait()
                if scope.cancelled_caught:
                    timed_out = True
                    _kill_group(process.pid)
            finally:
                if timed_out or process.returncode is None:
                    _kill_group(process.pid)
                    with anyio.CancelScope(shield=True):
                        await process.wait()
        duration = time.monotonic() - began
        stdout = b"".join(out)[:MAX_OUTPUT].decode("utf-8", errors="replace")
        stderr = b"".join(err)[:MAX_OUTPUT].decode("utf-8", errors="replace")
        if timed_out:
            note = f"killed at its timeout ({spec.timeout:g}s)"
            return HookRun(
                exit_code=None, outcome=outcome(spec.event, None, "", note), duration=duration
            )
        code = process.returncode
        return HookRun(
            exit_code=code, outcome=outcome(spec.event, code, stdout, stderr), duration=duration
        )


async def _feed(stream: object, data: bytes) -> None:
    """The payload, then end of input; a hook that never reads it is no error."""
    if stream is None:
        return
    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        await stream.send(data)  # type: ignore[attr-defined]
    with contextlib.suppress(Exception):
        await stream.aclose()  # type: ignore[attr-defined]


async def _drain(stream: ByteReceiveStream, into: list[bytes]) -> None:
    kept = 0
    with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError, OSError):
        async for chunk in stream:
            if kept < MAX_OUTPUT:
                into.append(chunk)
                kept += len(chunk)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
