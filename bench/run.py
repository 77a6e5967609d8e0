"""ruizn's benchmark: client time per step, measured at the server, beside the raw SDK and peers.

    python bench/run.py                  the full run (about 9 minutes on 2 cores)
    python bench/run.py --smoke          a few steps of each measure, no peers (CI, < 60 s)
    python bench/run.py --only loop,long a subset: loop, long, tokens, startup, first, replay,
                                         calls, fleet, scale

Every client talks to tests/fakeapi's Messages API in a process of its own
(bench/fake_server.py). The server stamps, per request, when the request line arrived and
when the last byte of the answer went out (one monotonic clock). Client time for step i is
the gap between answer i's last byte and request i+1's request line: what the client did
with the answer, its tool, its log and its next request, and nothing the server did.

ruizn is driven through its CLI (`ruizn run`, a subprocess with ANTHROPIC_BASE_URL and
ANTHROPIC_API_KEY set), never its library: the CLI is the stable surface. Runs alternate in
ABBA order and each figure is the median of the runs' medians, with (min-max). The benchmark
checks itself (request and answer counts, the order of the server's stamps, that the gaps
and the server's spans account for each client's own loop time) and exits 1 when a check
fails: a figure from a broken harness is not a result. A missed target is not a failure.

Prints one Markdown table; writes it and the raw figures to bench/results/ (git-ignored):
latest.md / latest.json (smoke.md / smoke.json), and a dated copy of the JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import http.client
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
PY = sys.executable
RUIZN = shutil.which("ruizn", path=str(Path(PY).parent)) or shutil.which("ruizn") or ""
GNU_TIME = "/usr/bin/time" if Path("/usr/bin/time").exists() else ""
# The peers run only in a Python of their own, so their dependencies never touch ruizn's.
PEERS_PY = os.environ.get("RUIZN_BENCH_PEERS_PYTHON", "")
PEERS = {
    "pydantic-ai": ("peer_pydantic_ai.py", "import pydantic_ai.models.anthropic"),
    "LangGraph": ("peer_langgraph.py", "import langgraph.prebuilt, langchain_anthropic"),
}
PEER_PIP = "pip install 'pydantic-ai-slim[anthropic]' langgraph langchain-anthropic"
MODEL = "claude-sonnet-5-5"
# A realistic agent system prompt (~1,600 tokens), the same for every client.
SYSTEM_TEXT = "\n".join(
    f"Rule {i}: read the files you need with read_file before you answer; quote paths exactly;"
    " keep answers short; say when a file is missing or cut off; never invent content."
    for i in range(1, 41)
)
SECTIONS = ("loop", "long", "tokens", "startup", "first", "replay", "calls", "fleet", "scale")
# The fleet's rows can be judged against an older checkout's src/ run in the same rounds
# (concurrency 16 at 3x the steps/s of the base commit dd30d61), e.g.
# `git worktree add /tmp/ruizn-base dd30d61` and RUIZN_BENCH_BASE_SRC=/tmp/ruizn-base/src.
BASE_SRC = os.environ.get("RUIZN_BENCH_BASE_SRC", "")
# Steps/s of `ruizn batch` at concurrency 16 at the base commit dd30d61 on this machine:
# shown beside the row when no baseline runs in the same rounds.
FLEET16_BEFORE = 57.0
# The raw SDK loop's gap is a few ms on any machine this runs on; far above that, the figure
# is mostly not client time (load, a sleeping SDK, a harness bug): say so beside the table.
RAW_GAP_SUSPECT_MS = 25.0
# Client time per step against the raw SDK loop's, by steps (1.0x elsewhere).
LOOP_TARGETS = {50: 0.7, 200: 0.5}
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


# ---------------------------------------------------------------- the tool loop


@dataclass
class LoopRun:
    side: str
    steps: int  # tool turns; the run makes steps + 1 requests
    gaps: list[float]  # seconds: answer i's last byte -> request i+1's line, i = 1..steps
    spans: list[float]  # seconds: request line -> last byte, per request
    client_seconds: float  # the client's own loop time, by its own clock
    rss_kb: int
    wall: float
    log: str = ""  # ruizn's events.jsonl

    @property
    def gap_ms(self) -> float:
        return med(self.gaps) * 1000

    def window_ms(self, first: int, last: int) -> float:
        """Median gap of steps first..last (1-based, inclusive)."""
        return med(self.gaps[first - 1 : last]) * 1000


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


def run_ruizn_loop(server: Server, steps: int, ws: Path, timeout: float | None = None) -> LoopRun:
    label = f"ruizn, {steps} steps"
    server.reset()
    logs = Scratch.dir("logs")
    cmd = [RUIZN, "run", "--goal", "loop", "--max-steps", str(steps + 1), "--system", SYSTEM_TEXT]
    proc = timed([*cmd, "--log-dir", str(logs)], ws, client_env(server.url), timeout=timeout)
    if proc.timed_out:
        raise TimedOut(f"{label}: still running after {timeout:.0f} s")
    events = read_log(logs)
    last = events[-1]
    CHECKS.check(
        last["type"] == "run_finished" and last["status"] == "success",
        f"{label}: ended {last.get('status')} after {last.get('steps')} steps",
    )
    for kind in ("llm_call_started", "llm_response"):
        n = count(events, kind)
        CHECKS.check(n == steps + 1, f"{label}: {n} {kind} in the log, not {steps + 1}")
    gaps, spans, covered = server_gaps(server, label, steps + 1)
    # The log's ts is wall-clock time, not the server's monotonic clock: compare durations.
    first = next(e["ts"] for e in events if e["type"] == "llm_call_started")
    seconds = next(e["ts"] for e in reversed(events) if e["type"] == "llm_response") - first
    within(label, seconds, covered)
    log = str(next(logs.glob("*/events.jsonl")))
    return LoopRun("ruizn", steps, gaps, spans, seconds, proc.rss_kb, proc.wall, log)


def run_script_loop(
    server: Server, side: str, script: str, python: str, *, config: Path, steps: int
) -> LoopRun:
    label = f"{side}, {steps} steps"
    server.reset()
    proc = timed([python, str(BENCH / script), str(config)], config.parent, client_env(server.url))
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    for key in ("requests", "answers"):
        CHECKS.check(report[key] == steps + 1, f"{label}: the client counted {report[key]} {key}")
    timings = server.timings(steps + 1)
    gaps, spans, covered = server_gaps(server, label, steps + 1)
    within(label, report["seconds"], covered)
    # The same monotonic clock (system-wide on Linux): the server's stamps of this run must
    # fall between the client's start and end.
    CHECKS.check(
        report["began"] <= timings[0]["request_line"]
        and timings[-1]["last_byte"] <= report["ended"] + STAMP_SLACK,
        f"{label}: the server's stamps fall outside the client's own loop",
    )
    return LoopRun(side, steps, gaps, spans, report["seconds"], proc.rss_kb, proc.wall)


def peer_problem(peer: str) -> str | None:
    """None if the peer imports in its Python, else why it is not measured."""
    if not PEERS_PY:
        return f"not measured: RUIZN_BENCH_PEERS_PYTHON is not set ({PEER_PIP} in a venv)"
    out = subprocess.run(
        [PEERS_PY, "-c", PEERS[peer][1]],
        env=base_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode == 0:
        return None
    last = (out.stderr.strip().splitlines() or ["import failed"])[-1]
    return f"not measured: {last[:100]} in {PEERS_PY}"


def loop_config(ws: Path, steps: int, tools: list[Any]) -> Path:
    path = ws / f"config-{steps}.json"
    config = {"model": MODEL, "system": SYSTEM_TEXT, "tools": tools, "steps": steps}
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def ruizn_tools(ws: Path) -> list[Any]:
    """The tool schemas ruizn sends, from the run_started line of a run of the offline model,
    so that the raw loop's requests are ruizn's, byte for byte."""
    logs = Scratch.dir("tools")
    timed([RUIZN, "run", "--model", "test", "--goal", "README.md", "--log-dir", str(logs)], ws)
    tools: list[Any] = read_log(logs)[0]["settings"]["tools"]
    return tools


def loop_section(plan: Plan, ws: Path, data: dict[str, Any]) -> list[Row]:
    tools = ruizn_tools(ws)
    problems = {
        p: (peer_problem(p) if plan.peers else "not measured: --smoke skips the peers")
        for p in PEERS
    }
    for peer, why in problems.items():
        if why:
            note(f"{peer}: {why}")
    sides = ["ruizn", "raw SDK", *(p for p in PEERS if problems[p] is None)]
    rows: list[Row] = []
    for steps in plan.loop_steps:
        config = loop_config(ws, steps, tools)
        runs: dict[str, list[LoopRun]] = {side: [] for side in sides}
        with Server("--bench-loop", str(steps)) as server:
            # Before the first timed runs, one untimed run of each side: the page cache, the
            # .pyc cache (a first run compiles every module), the server's warm-up.
            warmups = sides if plan.warmup and steps == plan.loop_steps[0] else []
            rounds = min(plan.peer_reps, plan.loop_reps)
            order = [*warmups, *abba(sides, rounds)]
            order += abba(sides[:2], plan.loop_reps - rounds)
            for i, side in enumerate(order):
                warm = i < len(warmups)
                note(f"loop, {steps} steps: {side}{' (warm-up)' if warm else ''}")
                try:
                    if side == "ruizn":
                        run = run_ruizn_loop(server, steps, ws)
                    elif side == "raw SDK":
                        run = run_script_loop(
                            server, side, "raw_loop.py", PY, config=config, steps=steps
                        )
                    else:
                        if problems[side]:
                            continue
                        script = PEERS[side][0]
                        run = run_script_loop(
                            server, side, script, PEERS_PY, config=config, steps=steps
                        )
                except RuntimeError as exc:
                    if side in PEERS:  # a broken peer is a row, not a crash
                        problems[side] = f"not measured: {exc}"[:200]
                        continue
                    raise
                if not warm:
                    runs[side].append(run)
        data.setdefault("loop", {})[str(steps)] = {
            side: [asdict(r) for r in rs] for side, rs in runs.items()
        }
        ours = [r.gap_ms for r in runs["ruizn"]]
        raw = [r.gap_ms for r in runs["raw SDK"]]
        ratio = med(ours) / med(raw)
        target = LOOP_TARGETS.get(steps, 1.0)
        rows.append(
            (
                f"client time per step, {steps} steps (ms)",
                spread(ours),
                f"raw SDK {spread(raw)}",
                f"{ratio:.2f}x",
                f"≤ {target:.1f}x",
                met(ratio <= target),
            )
        )
        for peer in PEERS:
            label = f"  vs {peer}, {steps} steps (ms)"
            if problems[peer] or not runs.get(peer):
                rows.append((label, spread(ours), problems[peer] or "not measured", "", "", ""))
                continue
            theirs = [r.gap_ms for r in runs[peer]]
            r_ = med(ours) / med(theirs)
            rows.append((label, spread(ours), f"{peer} {spread(theirs)}", f"{r_:.2f}x", "", ""))
        if med(raw) > RAW_GAP_SUSPECT_MS:
            CHECKS.warn(
                f"the raw SDK loop's gap at {steps} steps is {med(raw):.1f} ms, not a few ms:"
                " the machine is loaded or the harness measures more than the client"
            )
        data.setdefault("raw_gap_ms", {})[str(steps)] = med(raw)
        data.setdefault("problems", {}).update({p: w for p, w in problems.items() if w})
    steps = plan.loop_steps[-1]
    w = plan.growth_window
    runs = {side: [LoopRun(**r) for r in rs] for side, rs in data["loop"][str(steps)].items() if rs}

    def growth(run: LoopRun) -> float:
        return run.window_ms(steps - w + 1, steps) / run.window_ms(1, w)

    ours = [growth(r) for r in runs["ruizn"]]
    raw = [growth(r) for r in runs["raw SDK"]]
    first_last = (
        f"{med([r.window_ms(1, w) for r in runs['ruizn']]):.2f} → "
        f"{med([r.window_ms(steps - w + 1, steps) for r in runs['ruizn']]):.2f} ms"
    )
    rows.append(
        (
            f"growth at {steps} steps: median gap of the last {w} / first {w} steps",
            f"{spread(ours, '{:.2f}x')} ({first_last})",
            f"raw SDK {spread(raw, '{:.2f}x')}",
            "",
            "≤ 1.3x",
            met(med(ours) <= 1.3),
        )
    )
    for peer in PEERS:
        if runs.get(peer):
            theirs = [growth(r) for r in runs[peer]]
            rows.append(
                (f"  growth, {peer}", "", f"{peer} {spread(theirs, '{:.2f}x')}", "", "", "")
            )
    ours_rss = [r.rss_kb / 1024 for r in runs["ruizn"]]
    raw_rss = [r.rss_kb / 1024 for r in runs["raw SDK"]]
    if all(ours_rss) and all(raw_rss):
        rows.append(
            (
                f"peak RSS, {steps}-step loop (MB)",
                spread(ours_rss, "{:.0f}"),
                f"raw SDK {spread(raw_rss, '{:.0f}')}",
                f"{med(ours_rss) / med(raw_rss):.2f}x",
                "",
                "",
            )
        )
    return rows


def long_section(plan: Plan, ws: Path, data: dict[str, Any]) -> list[Row]:
    steps = plan.long_steps
    (a0, a1), (b0, b1) = plan.long_windows
    done = data.get("loop", {}).get(str(steps), {}).get("ruizn")
    if done:  # smoke: the loop's own run
        run = LoopRun(**done[0])
    else:
        note(f"long loop: ruizn, {steps} steps (one run, at most {plan.long_timeout:.0f} s)")
        with Server("--bench-loop", str(steps)) as server:
            try:
                run = run_ruizn_loop(server, steps, ws, timeout=plan.long_timeout)
            except TimedOut:
                return [long_unfinished(plan, server, data)]
    early, late = run.window_ms(a0, a1), run.window_ms(b0, b1)
    data["long"] = {
        "steps": steps,
        "gaps": run.gaps,
        "spans": run.spans,
        "wall": run.wall,
        "windows": plan.long_windows,
    }
    return [
        (
            f"{steps}-step run: client ms/step, steps {b0}-{b1} / {a0}-{a1}",
            f"{late / early:.2f}x ({early:.2f} → {late:.2f} ms)",
            f"server {med(run.spans[a0 - 1 : a1]) * 1000:.1f} → "
            f"{med(run.spans[b0 - 1 : b1]) * 1000:.1f} ms/request; wall {run.wall:.0f} s",
            "",
            "≤ 2x",
            met(late / early <= 2),
        )
    ]


# ---------------------------------------------------------------- the token pipeline


def long_unfinished(plan: Plan, server: Server, data: dict[str, Any]) -> Row:
    """The row of a long run killed at its timeout: how far it got, and its per-step time
    there (the server's record up to the kill) against steps 101-200."""
    timings = server.timings(0)
    ends = [t["last_byte"] for t in timings]
    gaps = [b["request_line"] - a for a, b in zip(ends, timings[1:], strict=False)]
    (a0, a1), _ = plan.long_windows
    data["long"] = {"steps": plan.long_steps, "gaps": gaps, "killed": plan.long_timeout}
    reached = len(gaps)
    if reached < a1 + 10:
        shown = f"killed at {plan.long_timeout:.0f} s after {reached} steps"
    else:
        early = med(gaps[a0 - 1 : a1]) * 1000
        late = med(gaps[-10:]) * 1000
        shown = (
            f"killed at {plan.long_timeout:.0f} s after {reached} steps; steps"
            f" {reached - 9}-{reached} / {a0}-{a1}: {late / early:.2f}x"
            f" ({early:.2f} → {late:.2f} ms)"
        )
    return (
        f"{plan.long_steps}-step run: client ms/step, late / steps {a0}-{a1}",
        shown,
        "",
        "",
        "≤ 2x",
        met(False),
    )


def sse_file(deltas: int) -> Path:
    """The long answer exactly as the server streams it, recorded from one bare request."""
    path = Scratch.dir("sse") / "long.response.sse"
    with Server("--long-answer", str(deltas)) as server:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
        body = {
            "model": MODEL,
            "max_tokens": 4096,
            "stream": True,
            "messages": [{"role": "user", "content": "talk"}],
        }
        headers = {"content-type": "application/json"}
        conn.request("POST", "/v1/messages", body=json.dumps(body), headers=headers)
        path.write_bytes(conn.getresponse().read())  # http.client undoes the chunking
        conn.close()
    return path


def token_run_ruizn(server: Server, ws: Path, deltas: int) -> tuple[float, Path]:
    server.reset()
    logs = Scratch.dir("tokens")
    cmd = [RUIZN, "run", "--goal", "talk", "--max-steps", "1", "--log-dir", str(logs)]
    timed(cmd, ws, client_env(server.url))
    server_gaps(server, "ruizn, token pipeline", 1)
    stamps = [e["ts"] for e in read_log(logs) if e["type"] == "llm_token"]
    CHECKS.check(len(stamps) == deltas, f"ruizn logged {len(stamps)} tokens, not {deltas}")
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]), next(logs.glob("*/events.jsonl"))


def token_run_raw(server: Server, ws: Path, deltas: int) -> float:
    server.reset()
    proc = timed([PY, str(BENCH / "raw_tokens.py")], ws, client_env(server.url), keep_stdout=True)
    server_gaps(server, "raw SDK, token pipeline", 1)
    out = json.loads(proc.stdout)
    CHECKS.check(out["deltas"] == deltas, f"the raw SDK saw {out['deltas']} deltas, not {deltas}")
    return float((out["deltas"] - 1) / out["span"])


def token_section(plan: Plan, ws: Path, data: dict[str, Any]) -> list[Row]:
    deltas = plan.token_deltas
    rows: list[Row] = []
    for mode in plan.token_modes:
        args = ["--long-answer", str(deltas)]
        if mode == "pre-rendered":
            args = ["--sse", str(sse_file(deltas))]
        rates: dict[str, list[float]] = {"ruizn": [], "raw SDK": []}
        with Server(*args) as server:
            for side in abba(list(rates), plan.token_reps):
                note(f"token pipeline ({mode}): {side}")
                if side == "ruizn":
                    rate, log = token_run_ruizn(server, ws, deltas)
                    data["token_log"] = str(log)
                else:
                    rate = token_run_raw(server, ws, deltas)
                rates[side].append(rate)
        ratio = med(rates["ruizn"]) / med(rates["raw SDK"])
        what = "server writes each event" if mode == "live" else "pre-rendered, one write"
        rows.append(
            (
                f"token pipeline, {deltas:,} deltas, {what} (deltas/s)",
                spread(rates["ruizn"], "{:,.0f}"),
                f"raw SDK text_stream {spread(rates['raw SDK'], '{:,.0f}')}",
                f"{ratio:.2f}x",
                "≥ 1.0x",
                met(ratio >= 1.0),
            )
        )
        data.setdefault("tokens", {})[mode] = rates
    return rows


# ---------------------------------------------------------------- start-up


def startup_section(plan: Plan, ws: Path, data: dict[str, Any]) -> list[Row]:
    # `ruizn runs` lists a log dir of 20 short runs of the offline model. Its cache of rows
    # (each run stored its own as it ended) lives in a state folder of the benchmark's own;
    # "cold" points the state folder at a file, so no cache is ever read.
    listed = Scratch.dir("listed")
    state = Scratch.dir("state")
    env = {**base_env(), "RUIZN_STATE_DIR": str(state)}
    for _ in range(20 if Judge.on else 3):  # a smoke run's listing checks the harness only
        timed(
            [RUIZN, "run", "--model", "test", "--goal", "README.md", "--log-dir", str(listed)],
            ws,
            env,
        )
    listed_runs = sum((run / "events.jsonl").exists() for run in listed.iterdir())
    (state / "not-a-folder").write_text("")
    cold = {**env, "RUIZN_STATE_DIR": str(state / "not-a-folder")}
    cmds = {
        "ruizn --help": ([RUIZN, "--help"], env),
        "ruizn runs": ([RUIZN, "runs", "--log-dir", str(listed)], env),
        "ruizn runs, cold": ([RUIZN, "runs", "--log-dir", str(listed)], cold),
        "import click": ([PY, "-c", "import click"], env),
        "pass": ([PY, "-c", "pass"], env),
    }
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    for cmd, cmd_env in cmds.values():  # warm-up: the page cache, .pyc files, runs' cache
        timed(cmd, ws, cmd_env, rss=False)
    note("start-up")
    for name in abba(list(cmds), plan.startup_reps):
        cmd, cmd_env = cmds[name]
        walls[name].append(timed(cmd, ws, cmd_env, rss=False).wall * 1000)
    ratio = med(walls["ruizn --help"]) / med(walls["import click"])
    runs_ratio = med(walls["ruizn runs"]) / med(walls["import click"])
    importtime = subprocess.run(
        [PY, "-X", "importtime", "-m", "ruizn", "--help"],
        check=False,
        cwd=ws,
        env=base_env(),
        capture_output=True,
        text=True,
    )
    sdk = any(
        line.split("|")[-1].strip().split(".")[0] in ("anthropic", "httpx2")
        for line in importtime.stderr.splitlines()
        if line.startswith("import time:")
    )
    data["startup_ms"] = walls
    return [
        (
            "`ruizn --help` (ms)",
            spread(walls["ruizn --help"], "{:.0f}"),
            f"`python -c 'import click'` {spread(walls['import click'], '{:.0f}')}"
            f" (`python -c pass` {med(walls['pass']):.0f})",
            f"{ratio:.2f}x",
            "≤ 1.5x",
            met(ratio <= 1.5),
        ),
        (
            f"`ruizn runs` of {listed_runs} runs (ms)",
            spread(walls["ruizn runs"], "{:.0f}"),
            f"`python -c 'import click'` {spread(walls['import click'], '{:.0f}')}",
            f"{runs_ratio:.2f}x",
            "≤ 1.5x",
            met(runs_ratio <= 1.5),
        ),
        (
            f"`ruizn runs` of {listed_runs} runs, no cache (ms)",
            spread(walls["ruizn runs, cold"], "{:.0f}"),
            f"`python -c 'import click'` {spread(walls['import click'], '{:.0f}')}",
            f"{med(walls['ruizn runs, cold']) / med(walls['import click']):.2f}x",
            "",
            "",
        ),
        (
            "`ruizn --help` imports the SDK?",
            "yes" if sdk else "no",
            "`python -X importtime -m ruizn --help`",
            "",
            "no",
            met(not sdk),
        ),
    ]


# ---------------------------------------------------------------- replay


def synthetic_log(real: Path, path: Path, events: int) -> None:
    """A real one-answer log of ruizn's, its llm_token lines repeated (seq renumbered) to
    `events` lines. Built from the CLI's own output, not the library's event classes, so it
    follows whatever the log format becomes."""
    with real.open("rb") as f:
        lines = [json.loads(line) for line in f]
    tokens = [e for e in lines if e["type"] == "llm_token"]
    head = lines[: lines.index(tokens[0])]
    tail = lines[lines.index(tokens[-1]) + 1 :]
    n_tokens = events - len(head) - len(tail)
    seq = 0

    def dump(event: dict[str, Any]) -> str:
        nonlocal seq
        seq += 1
        return json.dumps({**event, "seq": seq}, ensure_ascii=False, separators=(",", ":"))

    with path.open("w", encoding="utf-8") as out:
        out.writelines(dump(e) + "\n" for e in head)
        batch: list[str] = []
        for i in range(n_tokens):
            batch.append(dump(tokens[i % len(tokens)]))
            if len(batch) == 10_000:
                out.write("\n".join(batch) + "\n")
                batch.clear()
        if batch:
            out.write("\n".join(batch) + "\n")
        out.writelines(dump(e) + "\n" for e in tail)
        # On disk before any replay is timed: otherwise the kernel writes back the fresh
        # 80 MB of a 1,000,000-event log while it is being replayed, on one of two cores.
        out.flush()
        os.fsync(out.fileno())


def replay_walls(log: Path, ws: Path, reps: int, timeout: float | None = None) -> list[Proc]:
    cmd = [RUIZN, "replay", "--json", str(log)]
    return [timed(cmd, ws, keep_stdout=False, timeout=timeout) for _ in range(reps)]


def replay_startup(plan: Plan, ws: Path, data: dict[str, Any]) -> float:
    """Seconds `ruizn replay --json` takes on a 10-event log: its start-up, subtracted from
    every replay wall time."""
    if "replay_startup" not in data:
        tiny = Scratch.dir("tiny") / "tiny.jsonl"
        synthetic_log(a_real_log(plan, ws, data), tiny, 10)
        note("replay: start-up of `ruizn replay --json` on a 10-event log")
        timed([RUIZN, "replay", "--json", str(tiny)], ws, rss=False)
        data["replay_startup"] = med([p.wall for p in replay_walls(tiny, ws, 3)])
    return float(data["replay_startup"])


def a_real_log(plan: Plan, ws: Path, data: dict[str, Any]) -> Path:
    if data.get("token_log"):
        return Path(data["token_log"])
    with Server("--long-answer", str(plan.token_deltas)) as server:
        return token_run_ruizn(server, ws, plan.token_deltas)[1]


def replay_section(plan: Plan, ws: Path, data: dict[str, Any]) -> list[Row]:
    """`ruizn replay --json` of synthetic logs. Each timed replay is paired with a replay of
    a 10-event log run right before it, under the same load: the pair's difference is the
    replay's own time, without the start-up (0.1-0.2 s, which swings by tens of ms and
    would otherwise be most of a 10,000-event figure)."""
    real = a_real_log(plan, ws, data)
    folder = Scratch.dir("replay")
    tiny = folder / "tiny.jsonl"
    synthetic_log(real, tiny, 10)
    replay_walls(tiny, ws, 2)  # warm: the first run compiles nothing, but fills caches
    seconds: dict[int, list[float]] = {}
    startups: list[float] = []
    rss: dict[int, int] = {}
    rows: list[Row] = []
    for size in plan.replay_sizes:
        note(f"replay: {size:,} events")
        path = folder / f"{size}.jsonl"
        synthetic_log(real, path, size)
        procs = []
        seconds[size] = []
        for _ in range(plan.replay_reps):
            base = replay_walls(tiny, ws, 1)[0].wall
            proc = replay_walls(path, ws, 1)[0]
            startups.append(base)
            procs.append(proc)
            seconds[size].append(max(proc.wall - base, 1e-6))
        rss[size] = max(p.rss_kb for p in procs)
        rate = [size / s for s in seconds[size]]
        # Judged from 100,000 events: 10,000 take about 0.025 s inside a 0.13 s process
        # whose start-up alone swings by tens of ms, so that rate is shown, not judged.
        judged = size >= 100_000
        rows.append(
            (
                f"`ruizn replay --json`, {size:,} events (events/s, start-up subtracted)",
                spread(rate, "{:,.0f}"),
                f"wall {spread([p.wall for p in procs], '{:.2f}')} s, start-up"
                f" {spread(startups[-plan.replay_reps :], '{:.2f}')} s; peak RSS"
                f" {rss[size] / 1024:.0f} MB",
                "",
                "≥ 200,000/s" if judged else "shown, not judged: mostly start-up",
                met(med(rate) >= 200_000) if judged else "",
            )
        )
        path.unlink()
    mid, large = plan.replay_sizes[-2], plan.replay_sizes[-1]
    # Best times: replay is deterministic, so the minimum is its cost and the rest is load.
    linear = (min(seconds[large]) / min(seconds[mid])) / (large / mid)
    rows.append(
        (
            f"replay linearity: t({large:,}) / t({mid:,}) / {large // mid} (best of each)",
            f"{linear:.2f}",
            f"medians {(med(seconds[large]) / med(seconds[mid])) / (large / mid):.2f}",
            "",
            "≤ 1.1",
            met(linear <= 1.1),
        )
    )
    data["replay"] = {"seconds": seconds, "rss_kb": rss, "startups": startups}
    data["replay_startup"] = med(startups)
    return rows


# ---------------------------------------------------------------- many calls in one turn


def calls_section(plan: Plan, ws: Path, data: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    results: dict[int, Any] = {}
    base = replay_startup(plan, ws, data)
    for n in plan.calls:
        note(f"{n:,} read_file calls in one turn (timeout {plan.calls_timeout:.0f} s)")
        logs = Scratch.dir("calls")
        with Server("--tool-calls", str(n)) as server:
            # No context limit: 10,000 results in one turn are more than a real model's
            # window holds, and this measures the turn's bookkeeping, not the clearing.
            cmd = [RUIZN, "run", "--goal", "many", "--max-steps", "2", "--max-context", "off"]
            cmd += ["--log-dir", str(logs)]
            proc = timed(cmd, ws, client_env(server.url), timeout=plan.calls_timeout)
            events = read_log(logs)
            done = count(events, "tool_call_finished")
            if proc.timed_out:
                turn = None
            else:
                CHECKS.check(done == n, f"{n:,} calls in one turn: {done:,} finished")
                gaps, _, _ = server_gaps(server, f"{n:,} calls in one turn", 2)
                turn = gaps[0]
        log = next(logs.glob("*/events.jsonl"))
        try:
            replay = replay_walls(log, ws, 1, timeout=plan.calls_timeout)[0]
            replay_shown = (
                f"> {plan.calls_timeout:.0f} s (killed)"
                if replay.timed_out
                else f"{len(events) / max(replay.wall - base, 1e-6):,.0f} events/s"
                f" (wall {replay.wall:.2f} s)"
            )
        except RuntimeError as exc:  # e.g. the log of a killed run
            replay_shown = f"failed: {exc}"[:120]
        results[n] = {"turn": turn, "wall": proc.wall, "done": done, "events": len(events)}
        results[n]["replay"] = replay_shown
        shown = (
            f"{turn:.2f} s"
            if turn is not None
            else f"> {plan.calls_timeout:.0f} s ({done:,} of {n:,} done, killed)"
        )
        rows.append(
            (
                f"{n:,} read_file calls in one turn: answer to next request (s)",
                shown,
                f"`replay --json` of its {len(events):,} events: {replay_shown}",
                "",
                "< 10 s at 10,000" if n == 10_000 else "",
                met(turn is not None and turn < 10) if n == 10_000 else "",
            )
        )
    data["calls"] = results
    return rows


# ---------------------------------------------------------------- fleets


def fleet_section(plan: Plan, ws: Path, data: dict[str, Any]) -> list[Row]:
    """`ruizn batch` on SQLite (bench/fleet.py's measures): what a step costs a batch's slot
    at concurrency 1 against a single `ruizn run`'s step, and steps/s at 4 and 16. With
    RUIZN_BENCH_BASE_SRC, the same batches of that checkout run in the same ABBA rounds."""
    try:
        import fleet  # bench/fleet.py, beside this file
    except ImportError as exc:
        why = f"not measured: {exc}"
        return [("fleet: `ruizn batch`", why, "", "", "", "")]
    probe = subprocess.run(
        [PY, "-c", "import dbos, sqlalchemy"], capture_output=True, env=base_env(), check=False
    )
    if probe.returncode != 0:
        return [
            ("fleet: `ruizn batch`", "not measured: pip install 'ruizn[fleet]'", "", "", "", "")
        ]
    sides = {"ruizn": None, "base": BASE_SRC} if BASE_SRC else {"ruizn": None}
    server, url = fleet.start_server("--tool-loop", str(fleet.TOOL_TURNS))
    batches: dict[str, dict[int, list[Any]]] = {side: {} for side in sides}
    try:
        note(f"fleet: {plan.fleet_singles} single runs")
        singles = fleet.measure_single(url, plan.fleet_singles, src=None)
        for concurrency in (1, 4, 16):
            for side in abba(list(sides), plan.fleet_reps):
                note(f"fleet: {side}, batch of {plan.fleet_runs} at concurrency {concurrency}")
                try:
                    got = fleet.measure_batch(url, plan.fleet_runs, concurrency, src=sides[side])
                except subprocess.CalledProcessError as exc:
                    raise RuntimeError(
                        f"fleet: ruizn batch ({side}) exited {exc.returncode}"
                    ) from None
                batches[side].setdefault(concurrency, []).append(got)
    finally:
        server.terminate()
        server.wait()
    data["fleet"] = {
        "single_ms_per_step": singles,
        "batches": {
            side: {str(c): [asdict(b) for b in bs] for c, bs in by.items()}
            for side, by in batches.items()
        },
        "base_src": BASE_SRC,
    }
    ours = batches["ruizn"]
    one = [b.ms_per_step for b in ours[1]]
    ratio = med(one) / med(singles)
    rows: list[Row] = [
        (
            f"fleet: `ruizn batch` (SQLite), concurrency 1, {plan.fleet_runs} runs of 3 steps:"
            " ms per step",
            spread(one, "{:.1f}"),
            f"single `ruizn run` {spread(singles, '{:.1f}')}",
            f"{ratio:.2f}x",
            "≤ 3x",
            met(ratio <= 3),
        )
    ]
    for concurrency in (4, 16):
        rate = [b.steps_per_s for b in ours[concurrency]]
        if BASE_SRC:
            before = [b.steps_per_s for b in batches["base"][concurrency]]
            shown = f"{Path(BASE_SRC).parent.name} {spread(before, '{:.1f}')}"
            r_ = med(rate) / med(before)
        else:
            shown = f"dd30d61: {FLEET16_BEFORE:.0f}" if concurrency == 16 else ""
            r_ = med(rate) / FLEET16_BEFORE if concurrency == 16 else 0.0
        judged = concurrency == 16
        rows.append(
            (
                f"fleet: batch, concurrency {concurrency}: steps/s",
                spread(rate, "{:.1f}"),
                shown,
                f"{r_:.2f}x" if r_ else "",
                "≥ 3x dd30d61" if judged else "",
                (met(r_ >= 3) if BASE_SRC else "not judged: no baseline run") if judged else "",
            )
        )
    return rows


def scale_section(plan: Plan, ws: Path, data: dict[str, Any]) -> list[Row]:
    """Fleets at scale, with a latency per call (bench/fleet_scale.py)."""
    import fleet_scale  # beside this file

    return fleet_scale.section(smoke=plan is SMOKE, data=data, met=met)


# ---------------------------------------------------------------- main


def machine() -> dict[str, Any]:
    cpu = "unknown"
    mem = 0
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) // 1024
    try:
        df = subprocess.run(
            ["df", "-T", str(Scratch.root)], capture_output=True, text=True, check=True
        )
        fs = df.stdout.splitlines()[1].split()[1]
    except (OSError, subprocess.CalledProcessError, IndexError):
        fs = "unknown"
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "mem_mb": mem,
        "logs_fs": fs,
        "python": platform.python_version(),
    }


def versions() -> dict[str, str]:
    code = (
        "import json, sys, importlib.metadata as m\n"
        "out = {}\n"
        "for d in sys.argv[1:]:\n"
        "    try: out[d] = m.version(d)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))"
    )
    found: dict[str, str] = {}
    for python, dists in (
        (PY, ("ruizn", "anthropic")),
        (PEERS_PY, ("pydantic-ai-slim", "langgraph", "langchain-anthropic", "anthropic")),
    ):
        if not python:
            continue
        out = subprocess.run(
            [python, "-c", code, *dists], capture_output=True, text=True, check=False
        )
        if out.returncode == 0:
            got = json.loads(out.stdout)
            if python == PEERS_PY and "anthropic" in got:
                got["anthropic (peers)"] = got.pop("anthropic")
            found.update(got)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few steps of each, no peers")
    parser.add_argument(
        "--only", default=",".join(SECTIONS), help=f"comma-separated: {','.join(SECTIONS)}"
    )
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    if not RUIZN:
        print("bench: no `ruizn` script beside this Python: pip install -e .", file=sys.stderr)
        return 2
    plan = SMOKE if args.smoke else FULL
    Judge.on = not args.smoke
    mode = "smoke" if args.smoke else "full"
    date = datetime.datetime.now(datetime.UTC)
    command = shlex.join(["python", "bench/run.py", *(argv if argv is not None else sys.argv[1:])])
    load_before = os.getloadavg()
    Scratch.root = Path(tempfile.mkdtemp(prefix="ruizn-bench-"))
    data: dict[str, Any] = {}
    rows: list[Row] = []
    section: dict[str, Callable[[Plan, Path, dict[str, Any]], list[Row]]] = {
        "loop": loop_section,
        "long": long_section,
        "tokens": token_section,
        "startup": startup_section,
        "replay": replay_section,
        "calls": calls_section,
        "fleet": fleet_section,
        "scale": scale_section,
        # Time to first token: bench/first_token.py, given this module's harness.
        "first": lambda *a: __import__("first_token").section(sys.modules[__name__], *a),
    }
    broken = ""
    try:
        ws = Scratch.dir("ws")
        (ws / "README.md").write_text("# Bench\n\nA small file, read every step.\n")
        for name in SECTIONS:
            if name in only:
                rows += section[name](plan, ws, data)
    except RuntimeError as exc:
        broken = str(exc)
        note(f"BENCHMARK BROKEN: {exc}")
    finally:
        info = machine()
        shutil.rmtree(Scratch.root, ignore_errors=True)
    seconds = time.perf_counter() - STARTED
    info["load_avg_start"] = load_before
    info["load_avg_end"] = os.getloadavg()
    vers = versions()
    table = ["| measure | ruizn | baseline | ratio | target | met? |", "|---|---|---|---|---|---|"]
    table += ["| " + " | ".join(row) + " |" for row in rows]
    raw_gaps = data.get("raw_gap_ms", {})
    sanity = (
        f"Sanity: {CHECKS.passed} checks passed"
        + (f", {len(CHECKS.failed)} FAILED: " + "; ".join(CHECKS.failed) if CHECKS.failed else "")
        + (f". BROKEN: {broken}" if broken else "")
        + "."
    )
    lines = [
        *table,
        "",
        f"{mode} run, {date:%Y-%m-%d %H:%M} UTC, `{command}`, {seconds:.0f} s;"
        f" {info['cpus']} x {info['cpu']}, {info['mem_mb']:,} MB, {info['platform']},"
        f" Python {info['python']}; logs on {info['logs_fs']}; load average"
        f" {load_before[0]:.1f} at the start, {info['load_avg_end'][0]:.1f} at the end;"
        f" {', '.join(f'{k} {v}' for k, v in vers.items())}.",
        "Client time per step: the median gap between answer i's last byte and request i+1's"
        " request line at the server (its monotonic clock), per run; the table shows the"
        " median of the runs' medians (min-max), runs in ABBA order.",
    ]
    if raw_gaps:
        shown = ", ".join(f"{v:.2f} ms at {k} steps" for k, v in raw_gaps.items())
        lines.append(f"The raw SDK loop's gap (should be a few ms): {shown}.")
    lines += [f"Warning: {w}." for w in CHECKS.warnings]
    lines.append(sanity)
    missed = [row[0] for row in rows if row[5] == MISSED]
    if not Judge.on:
        lines.append("Targets not judged: a smoke run checks the harness, not speed.")
    else:
        lines.append(("Missed: " + "; ".join(missed) + ".") if missed else "All targets met.")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{'smoke' if args.smoke else 'latest'}.md").write_text(text, encoding="utf-8")
    record = {
        "date": date.isoformat(timespec="seconds"),
        "command": command,
        "mode": mode,
        "sections": only,
        "seconds": seconds,
        "machine": info,
        "versions": vers,
        "sanity": {"passed": CHECKS.passed, "failed": CHECKS.failed, "warnings": CHECKS.warnings},
        "broken": broken,
        "table": text,
        "data": data,
    }
    blob = json.dumps(record, indent=1, default=str)
    (RESULTS / f"{'smoke' if args.smoke else 'latest'}.json").write_text(blob, encoding="utf-8")
    (RESULTS / f"{date:%Y%m%d-%H%M%S}-{mode}.json").write_text(blob, encoding="utf-8")
    return 1 if CHECKS.failed or broken else 0


if __name__ == "__main__":
    sys.exit(main())
