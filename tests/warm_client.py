"""The CLI tests' side of tests/warm_cli.py: one warm server per pytest process, started
on first use, and `run_ruizn`, which runs one `python -m ruizn` command to its end in a
forked child of it, or in a fresh interpreter when a fork could tell the difference.
`RUIZN_TEST_COLD=1` runs every command in a fresh interpreter."""

from __future__ import annotations

import atexit
import contextlib
import json
import locale
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

SCRIPT = Path(__file__).with_name("warm_cli.py")


class _Server:
    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="ruizn-warm-")
        self.socket = os.path.join(self.folder, "s")
        # The environment a CLI test's command gets (tests/cli/conftest.py, cli_env)
        # without its per-test parts: what differs from it is checked command by command.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "RUIZN_"))}
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), self.socket],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=self.folder,
        )
        assert self.proc.stdout is not None
        if "ready" not in json.loads(self.proc.stdout.readline() or b"{}"):
            raise RuntimeError("the warm ruizn server did not start")
        atexit.register(self.stop)

    def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # the server ends when its stdin closes
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


_lock = threading.Lock()
_servers: dict[int, _Server | None] = {}  # by pid: a forked pytest process starts its own


def _server() -> _Server | None:
    with _lock:
        pid = os.getpid()
        if pid not in _servers:
            try:
                _servers[pid] = _Server()
            except (OSError, RuntimeError, ValueError) as exc:
                _trace(f"no warm server: {exc!r}")
                _servers[pid] = None
        return _servers[pid]


def _text(data: bytes) -> str:
    """As subprocess.run(text=True) decodes: the locale's encoding, universal newlines."""
    decoded = data.decode(locale.getpreferredencoding(False))
    return decoded.replace("\r\n", "\n").replace("\r", "\n")


def run_ruizn(
    args: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    stdin: Any = None,
    input: str | None = None,
    command: Sequence[str] | None = None,
    **popen: Any,
) -> subprocess.CompletedProcess[str]:
    """`python -m ruizn ARGS` (or `command` ARGS) in `cwd` to its end, its output captured
    as text, as subprocess.run(capture_output=True, text=True) gives it (and raises on its
    timeout). Warm unless another command or Popen options (preexec_fn...) are given."""
    argv = [*(command or [sys.executable, "-m", "ruizn"]), *args]
    if command is None and not popen:
        warm = _run_warm(args, cwd=cwd, env=env, timeout=timeout, stdin=stdin, input=input)
        if warm is not None:
            code, out, err = warm
            return subprocess.CompletedProcess(argv, code, out, err)
    return subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=stdin,
        input=input,
        **popen,
    )


def _run_warm(
    args: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    stdin: Any,
    input: str | None,
) -> tuple[int, str, str] | None:
    if os.environ.get("RUIZN_TEST_COLD") == "1" or stdin is subprocess.PIPE:
        return None
    server = _server()
    if server is None:
        return None
    deadline = time.monotonic() + timeout
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        _stdin(stdin, input) as fd_in,
    ):
        request = json.dumps({"argv": list(args), "cwd": str(cwd), "env": env}).encode()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            try:
                conn.connect(server.socket)
                socket.send_fds(conn, [request], [fd_in, out.fileno(), err.fileno()])
            except OSError:
                return None
            replies = conn.makefile("rb")
            conn.settimeout(max(0.1, deadline - time.monotonic()))
            first = json.loads(replies.readline() or b'{"cold": "no answer"}')
            if "cold" in first:
                _trace(f"cold ({first['cold']}): {list(args)}")
                return None
            pid = first["pid"]
            _trace(f"warm: {list(args)}")
            try:
                conn.settimeout(max(0.1, deadline - time.monotonic()))
                last = replies.readline()
            except TimeoutError:
                last = b""
            if not last:
                # As subprocess.run does on its timeout: kill the command, then raise.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired([sys.executable, "-m", "ruizn", *args], timeout)
            code = int(json.loads(last)["code"])
        out.seek(0)
        err.seek(0)
        return code, _text(out.read()), _text(err.read())


def _trace(line: str) -> None:
    """RUIZN_TEST_WARM_TRACE=FILE: which commands ran cold, and why."""
    path = os.environ.get("RUIZN_TEST_WARM_TRACE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


class _stdin:
    """The command's stdin descriptor: `input` in a file, the given file or descriptor,
    /dev/null for DEVNULL, else this process's own (what subprocess passes on)."""

    def __init__(self, stdin: Any, input: str | None) -> None:
        self.stdin = stdin
        self.input = input
        self.opened: IO[bytes] | None = None
        self.fd = -1

    def __enter__(self) -> int:
        if self.input is not None:
            self.opened = tempfile.TemporaryFile()
            self.opened.write(self.input.encode(locale.getpreferredencoding(False)))
            self.opened.seek(0)
            return self.opened.fileno()
        if self.stdin is subprocess.DEVNULL:
            self.fd = os.open(os.devnull, os.O_RDONLY)
            return self.fd
        if isinstance(self.stdin, int):
            return self.stdin
        if self.stdin is not None:
            return int(self.stdin.fileno())
        return 0

    def __exit__(self, *exc: object) -> None:
        if self.opened is not None:
            self.opened.close()
        if self.fd >= 0:
            os.close(self.fd)
