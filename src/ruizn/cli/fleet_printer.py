"""What the fleet's commands print, and their exit codes: the fleet (ruizn.fleet) is a library
that returns reports and tells watchers; this draws them.

`batch`: a line per finished run, a progress bar redrawn in place on a terminal, then the
runs' table (as `ruizn runs`) and a summary line. `worker`: its announcements, a line each.
`submit`: each run id as it is queued. `resume --db`: the order queued, or why none was.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ruizn.cli.exits import EXIT_AWAITING_APPROVAL, EXIT_ERROR, EXIT_OK
from ruizn.fleet.reports import BatchProgress, BatchRun, BatchWatcher
from ruizn.fleet.worker import shown
from ruizn.format import counted, human_seconds, tokens, usd

if TYPE_CHECKING:
    from ruizn.fleet.reports import BatchReport, NothingQueued, Queued, WorkerStopped

__all__ = [
    "TerminalWatcher",
    "batch_exit",
    "print_batch",
    "print_interrupted",
    "print_queued",
    "print_run_id",
    "print_stopped",
    "say",
    "warn",
]


def warn(line: str) -> None:
    print(f"ruizn: {shown(line)}", file=sys.stderr, flush=True)


class TerminalWatcher(BatchWatcher):
    """A batch as it goes: one line per finished run; on a terminal, also a bar that is
    redrawn in place."""

    def __init__(self) -> None:
        self.bar = sys.stdout.isatty()

    def warn(self, line: str) -> None:
        warn(line)

    def finished(self, result: BatchRun, count: int, total: int) -> None:
        line = f"[{count:>{len(str(total))}}/{total}] {_row(result)}"
        if self.bar:  # a line longer than the terminal would wrap, and the bar with it
            from ruizn.cli.table import clip, terminal_width

            line = "\r\x1b[K" + clip(line, terminal_width() or len(line))
        print(line, flush=True)

    def progress(self, progress: BatchProgress) -> None:
        if not self.bar:
            return
        from ruizn.cli.table import clip, terminal_width

        line = (
            f"{progress.done}/{progress.total} done · {progress.failed} failed"
            f" · {progress.running} running"
            f" · in {tokens(progress.input_tokens)} out {tokens(progress.output_tokens)} tok"
        )
        sys.stdout.write("\r\x1b[K" + clip(line, (terminal_width() or 999) - 1))
        sys.stdout.flush()

    def close(self) -> None:
        """The bar erased, before the table."""
        if self.bar:
            sys.stdout.write("\r\x1b[K")


def _row(result: BatchRun) -> str:
    parts = [result.run_id, result.status]
    if result.steps is not None:
        parts.append(counted(result.steps, "step"))
        parts.append(human_seconds(result.elapsed))
        parts.append(f"in {tokens(result.input_tokens)} out {tokens(result.output_tokens)}")
        parts.append(usd(result.cost))
    if result.error:
        parts.append(" ".join(result.error.split())[:120])
    return shown(" · ".join(parts))


def print_batch(report: BatchReport) -> None:
    """The batch's table (the same as `ruizn runs`: it fits the terminal, and piped every
    row is whole), its summary, and how to decide what awaits approval."""
    from ruizn.cli.table import Column, render, terminal_width

    print()
    columns = (
        Column(title="RUN", width=28),
        Column(title="STATUS", width=10),
        Column(title="STEPS", right=True, width=5, drop=1),
        Column(title="TIME", right=True, width=7, drop=3),
        Column(title="IN", right=True, width=8, drop=5),
        Column(title="OUT", right=True, width=7, drop=4),
        Column(title="COST", right=True, width=12, drop=2),
    )
    rows = [
        [
            shown(r.run_id),
            shown(r.status),
            "" if r.steps is None else str(r.steps),
            human_seconds(r.elapsed),
            tokens(r.input_tokens),
            tokens(r.output_tokens),
            "" if r.steps is None else usd(r.cost),
        ]
        for r in report.results
    ]
    lasts = [" ".join(shown(r.goal).split()) for r in report.results]
    for line in render(columns, rows, last="GOAL", lasts=lasts, width=terminal_width()):
        print(line)
    counts: dict[str, int] = {}
    for status in report.statuses:
        counts[status] = counts.get(status, 0) + 1
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    print(f"\nbatch: {counted(len(report.results), 'run')}: {summary}", flush=True)
    if report.awaiting_approval:
        url = report.database_url
        print(f"decide with: ruizn resume --db {url} RUN --approve ID|all (or --deny)")


def batch_exit(statuses: tuple[str, ...]) -> int:
    """0 when every run succeeded; 4 when the others only wait for approval (as a single
    run's exit); else 1."""
    if all(status == "success" for status in statuses):
        return EXIT_OK
    if all(status in ("success", "awaiting_approval") for status in statuses):
        return EXIT_AWAITING_APPROVAL
    return EXIT_ERROR


def print_interrupted(message: str) -> None:
    print(f"ruizn: {message}", file=sys.stderr, flush=True)


def say(line: str) -> None:
    """A worker's announcement."""
    print(shown(line), flush=True)


def print_stopped(stopped: WorkerStopped) -> None:
    say(f"[worker {stopped.name}] stopped; runs in flight go to the other workers")
    if stopped.error is not None:
        warn(f"worker {stopped.name}: {stopped.error}")
    sys.stdout.flush()


def print_run_id(run_id: str) -> None:
    print(run_id, flush=True)


def print_queued(queued: Queued | NothingQueued) -> None:
    from ruizn.fleet.reports import NothingQueued

    if isinstance(queued, NothingQueued):
        print(shown(queued.message), flush=True)
        return
    limits = queued.limits.summary()
    if queued.approve:
        limits += f"; approve {', '.join(queued.approve)}"
    if queued.deny:
        limits += f"; deny {', '.join(queued.deny)}"
    print(shown(f"{queued.run_id} queued to resume on the fleet ({limits})"), flush=True)
