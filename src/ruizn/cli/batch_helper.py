"""The program of a batch's helper process (`ruizn.fleet.helpers.Helpers` has `fork_helper`
fork the batch, and the fork runs `serve`): its one-line warnings on stderr, its exit codes.
The fleet library says what a helper does; this is the program around it, as `ruizn worker`
is around `fleet.worker.work`."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from ruizn.fleet.helpers import GO, HelperConfig, HelperPipes

_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> None:
    """The kernel kills this process when the batch's dies; if it already has, end now."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent:
        os._exit(1)


def _read_line(fd: int) -> bytes:
    """One line from the pipe, read a byte at a time (nothing past it is consumed); b"" at
    its end."""
    line = b""
    while not line.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            return b""
        line += byte
    return line


def serve(config: HelperConfig, worker: str, parent: int, pipes: HelperPipes) -> NoReturn:
    """A helper: waits for the batch's word, takes its slots on the queue, says `ready`,
    and ends when the batch closes its pipe (or dies)."""
    try:
        _die_with(parent)
        # Ctrl-C reaches the whole process group: the batch stops, and the helper with it.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if _read_line(pipes.orders) != GO:
            os._exit(0)  # the batch stopped before its database was ready
        from ruizn.fleet.app import launch
        from ruizn.fleet.database import EventStore
        from ruizn.fleet.driver import load_tools_factory
        from ruizn.fleet.signing import FleetKey
        from ruizn.fleet.worker import shown

        def warn(line: str) -> None:
            print(f"ruizn: {shown(line)}", file=sys.stderr, flush=True)

        launch(
            config.url,
            store=EventStore(config.url),
            log_root=Path(config.log_root),
            worker=worker,
            concurrency=config.concurrency,
            tools=load_tools_factory(config.tools_from),
            workspace=config.workspace,
            polling=config.polling,
            mcp_headers=config.mcp_headers,
            key=FleetKey.of_user(os.environ),
            trust=config.trust,
            warn=warn,
        )
        os.write(pipes.said, b"ready\n")
        while os.read(pipes.orders, 4096):  # until the batch closes it, or dies
            pass
    except BaseException as exc:  # one line on stderr; the batch goes on without this helper
        print(f"ruizn: a batch helper stopped: {type(exc).__name__}", file=sys.stderr, flush=True)
        os._exit(1)
    # At once, as after kill -9: a run still going (the batch is being stopped) resumes from
    # its events next time.
    os._exit(0)


def fork_helper(config: HelperConfig, worker: str, pipes: HelperPipes, close: Sequence[int]) -> int:
    """A fork of this process running `serve`; its pid. The fork never returns into the
    batch's stack, whatever happens in it."""
    parent = os.getpid()
    # What the batch has not written yet would otherwise be written twice, once by each.
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    try:
        for fd in close:
            os.close(fd)
        serve(config, worker, parent, pipes)
    finally:
        os._exit(1)
