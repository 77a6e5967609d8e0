"""The process of a batch's helper (`python -m ruizn.cli.batch_helper PARENT_PID
WORKER`, started by `ruizn.fleet.helpers.Helpers`): its config on stdin, its one-line
warnings on stderr, its exit codes. The fleet library says what a helper does; this is the
program around it, as `ruizn worker` is around `fleet.worker.work`."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> None:
    """The kernel kills this process when the batch's dies; if it already has, end now."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent:
        os._exit(1)


def main(argv: list[str]) -> None:
    """A helper: `python -m ruizn.cli.batch_helper PARENT_PID WORKER`, its config on stdin."""
    _die_with(int(argv[0]))
    worker = argv[1]
    data = json.loads(sys.stdin.buffer.readline())
    from ruizn.fleet.app import launch
    from ruizn.fleet.database import EventStore
    from ruizn.fleet.driver import load_tools_factory
    from ruizn.fleet.signing import FleetKey
    from ruizn.fleet.worker import shown

    def warn(line: str) -> None:
        print(f"ruizn: {shown(line)}", file=sys.stderr, flush=True)

    launch(
        str(data["url"]),
        store=EventStore(str(data["url"])),
        log_root=Path(data["log_root"]),
        worker=worker,
        concurrency=int(data["concurrency"]),
        tools=load_tools_factory(data["tools_from"]),
        workspace=str(data["workspace"]),
        polling=float(data["polling"]),
        mcp_headers=tuple(str(h) for h in data["mcp_headers"]),
        key=FleetKey.of_user(os.environ),
        trust=bool(data["trust"]),
        warn=warn,
    )
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.buffer.read()  # until the batch closes it, or dies
    # At once, as after kill -9: a run still going (the batch is being stopped) resumes from
    # its events next time.
    os._exit(0)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except Exception as exc:  # one line on stderr; the batch goes on without this helper
        print(f"ruizn: a batch helper could not start: {type(exc).__name__}", file=sys.stderr)
        os._exit(1)
