"""Fleets at scale: many slow runs at once, against the fake API with a latency per call.

    python bench/fleet_scale.py [--runs 256] [--concurrency 64] [--latency 0.15] [--smoke]

The fake API (tests/fakeapi, its own process) waits `latency_s` before the first byte of
each answer, as a real API's round trip does; each run is 5 steps (4 read_file turns and an
answer). Three measures:

- **batch vs the ideal**: `ruizn batch` of RUNS goals at `--concurrency C`, against a bare
  asyncio loop on the SDK (one `AsyncAnthropic`, C conversations at once, no log, no
  queue: what this machine can do at best). Steps/s of each: model calls over the span
  from the first request to the last answer (ruizn: first `run_started` to last
  `run_finished` over the logs, so DBOS's start-up is left out; the wall of the whole
  command is shown beside). The ratio is ruizn's over the bare loop's.
- **memory**: the peak of the batch's memory, its helper processes' included (a batch at
  64 forks one on a machine of two cores or more, docs/fleets.md), over C: MB per
  concurrent run. Sampled every 0.2 s from /proc: the sum of each process's PSS (a page the
  batch and a helper share counts once, split between them: what the machine spends), the
  sum of their RSS beside (a shared page counted in each). The same batch with
  RUIZN_BATCH_HELPERS=0 (one process) is measured beside, not judged.
- **two workers**: `ruizn worker --db` on a throw-away Postgres (tests/fleet/pg.py), one
  worker then two at the same `--concurrency` each (16), RUNS goals `submit`ted once the
  workers said ready; steps/s of each over the logs' span, and the ratio.

`bench/run.py` takes its fleet-at-scale rows from here (`--only fleet`). Not a test: it
prints figures, nothing passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tests.fleet.pg import NoPostgres, postgres_server  # noqa: E402

import fleet  # noqa: E402  # bench/fleet.py, beside this file

PY = sys.executable
TOOL_TURNS = 4  # 5 steps a run
LATENCY = 0.15


@dataclass
class Rate:
    label: str
    calls: int
    seconds: float  # first request to last answer
    wall: float  # the whole command
    rss_kb: int = 0  # peak RSS (0: not measured); a batch's: the sum of its processes'
    pss_kb: int = 0  # a batch's peak PSS, the sum of its processes' (0: not measured)
    cpu_s: float = 0.0  # CPU seconds of the process, user + system (start-up included)

    @property
    def per_s(self) -> float:
        return self.calls / self.seconds if self.seconds > 0 else 0.0


def start_server(latency: float) -> tuple[subprocess.Popen[str], str]:
    return fleet.start_server("--tool-loop", str(TOOL_TURNS), "--latency-s", str(latency))


# ---------------------------------------------------------------- the bare asyncio loop


async def bare_conversations(config: dict[str, Any], runs: int, concurrency: int) -> dict[str, Any]:
    """`runs` tool loops on one AsyncAnthropic, `concurrency` at once: the ideal."""
    import anthropic

    client = anthropic.AsyncAnthropic(max_retries=0)
    slots = asyncio.Semaphore(concurrency)
    calls = 0
    readme = Path("README.md")

    async def one(i: int) -> None:
        nonlocal calls
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"bench {i}"}]
        async with slots:
            while True:
                async with client.messages.stream(
                    model=config["model"],
                    max_tokens=config["max_tokens"],
                    system=config["system"],
                    tools=config["tools"],
                    messages=messages,  # type: ignore[arg-type]
                ) as stream:
                    message = await stream.get_final_message()
                calls += 1
                content = [b.model_dump(exclude_none=True) for b in message.content]
                messages.append({"role": "assistant", "content": content})
                uses = [b for b in message.content if b.type == "tool_use"]
                if not uses:
                    return
                text = readme.read_text(encoding="utf-8")  # noqa: ASYNC240
                results = [
                    {"type": "tool_result", "tool_use_id": b.id, "content": text} for b in uses
                ]
                messages.append({"role": "user", "content": results})

    began = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(runs)))
    seconds = time.perf_counter() - began
    await client.close()
    return {"calls": calls, "seconds": seconds}


def measure_bare(url: str, ws: Path, config: dict[str, Any], runs: int, concurrency: int) -> Rate:
    path = ws / "bare-config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    began = time.perf_counter()
    proc = subprocess.Popen(
        [PY, __file__, "--bare", str(path), "--runs", str(runs), "--concurrency", str(concurrency)],
        cwd=ws,
        env=fleet.env_for(url, src=None),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    code, rss, cpu = wait_rss(proc, 900)
    wall = time.perf_counter() - began
    if code != 0:
        raise RuntimeError(f"the bare asyncio loop exited {code}")
    got = json.loads(out.strip().splitlines()[-1])
    label = f"bare asyncio SDK loop, {concurrency} at once"
    return Rate(label, got["calls"], got["seconds"], wall, rss_kb=rss, cpu_s=cpu)


# ---------------------------------------------------------------- ruizn batch


def wait_rss(proc: subprocess.Popen[Any], timeout: float) -> tuple[int, int, float]:
    """(exit status, peak RSS in KB, CPU seconds) of one child, by its own rusage."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_maxrss, usage.ru_utime + usage.ru_stime
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"timed out after {timeout:.0f} s")


def _family(pid: int) -> list[int]:
    """The process and its children (a batch's helpers)."""
    found = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _memory_kb(pids: list[int]) -> tuple[int, int]:
    """(sum of PSS, sum of RSS) of the processes, in KB."""
    pss = rss = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                name, _, rest = line.partition(":")
                if name in ("Pss", "Rss"):
                    kb = int(rest.split()[0])
                    pss, rss = (pss + kb, rss) if name == "Pss" else (pss, rss + kb)
        except (OSError, ValueError, IndexError):
            continue
    return pss, rss


class MemorySampler:
    """The peak PSS and RSS sums of a process and its children, sampled every 0.2 s."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.pss_kb = self.rss_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            pss, rss = _memory_kb(_family(self.pid))
            self.pss_kb, self.rss_kb = max(self.pss_kb, pss), max(self.rss_kb, rss)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def measure_batch(
    url: str, ws: Path, runs: int, concurrency: int, *, helpers: int | None = None
) -> tuple[Rate, dict[str, Any]]:
    """The batch's rate and peak memory, and the first run's run_started (its request's
    parts). `helpers`: RUIZN_BATCH_HELPERS (None: unset, the batch's own choice; the
    helpers' CPU is counted in, as wait4 counts reaped children)."""
    folder = Path(tempfile.mkdtemp(prefix="batch-", dir=ws))
    (folder / "README.md").write_text("# bench\n")
    goals = fleet.goals_file(folder, runs)
    logs = folder / "logs"
    extra = {} if helpers is None else {"RUIZN_BATCH_HELPERS": str(helpers)}
    began = time.perf_counter()
    proc = subprocess.Popen(
        [
            PY,
            "-m",
            "ruizn",
            "batch",
            str(goals),
            "--concurrency",
            str(concurrency),
            "--log-dir",
            str(logs),
            "--model",
            fleet.MODEL,
        ],
        cwd=folder,
        env=fleet.env_for(url, XDG_STATE_HOME=str(folder / "state"), **extra),
        stdout=subprocess.DEVNULL,
    )
    sampler = MemorySampler(proc.pid)
    try:
        code, _, cpu = wait_rss(proc, 900)
    finally:
        sampler.stop()
    wall = time.perf_counter() - began
    if code != 0:
        raise RuntimeError(f"ruizn batch exited {code}")
    found = sorted(logs.glob("*/events.jsonl"))
    seconds, steps, _ = fleet.span(found)
    started = json.loads(found[0].read_text().splitlines()[0])
    label = f"`ruizn batch`, {runs} runs at concurrency {concurrency}"
    label += f", RUIZN_BATCH_HELPERS={helpers}" if helpers is not None else ""
    got = Rate(label, steps, seconds, wall, rss_kb=sampler.rss_kb, pss_kb=sampler.pss_kb, cpu_s=cpu)
    return got, started


def bare_config(started: dict[str, Any]) -> dict[str, Any]:
    """The bare loop's requests: the model, system prompt, tools and max_tokens of ruizn's."""
    settings = started["settings"]
    return {
        "model": settings["model"],
        "system": settings["system"],
        "tools": settings["tools"],
        "max_tokens": settings["max_tokens"],
    }


# ---------------------------------------------------------------- workers on Postgres


def start_worker(db: str, name: str, ws: Path, env: dict[str, str], concurrency: int) -> Any:
    return subprocess.Popen(
        [
            PY,
            "-m",
            "ruizn",
            "worker",
            "--db",
            db,
            "--id",
            name,
            "--concurrency",
            str(concurrency),
            "--log-dir",
            str(ws / name),
        ],
        cwd=ws,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_ready(proc: Any, name: str) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:  # its announce lines, until it takes work
        if "ready" in line:
            # The rest drained, so that a full pipe never holds the worker up.
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return
    raise RuntimeError(f"worker {name} ended before it was ready")


def finished(ws: Path, count: int, timeout: float) -> list[Path]:
    done: dict[str, Path] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for log in ws.glob("w*/*/events.jsonl"):
            if log.parent.name in done:
                continue
            with log.open("rb") as f:
                f.seek(max(0, log.stat().st_size - 400))
                if b'"type":"run_finished"' in f.read():
                    done[log.parent.name] = log
        if len(done) >= count:
            return list(done.values())
        time.sleep(0.25)
    raise RuntimeError(f"timed out waiting for {count} runs")


def measure_workers(url: str, db: str, *, workers: int, runs: int, concurrency: int) -> Rate:
    ws = Path(tempfile.mkdtemp(prefix="ruizn-bench-pgw-"))
    (ws / "README.md").write_text("# bench\n")
    env = fleet.env_for(url, RUIZN_DB=db, XDG_STATE_HOME=str(ws / "state"))
    began = time.perf_counter()
    procs = [start_worker(db, f"w{i}", ws, env, concurrency) for i in range(1, workers + 1)]
    try:
        for i, proc in enumerate(procs, start=1):  # started together, ready in any order
            wait_ready(proc, f"w{i}")
        subprocess.run(
            [PY, "-m", "ruizn", "submit", str(fleet.goals_file(ws, runs)), "--model", fleet.MODEL],
            cwd=ws,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        logs = finished(ws, runs, 900)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        cpu = sum(wait_rss(proc, 60)[2] for proc in procs)
    wall = time.perf_counter() - began
    seconds, steps, _ = fleet.span(logs)
    label = f"{workers} `ruizn worker` x {concurrency}, Postgres, {runs} runs"
    return Rate(label, steps, seconds, wall, cpu_s=cpu)


def fresh_database(pg: str, name: str) -> str:
    """A new database on the server at `pg` (one per measure: no queue left from the last)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(pg, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return pg.rsplit("/", 1)[0] + f"/{name}"


# ---------------------------------------------------------------- all of it


@dataclass(frozen=True)
class Sizes:
    runs: int
    concurrency: int
    latency: float
    pg_runs: int  # 0: no Postgres measure
    pg_concurrency: int
    reps: int
    one: bool = False  # also the batch with RUIZN_BATCH_HELPERS=0, one process (not judged)


# Two workers at 16 each fit two cores beside the fake API and Postgres (about 7 ms of CPU a
# step, 107 steps/s a worker at 150 ms): at 32 each, one worker alone already needs a core,
# and the figure would say how many cores the machine has, not whether the database scales.
FULL = Sizes(
    runs=256, concurrency=64, latency=LATENCY, pg_runs=256, pg_concurrency=16, reps=3, one=True
)
# --smoke (CI): that every measure runs, at sizes that say nothing about speed.
SMOKE = Sizes(runs=8, concurrency=4, latency=0.05, pg_runs=8, pg_concurrency=2, reps=1)


def measure(sizes: Sizes) -> dict[str, Any]:
    """Each rep runs both sides back to back, in alternating order (ABBA), so a drift in
    the machine's load falls on both alike; a ratio is taken within each rep."""
    out: dict[str, Any] = {
        **asdict(sizes),
        "steps_a_run": TOOL_TURNS + 1,
        "batch": [],
        "bare": [],
        "one": [],
        "workers": {"1": [], "2": []},
    }
    server, url = start_server(sizes.latency)
    ws = Path(tempfile.mkdtemp(prefix="ruizn-bench-scale-"))
    (ws / "README.md").write_text("# bench\n")
    try:
        config: dict[str, Any] | None = None
        for rep in range(sizes.reps if sizes.runs else 0):
            sides = ("batch", "bare", "one")[: 3 if sizes.one else 2]
            for side in sides if rep % 2 == 0 or config is None else sides[::-1]:
                if side in ("batch", "one"):
                    got, started = measure_batch(
                        url,
                        ws,
                        sizes.runs,
                        sizes.concurrency,
                        helpers=0 if side == "one" else None,
                    )
                    config = bare_config(started)
                else:
                    assert config is not None
                    got = measure_bare(url, ws, config, sizes.runs, sizes.concurrency)
                out[side].append(asdict(got))
                say(got)
        if sizes.pg_runs:
            try:
                with postgres_server() as pg:
                    for rep in range(sizes.reps):
                        for n in (1, 2) if rep % 2 == 0 else (2, 1):
                            db = fresh_database(pg, f"scale_{rep}_{n}")
                            got = measure_workers(
                                url,
                                db,
                                workers=n,
                                runs=sizes.pg_runs,
                                concurrency=sizes.pg_concurrency,
                            )
                            out["workers"][str(n)].append(asdict(got))
                            say(got)
            except NoPostgres as exc:
                out["workers"] = {"skipped": str(exc)}
    finally:
        server.terminate()
        server.wait()
    return out


def say(got: Rate) -> None:
    rss = f", peak RSS {got.rss_kb / 1024:.0f} MB" if got.rss_kb else ""
    rss += f", peak PSS {got.pss_kb / 1024:.0f} MB" if got.pss_kb else ""
    print(
        f"[scale] {got.label}: {got.per_s:.1f} steps/s, CPU {got.cpu_s:.1f} s{rss}",
        file=sys.stderr,
        flush=True,
    )


# ---------------------------------------------------------------- rows for bench/run.py

Row = tuple[str, str, str, str, str, str]


def _spread(values: list[float], fmt: str = "{:.1f}") -> str:
    if len(values) == 1:
        return fmt.format(values[0])
    mid = statistics.median(values)
    return f"{fmt.format(mid)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def _rate(r: dict[str, Any]) -> float:
    return float(r["calls"]) / float(r["seconds"])


def rows(got: dict[str, Any], met: Callable[[bool], str]) -> list[Row]:
    """The table's rows from `measure`'s figures; `met` judges a target (run.py's)."""
    out: list[Row] = []
    c, n = got["concurrency"], got["runs"]
    what = f"{n} runs x {got['steps_a_run']} steps, {got['latency'] * 1000:.0f} ms a call"
    if got["batch"]:
        ours = [_rate(r) for r in got["batch"]]
        ideal = [_rate(r) for r in got["bare"]]
        ratios = [a / b for a, b in zip(ours, ideal, strict=False)]
        ratio = statistics.median(ratios)
        out.append(
            (
                f"fleet at scale: `ruizn batch --concurrency {c}`, {what}: steps/s",
                _spread(ours),
                f"bare asyncio SDK loop, {c} at once: {_spread(ideal)}",
                f"{_spread(ratios, '{:.2f}')}x",
                "≥ 0.8x",
                met(ratio >= 0.8),
            )
        )
        # (figures of runs before the PSS was sampled have only the RSS)
        per_run = [(r.get("pss_kb") or r["rss_kb"]) / 1024 / c for r in got["batch"]]
        peak = [(r.get("pss_kb") or r["rss_kb"]) / 1024 for r in got["batch"]]
        rss = [r["rss_kb"] / 1024 for r in got["batch"]]
        out.append(
            (
                f"fleet at scale: the batch's peak memory per concurrent run (MB, PSS of its"
                f" processes), concurrency {c}",
                _spread(per_run, "{:.2f}"),
                f"peak PSS {_spread(peak, '{:.0f}')} MB (RSS {_spread(rss, '{:.0f}')} MB)",
                "",
                "< 4 MB",
                met(statistics.median(per_run) < 4),
            )
        )
        if got.get("one"):
            alone = [_rate(r) for r in got["one"]]
            ratios = [a / b for a, b in zip(alone, ideal, strict=False)]
            out.append(
                (
                    "fleet at scale: the same batch with RUIZN_BATCH_HELPERS=0 (one process):"
                    " steps/s",
                    _spread(alone),
                    f"bare asyncio SDK loop: {_spread(ideal)}",
                    f"{_spread(ratios, '{:.2f}')}x",
                    "",
                    "",
                )
            )
        cpu = [r["cpu_s"] / r["calls"] * 1000 for r in got["batch"]]
        bare_cpu = [r["cpu_s"] / r["calls"] * 1000 for r in got["bare"]]
        out.append(
            (
                "fleet at scale: CPU ms per step of the batch (its helpers'), start-up included",
                _spread(cpu),
                f"bare asyncio SDK loop {_spread(bare_cpu)}",
                f"{statistics.median(cpu) / statistics.median(bare_cpu):.2f}x",
                "",
                "",
            )
        )
    workers = got["workers"]
    if "skipped" in workers:
        out.append(
            (
                "fleet at scale: 2 workers on Postgres",
                f"not measured: {workers['skipped']}",
                "",
                "",
                "≥ 1.6x",
                "",
            )
        )
    elif workers["1"]:
        one = [_rate(r) for r in workers["1"]]
        two = [_rate(r) for r in workers["2"]]
        ratios = [a / b for a, b in zip(two, one, strict=False)]
        c2 = got["pg_concurrency"]
        out.append(
            (
                f"fleet at scale: 2 `ruizn worker`s x {c2} on one Postgres,"
                f" {got['pg_runs']} runs: steps/s",
                _spread(two),
                f"1 worker x {c2}: {_spread(one)}",
                f"{_spread(ratios, '{:.2f}')}x",
                "≥ 1.6x",
                met(statistics.median(ratios) >= 1.6),
            )
        )
    return out


def section(*, smoke: bool, data: dict[str, Any], met: Callable[[bool], str]) -> list[Row]:
    """bench/run.py's `scale` section: measure, keep the figures in `data`, give the rows."""
    got = measure(SMOKE if smoke else FULL)
    data["fleet_scale"] = got
    return rows(got, met)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (what CI runs)")
    parser.add_argument("--runs", type=int, help=f"runs a batch ({FULL.runs}; 0: none)")
    parser.add_argument("--concurrency", type=int, help=f"({FULL.concurrency})")
    parser.add_argument("--latency", type=float, help=f"seconds a call ({FULL.latency})")
    parser.add_argument("--pg-runs", type=int, help=f"({FULL.pg_runs}; 0: no Postgres)")
    parser.add_argument("--pg-concurrency", type=int, help=f"each worker's ({FULL.pg_concurrency})")
    parser.add_argument("--reps", type=int, help=f"({FULL.reps})")
    parser.add_argument("--bare", type=Path, help=argparse.SUPPRESS)  # the ideal's child
    args = parser.parse_args()
    if args.bare is not None:
        config = json.loads(args.bare.read_text(encoding="utf-8"))
        got = asyncio.run(bare_conversations(config, args.runs, args.concurrency))
        print(json.dumps(got), flush=True)
        return 0
    base = SMOKE if args.smoke else FULL
    sizes = Sizes(
        **{
            name: getattr(args, name, None) if getattr(args, name, None) is not None else value
            for name, value in asdict(base).items()
        }
    )
    got = measure(sizes)
    for row in rows(got, lambda ok: "yes" if ok else "no"):
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
