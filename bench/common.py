"""The benchmark's shared harness, used by bench/run.py and every section module beside it.

It holds the plans (Plan, FULL, SMOKE) and a table row's type (Row); the small things
(note, med, spread, Judge, met, abba, TimedOut); the sanity checks (Checks, CHECKS); the run's
temp root (Scratch); the children's environment (base_env, client_env); the fake Messages API
in a process of its own (Server); a timed command (Proc, timed); a run's log (read_log, count);
and the checks on the server's record of one loop (server_gaps, within). bench/first_token.py
receives this module as `bench`.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BENCH",
    "CHECKS",
    "FULL",
    "GNU_TIME",
    "MISSED",
    "MODEL",
    "PEERS_PY",
    "PY",
    "PYCACHE",
    "ROOT",
    "RUIZN",
    "SMOKE",
    "STAMP_SLACK",
    "STARTED",
    "SYSTEM_TEXT",
    "Checks",
    "Judge",
    "Plan",
    "Proc",
    "Row",
    "Scratch",
    "Server",
    "TimedOut",
    "abba",
    "base_env",
    "client_env",
    "count",
    "med",
    "met",
    "note",
    "read_log",
    "server_gaps",
    "spread",
    "timed",
    "within",
]

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PY = sys.executable
RUIZN = shutil.which("ruizn", path=str(Path(PY).parent)) or shutil.which("ruizn") or ""
GNU_TIME = "/usr/bin/time" if Path("/usr/bin/time").exists() else ""
# The peers run only in a Python of their own, so their dependencies never touch ruizn's.
PEERS_PY = os.environ.get("RUIZN_BENCH_PEERS_PYTHON", "")
MODEL = "claude-sonnet-5-5"
# A realistic agent system prompt (~1,600 tokens), the same for every client.
SYSTEM_TEXT = "\n".join(
    f"Rule {i}: read the files you need with read_file before you answer; quote paths exactly;"
    " keep answers short; say when a file is missing or cut off; never invent content."
    for i in range(1, 41)
)
MISSED = "**MISSED**"
STARTED = time.perf_counter()
# Children run with compiled bytecode, as an installed ruizn does, even where the shell sets
# PYTHONDONTWRITEBYTECODE (an editable install would recompile every module at every start).
PYCACHE = Path(tempfile.gettempdir()) / "ruizn-bench-pycache"


@dataclass(frozen=True)
class Plan:
    loop_steps: tuple[int, ...]
    loop_reps: int  # runs a side, ABBA
    peer_reps: int  # runs a peer: in the first rounds, the rest are ruizn and raw SDK alone
    warmup: bool  # one untimed run of each side first
    peers: bool
    growth_window: int  # first/last steps of the growth ratio
    long_steps: int
    long_windows: tuple[tuple[int, int], tuple[int, int]]  # 1-based inclusive step ranges
    long_timeout: float
    token_deltas: int
    token_reps: int
    token_modes: tuple[str, ...]
    startup_reps: int
    replay_sizes: tuple[int, ...]
    replay_reps: int
    calls: tuple[int, ...]
    calls_timeout: float
    fleet_runs: int  # runs a batch
    fleet_reps: int  # batches at each concurrency (ABBA with the baseline, if any)
    fleet_singles: int  # single `ruizn run`s, for a step's cost outside a fleet


FULL = Plan(
    loop_steps=(50, 200),
    loop_reps=8,
    peer_reps=2,
    warmup=True,
    peers=True,
    growth_window=10,
    long_steps=2000,
    long_windows=((101, 200), (1901, 2000)),
    long_timeout=600,
    token_deltas=20_000,
    token_reps=2,
    token_modes=("live", "pre-rendered"),
    startup_reps=10,
    replay_sizes=(10_000, 100_000, 1_000_000),
    replay_reps=5,
    calls=(1_000, 10_000),
    calls_timeout=120,
    fleet_runs=24,
    fleet_reps=3,
    fleet_singles=5,
)
# Smoke checks that every measure runs and passes its sanity checks, not speed: one run a
# side (a client's start-up is most of it: `import anthropic` takes 2-7 s on 2 busy cores),
# and the long-run figure is read from the loop's own run.
SMOKE = Plan(
    loop_steps=(20,),
    loop_reps=1,
    peer_reps=0,
    warmup=False,
    peers=False,
    growth_window=5,
    long_steps=20,
    long_windows=((1, 5), (16, 20)),
    long_timeout=60,
    token_deltas=2_000,
    token_reps=1,
    token_modes=("live",),
    startup_reps=3,
    replay_sizes=(10_000, 20_000),
    replay_reps=2,
    calls=(200,),
    calls_timeout=30,
    fleet_runs=6,
    fleet_reps=1,
    fleet_singles=2,
)

Row = tuple[str, str, str, str, str, str]


# ---------------------------------------------------------------- small things


def note(message: str) -> None:
    print(f"[bench {time.perf_counter() - STARTED:4.0f}s] {message}", file=sys.stderr, flush=True)


def med(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    if len(values) == 1:
        return fmt.format(values[0])
    return f"{fmt.format(med(values))} ({fmt.format(min(values))}-{fmt.format(max(values))})"


class Judge:
    on = True  # off in --smoke: a few steps on a CI machine say nothing about speed


def met(ok: bool) -> str:
    if not Judge.on:
        return "(smoke)"
    return "yes" if ok else MISSED


def abba(sides: Sequence[str], reps: int) -> list[str]:
    """Each rep runs every side; odd reps run them backwards (A B B A ...), so a drift in
    the machine's load falls on every side alike."""
    order: list[str] = []
    for rep in range(reps):
        order += list(sides) if rep % 2 == 0 else list(reversed(sides))
    return order


class TimedOut(RuntimeError):
    """A measured command ran past its time limit (a figure, not a broken harness)."""


class Checks:
    """The benchmark's own sanity conditions. A failed one means the harness is broken."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed: list[str] = []
        self.warnings: list[str] = []

    def check(self, ok: bool, what: str) -> bool:
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)
            note(f"SANITY CHECK FAILED: {what}")
        return ok

    def warn(self, what: str) -> None:
        self.warnings.append(what)
        note(f"warning: {what}")


CHECKS = Checks()


class Scratch:
    """One temp root for the run, removed at the end."""

    root = Path(tempfile.gettempdir())

    @classmethod
    def dir(cls, prefix: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=cls.root))


def base_env() -> dict[str, str]:
    # Without PYTHONDONTWRITEBYTECODE (set by some sandboxes and CI images): with it, and no
    # .pyc yet, every child compiles each module it imports at every start, which about
    # doubles `ruizn --help` and would time the compiler, not ruizn (see PYCACHE).
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "RUIZN_")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def client_env(url: str) -> dict[str, str]:
    env = base_env()
    env.update(ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="sk-bench", NO_COLOR="1")
    return env


# ---------------------------------------------------------------- processes and the server


class Server:
    """The fake API in its own process: bench/fake_server.py ARGS."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [PY, str(BENCH / "fake_server.py"), *args],
            cwd=ROOT,
            env=base_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.stop()
            raise RuntimeError(f"the fake server did not start ({' '.join(args)})")
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        self.host, self.port = host, int(port)

    def _call(self, method: str) -> Any:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            conn.request(method, "/_stats")
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()

    def reset(self) -> None:
        self._call("DELETE")

    def timings(self, expected: int) -> list[dict[str, Any]]:
        """The POSTs since the last reset, by request line. A handler stamps its last byte
        just after its send returns, possibly after the client has read it and exited:
        wait (up to 2 s) for the expected count."""
        timings: list[dict[str, Any]] = self._call("GET")["timings"]
        for _ in range(100):
            if len(timings) >= expected:
                break
            time.sleep(0.02)
            timings = self._call("GET")["timings"]
        return timings

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class Proc:
    wall: float  # seconds
    rss_kb: int  # peak RSS (0 when not measured)
    stdout: str
    stderr: str
    timed_out: bool = False


def timed(
    cmd: Sequence[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    *,
    keep_stdout: bool = False,
    rss: bool = True,
    timeout: float | None = None,
) -> Proc:
    """Run one command (stdout to /dev/null unless kept): wall time and peak RSS.

    The RSS comes from GNU time where it exists: Python spawns with vfork, and Linux carries
    this process's RSS high-water mark into a child's ru_maxrss. Start-up timings pass
    rss=False (no wrapper process). A command past `timeout` is killed and marked."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        rss_file = Scratch.root / f"rss-{time.monotonic_ns()}" if GNU_TIME and rss else None
        full = [GNU_TIME, "-f", "%M", "-o", str(rss_file), *cmd] if rss_file else list(cmd)
        began = time.perf_counter()
        proc = subprocess.Popen(
            full,
            cwd=cwd,
            env=env if env is not None else base_env(),
            stdout=out if keep_stdout else subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,  # a timeout kills the command and its wrapper together
        )
        timed_out = False
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, 9)
            proc.wait()
        wall = time.perf_counter() - began
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    rss_kb = 0
    if rss_file is not None:
        words = rss_file.read_text().split() if rss_file.exists() else []
        rss_kb = int(words[-1]) if words and words[-1].isdigit() else 0
        rss_file.unlink(missing_ok=True)
    if proc.returncode != 0 and not timed_out:
        name = Path(cmd[1] if cmd[0] in (PY, PEERS_PY) else cmd[0]).name
        tail = (stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise RuntimeError(f"{name} exited {proc.returncode}: {tail[:200]}")
    return Proc(wall, rss_kb, stdout, stderr, timed_out)


def read_log(logs: Path) -> list[dict[str, Any]]:
    """The events of the one run under `logs`; a torn last line (a killed run) is left out."""
    log = next(logs.glob("*/events.jsonl"))
    with log.open("rb") as f:
        lines = f.read().split(b"\n")
    events = [json.loads(line) for line in lines[:-2] if line]
    with contextlib.suppress(ValueError):
        events += [json.loads(line) for line in lines[-2:] if line]
    return events


def count(events: list[dict[str, Any]], kind: str) -> int:
    return sum(1 for e in events if e["type"] == kind)


def server_gaps(
    server: Server, label: str, requests: int
) -> tuple[list[float], list[float], float]:
    """(gaps, spans, first line to last byte) of one run, checked."""
    timings = server.timings(requests)
    ok = CHECKS.check(
        len(timings) == requests, f"{label}: the server saw {len(timings)} requests, not {requests}"
    )
    ok &= CHECKS.check(
        all(t["complete"] for t in timings), f"{label}: an answer was cut or abandoned"
    )
    lines = [t["request_line"] for t in timings]
    ends = [t["last_byte"] for t in timings]
    ok &= CHECKS.check(
        all(a <= b for a, b in zip(ends, lines[1:], strict=False)),
        f"{label}: a request began before the answer before it ended (not one loop)",
    )
    if not ok or not timings:
        raise RuntimeError(f"{label}: the server's record does not fit one loop")
    gaps = [b - a for a, b in zip(ends, lines[1:], strict=False)]
    spans = [b - a for a, b in zip(lines, ends, strict=True)]
    return gaps, spans, ends[-1] - lines[0]


# The server stamps a last byte after its send returns: the client may have read it, and
# even exited, a little before. Slack for that when the server's window is set against the
# client's.
STAMP_SLACK = 0.05


def within(label: str, client_seconds: float, covered: float) -> None:
    """The server's window (first request line to last byte: every gap and span) must lie
    within the client's own loop time; a longer one holds someone else's requests."""
    CHECKS.check(
        covered <= client_seconds + STAMP_SLACK,
        f"{label}: the server's record spans {covered:.2f} s, the client's loop"
        f" {client_seconds:.2f} s",
    )
