"""A batch's helper processes: `ruizn batch` on Linux runs part of its slots in other
processes of this machine, on the same SQLite database, to use more than one core (a process
runs its runs' Python on one core at a time: at 64 runs at once, one process was bound by it).

How many: one process for each `SLOTS_A_PROCESS` runs at once, at most one a usable core
(`helper_count`); `RUIZN_BATCH_HELPERS=N` says N instead (0: none). A helper is a fork of the
batch made before the batch opens its database, after it imported what runs need: the pages
of those modules stay shared with the batch, so a helper costs the machine its runs' memory
and little more (a process started afresh cost ~135 MB before its first run). It waits for
the batch's word (the schema is whole) before it opens the database itself.

Each helper is a DBOS executor of its own (`batch-h1`, ...) on the batch's queue; DBOS's
SQLite transactions are IMMEDIATE, so a queued run is dequeued by exactly one process. What
keeps one writer per run:
- a helper dies with the batch: the kernel kills it when the batch's process dies, however
  it dies (PR_SET_PDEATHSIG), and a helper also ends at once when the batch closes its pipe;
- a helper that dies alone has its runs put back on the queue by the batch once the kernel
  has reaped it, and a batch started again after a crash resumes the helpers' runs the way
  it resumes its own: a helper of the same id recovers them when it starts (DBOS recovers an
  executor's own pending workflows), and the batch puts back on the queue those of helper
  ids it does not start this time.
A run put back resumes from its stored events, as after kill -9: a tool in flight is
answered `interrupted`, never run twice. MCP header values stay in the processes' memory,
never the database.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import IO

from attrs import frozen

HELPER_PREFIX = "batch-h"
# How long a batch waits for its helpers to be ready before it queues its runs anyway.
READY_TIMEOUT = 30.0
# Runs at once one process keeps busy before its core is the limit: at ~150 ms a call, a
# run steps ~6 times a second and a step costs a process ~5 ms of Python (docs/benchmark.md).
SLOTS_A_PROCESS = 32
# What the batch writes a helper once the database's schema is whole.
GO = b"go\n"


def helper_count(
    concurrency: int, environ: Mapping[str, str] | None = None, cores: int | None = None
) -> int:
    """How many helpers a batch of `concurrency` starts (Linux only): `RUIZN_BATCH_HELPERS=N`
    if set, else one process per `SLOTS_A_PROCESS` slots up to the usable cores, less the
    batch's own; never as many as the slots."""
    if not sys.platform.startswith("linux"):
        return 0
    given = (os.environ if environ is None else environ).get("RUIZN_BATCH_HELPERS", "").strip()
    if given.isdigit():
        wanted = int(given)
    else:
        usable = cores if cores is not None else len(os.sched_getaffinity(0))
        wanted = min(usable, concurrency // SLOTS_A_PROCESS) - 1
    return max(0, min(wanted, concurrency - 1))


def split(concurrency: int, helpers: int) -> tuple[int, int]:
    """(the batch's own slots, each helper's): `concurrency` runs at once on the machine."""
    each = concurrency // (helpers + 1)
    return concurrency - each * helpers, each


@frozen(kw_only=True)
class HelperConfig:
    """What a helper runs with (it has it in memory: the helper is a fork of the batch)."""

    url: str
    log_root: str
    workspace: str
    tools_from: str | None
    concurrency: int
    polling: float
    trust: bool
    mcp_headers: tuple[str, ...]


@frozen(kw_only=True)
class HelperPipes:
    """A helper's ends of its two pipes: `orders` (the batch's GO, then end of file when the
    helper should end) and `said` (the helper's `ready` line)."""

    orders: int
    said: int


# Starts a helper process (the CLI's: a fork of this process running the helper's program,
# which closes the descriptors named, uses the pipes, and ends the fork, never returning):
# (its config, its worker id, its pipes, the descriptors it closes first) -> its pid.
HelperStart = Callable[[HelperConfig, str, HelperPipes, tuple[int, ...]], int]


class _Helper:
    """One forked helper: its pid and the batch's ends of its pipes. Its watcher thread
    reaps it (`reap`); the others wait for that."""

    def __init__(self, pid: int, orders: IO[bytes], said: IO[bytes]) -> None:
        self.pid = pid
        self.orders = orders
        self.said = said
        self._ended = threading.Event()

    def reap(self) -> int:
        """Wait for it to end; its exit status."""
        try:
            _, status = os.waitpid(self.pid, 0)
            code = os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # reaped by someone else
            code = -1
        self._ended.set()
        return code

    def wait(self, timeout: float) -> bool:
        """Whether it has ended (and been reaped) within `timeout` seconds."""
        return self._ended.wait(timeout)

    def kill(self) -> None:
        if not self._ended.is_set():  # (once reaped, its pid may be another process's)
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)


class Helpers:
    """The batch's helper processes, forked before the batch opens its database (call
    `go()` once the schema is whole, before the batch's own DBOS launches)."""

    def __init__(
        self, count: int, config: HelperConfig, warn: Callable[[str], None], start: HelperStart
    ) -> None:
        self._warn = warn
        self._stopping = threading.Event()
        self._launched = threading.Event()  # the batch's own DBOS is up: it can re-queue
        self._procs: dict[str, _Helper] = {}
        # What is in memory now (the modules) is never collected, so no collection in either
        # process writes to its pages, and they stay shared.
        gc.freeze()
        for k in range(1, count + 1):
            worker = f"{HELPER_PREFIX}{k}"
            orders_r, orders_w = os.pipe()
            said_r, said_w = os.pipe()
            # The helper holds none of the batch's ends (an earlier helper's pipe would then
            # never close).
            pid = start(
                config,
                worker,
                HelperPipes(orders=orders_r, said=said_w),
                (orders_w, said_r, *self._pipes_of_others()),
            )
            os.close(orders_r)
            os.close(said_w)
            self._procs[worker] = _Helper(pid, os.fdopen(orders_w, "wb"), os.fdopen(said_r, "rb"))
        for worker, proc in self._procs.items():
            threading.Thread(target=self._watch, args=(worker, proc), daemon=True).start()

    def _pipes_of_others(self) -> list[int]:
        """The batch's ends of the pipes of the helpers started before."""
        return [fd for p in self._procs.values() for fd in (p.orders.fileno(), p.said.fileno())]

    @property
    def workers(self) -> tuple[str, ...]:
        return tuple(self._procs)

    def go(self) -> None:
        """The database's schema is whole: the helpers open it and launch."""
        for proc in self._procs.values():
            with contextlib.suppress(OSError):
                proc.orders.write(GO)
                proc.orders.flush()

    def launched(self) -> None:
        """The batch's DBOS is up: runs of a helper that dies can be put back on the queue."""
        self._launched.set()

    def ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Wait until each helper took its place on the queue (or gave up)."""
        deadline = time.monotonic() + timeout
        for proc in self._procs.values():
            left = deadline - time.monotonic()
            if left > 0 and select.select([proc.said], [], [], left)[0]:
                proc.said.readline()

    def stop(self) -> None:
        self._stopping.set()
        for proc in self._procs.values():
            with contextlib.suppress(OSError):
                proc.orders.close()  # a helper ends at once when its pipe closes
        for proc in self._procs.values():
            if not proc.wait(10):
                proc.kill()
                proc.wait(10)
            with contextlib.suppress(OSError):
                proc.said.close()

    def _watch(self, worker: str, proc: _Helper) -> None:
        code = proc.reap()  # reaped: none of its threads writes anything any more
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
