"""The CLI at a real pseudo-terminal: `Terminal` to read what it shows and type answers,
`run_on_pty` to run a command to its end with a terminal as its stdout and stderr."""

from __future__ import annotations

import errno
import fcntl
import os
import select
import struct
import subprocess
import termios
import time
import tty
from pathlib import Path

from tests.cli.conftest import start_cli

__all__ = ["PROMPT", "Terminal", "run_on_pty"]

PROMPT = "approve? [y]es"


def _controlling_terminal() -> None:
    # In the child, after setsid (start_new_session): fd 0 becomes its controlling terminal,
    # so ^C typed there sends SIGINT to it, as in a shell.
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _stdout_is_the_terminal() -> None:
    # In the child, after setsid: the pty on fd 1 becomes its controlling terminal (stdin is
    # the pipe), which is what /dev/tty then opens.
    fcntl.ioctl(1, termios.TIOCSCTTY, 0)


class Terminal:
    """The CLI with a pseudo-terminal as its controlling terminal, stdout and stderr, and as
    its stdin too; or, given `goal`, a pipe that holds the goal as stdin (`echo GOAL | ruizn
    run` typed in a shell)."""

    def __init__(
        self,
        args: list[str],
        workspace: Path,
        env: dict[str, str],
        goal: str | None = None,
        size: tuple[int, int] | None = None,
    ) -> None:
        master, slave = os.openpty()
        if size is not None:  # columns, rows: what the program reads from the terminal
            columns, rows = size
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.proc = start_cli(
            args,
            workspace=workspace,
            env=env,
            stdin=slave if goal is None else subprocess.PIPE,
            stdout=slave,
            stderr=slave,
            text=False,
            start_new_session=True,
            # the test's own child, no threads
            preexec_fn=_controlling_terminal if goal is None else _stdout_is_the_terminal,
        )
        if goal is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.write(goal.encode())
            self.proc.stdin.close()  # the goal is all of stdin
        os.close(slave)
        self.master = master
        self.seen = bytearray()
        self._closed = False

    @property
    def text(self) -> str:
        # The terminal turns \n into \r\n on output (ONLCR); undo that for the checks.
        return self.seen.decode("utf-8", errors="replace").replace("\r\n", "\n")

    def _read(self, wait: float) -> bool:
        """Read what is there within `wait` seconds; False once the other side is gone."""
        if self._closed:
            return False
        ready, _, _ = select.select([self.master], [], [], wait)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 65536)
        except OSError as exc:  # EIO: every slave descriptor is closed
            if exc.errno != errno.EIO:
                raise
            chunk = b""
        if not chunk:
            self._closed = True
            return False
        self.seen += chunk
        return True

    def expect(self, text: str, *, count: int = 1, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while self.text.count(text) < count:
            assert time.monotonic() < deadline, f"{text!r} not shown in time:\n{self.text}"
            if not self._read(0.2):
                raise AssertionError(f"the CLI ended before showing {text!r}:\n{self.text}")
        return self.text

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def finish(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while self._read(0.2) and time.monotonic() < deadline:
            if self.proc.poll() is not None and not select.select([self.master], [], [], 0)[0]:
                break
        try:
            return self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            self.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.master >= 0:
            os.close(self.master)
            self.master = -1


def run_on_pty(args: list[str], workspace: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run the CLI with a pseudo-terminal as its stdout and stderr; return what it showed."""
    master, slave = os.openpty()
    tty.setraw(slave)  # no output processing: what we read is what ruizn wrote
    proc = start_cli(
        args,
        workspace=workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        text=False,
    )
    os.close(slave)
    received = bytearray()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError as exc:  # EIO: every slave descriptor is closed
                if exc.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            received += chunk
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return code, received.decode("utf-8")
