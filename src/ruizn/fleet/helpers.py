"""A batch's helper processes: with `RUIZN_BATCH_HELPERS=N` (opt-in), `ruizn batch` runs part
of its slots in other processes of this machine, on the same SQLite database, to use more than
one core (a process runs its runs' Python on one core at a time: a batch of 16 was bound by it).

Each helper is a DBOS executor of its own (`batch-h1`, ...) on the batch's queue; DBOS's
SQLite transactions are IMMEDIATE, so a queued run is dequeued by exactly one process. What
keeps one writer per run:
- a helper dies with the batch: on Linux (the only platform helpers start on) the kernel
  kills it when the batch's process dies, however it dies (PR_SET_PDEATHSIG), and a helper
  also ends at once when the batch closes its stdin;
- a helper that dies alone has its runs put back on the queue by the batch once the kernel
  has reaped it, and a batch started again after a crash resumes the helpers' runs the way
  it resumes its own: a helper of the same id recovers them when it starts (DBOS recovers an
  executor's own pending workflows), and the batch puts back on the queue those of helper
  ids it does not start this time.
A run put back resumes from its stored events, as after kill -9: a tool in flight is
answered `interrupted`, never run twice. MCP header values reach a helper through its stdin,
never the database.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from attrs import frozen

HELPER_PREFIX = "batch-h"
# How long a batch waits for its helpers to be ready before it queues its runs anyway.
READY_TIMEOUT = 30.0


def helper_count(concurrency: int, environ: Mapping[str, str] | None = None) -> int:
    """How many helpers a batch of `concurrency` starts: `RUIZN_BATCH_HELPERS=N` (at most one
    fewer than the slots), else none. Opt-in: on a two-core machine, where the model API's
    side shares the cores, a helper measured no faster (docs/benchmark.md), and a machine's
    load says little about the next minute."""
    if not sys.platform.startswith("linux"):
        return 0
    given = (os.environ if environ is None else environ).get("RUIZN_BATCH_HELPERS", "")
    if given.strip().isdigit():
        return max(0, min(int(given), concurrency - 1))
    return 0


def split(concurrency: int, helpers: int) -> tuple[int, int]:
    """(the batch's own slots, each helper's): `concurrency` runs at once on the machine."""
    each = concurrency // (helpers + 1)
    return concurrency - each * helpers, each


@frozen(kw_only=True)
class HelperConfig:
    """What a helper is told through its stdin (one JSON line)."""

    url: str
    log_root: str
    workspace: str
    tools_from: str | None
    concurrency: int
    polling: float
    trust: bool
    mcp_headers: tuple[str, ...]


class Helpers:
    """The batch's helper processes, started before the batch's own DBOS (they start up
    side by side)."""

    def __init__(self, count: int, config: HelperConfig, warn: Callable[[str], None]) -> None:
        self._warn = warn
        self._stopping = threading.Event()
        self._launched = threading.Event()  # the batch's own DBOS is up: it can re-queue
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        line = json.dumps(_config_json(config)).encode() + b"\n"
        for k in range(1, count + 1):
            worker = f"{HELPER_PREFIX}{k}"
            proc = subprocess.Popen(
                [sys.executable, "-m", "ruizn.cli.batch_helper", str(os.getpid()), worker],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert proc.stdin is not None
            with contextlib.suppress(OSError):
                proc.stdin.write(line)
                proc.stdin.flush()
            self._procs[worker] = proc
            threading.Thread(target=self._watch, args=(worker, proc), daemon=True).start()

    @property
    def workers(self) -> tuple[str, ...]:
        return tuple(self._procs)

    def launched(self) -> None:
        """The batch's DBOS is up: runs of a helper that dies can be put back on the queue."""
        self._launched.set()

    def ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Wait until each helper took its place on the queue (or gave up)."""
        deadline = time.monotonic() + timeout
        for proc in self._procs.values():
            assert proc.stdout is not None
            left = deadline - time.monotonic()
            if left > 0 and select.select([proc.stdout], [], [], left)[0]:
                proc.stdout.readline()

    def stop(self) -> None:
        self._stopping.set()
        for proc in self._procs.values():
            with contextlib.suppress(OSError):
                assert proc.stdin is not None
                proc.stdin.close()  # a helper ends at once when its stdin closes
        for proc in self._procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _watch(self, worker: str, proc: subprocess.Popen[bytes]) -> None:
        code = proc.wait()  # reaped: none of its threads writes anything any more
        if self._stopping.is_set():
            return
        self._launched.wait()
        if self._stopping.is_set():
            return
        from dbos import DBOS

        pending = DBOS.list_workflows(
            status="PENDING", executor_id=worker, load_input=False, load_output=False
        )
        for status in pending:
            _requeue(status.workflow_id, status.queue_name)
        self._warn(
            f"a helper process of the batch ended (exit {code}):"
            f" its {len(pending)} unfinished run(s) go on in the others"
        )


def requeue_orphans(started: tuple[str, ...]) -> None:
    """Put back on the queue the runs that helpers of an earlier batch (killed with it) left
    pending, of the helper ids this batch does not start (a helper of the same id recovers
    its own). The batch's DBOS is up."""
    from dbos import DBOS

    pending = DBOS.list_workflows(status="PENDING", load_input=False, load_output=False)
    for status in pending:
        owner = str(status.executor_id or "")
        if owner.startswith(HELPER_PREFIX) and owner not in started:
            _requeue(status.workflow_id, status.queue_name)


def _requeue(workflow_id: str, queue: str | None) -> None:
    from dbos import DBOS

    from ruizn.fleet.app import QUEUE

    # Back on the queue it came from (a subagent's: the children's): ENQUEUED -> PENDING
    # admits exactly one dequeuer.
    DBOS.resume_workflow(workflow_id, queue_name=queue or QUEUE)


def _config_json(config: HelperConfig) -> dict[str, Any]:
    return {
        "url": config.url,
        "log_root": config.log_root,
        "workspace": config.workspace,
        "tools_from": config.tools_from,
        "concurrency": config.concurrency,
        "polling": config.polling,
        "trust": config.trust,
        "mcp_headers": list(config.mcp_headers),
    }
