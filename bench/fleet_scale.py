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
- **memory**: the batch process's peak RSS (`ru_maxrss` of that very child, from
  `os.wait4`), over C: MB per concurrent run. Helpers (RUIZN_BATCH_HELPERS) are off.
- **two workers**: `ruizn worker --db` on a throw-away Postgres (tests/fleet/pg.py), one
  worker then two at the same `--concurrency` each, RUNS goals `submit`ted once the workers
  said ready; steps/s of each over the logs' span, and the ratio.

`bench/run.py` takes its fleet-at-scale rows from here (`--only fleet`). Not a test: it
prints figures, nothing passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
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
    rss_kb: int = 0  # peak RSS of the process (0: not measured)

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
    out = subprocess.run(
        [PY, __file__, "--bare", str(path), "--runs", str(runs), "--concurrency", str(concurrency)],
        cwd=ws,
        env=fleet.env_for(url, src=None),
        check=True,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - began
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return Rate(f"bare asyncio SDK loop, {concurrency} at once", got["calls"], got["seconds"], wall)


# ---------------------------------------------------------------- ruizn batch


def wait_rss(proc: subprocess.Popen[Any], timeout: float) -> tuple[int, int]:
    """(exit status, peak RSS in KB) of one child, by its own rusage."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_maxrss
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"timed out after {timeout:.0f} s")


def measure_batch(url: str, ws: Path, runs: int, concurrency: int) -> tuple[Rate, dict[str, Any]]:
    """The batch's rate and peak RSS, and the first run's run_started (its request's parts)."""
    folder = Path(tempfile.mkdtemp(prefix="batch-", dir=ws))
    (folder / "README.md").write_text("# bench\n")
    goals = fleet.goals_file(folder, runs)
    logs = folder / "logs"
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
        env=fleet.env_for(url, XDG_STATE_HOME=str(folder / "state")),
        stdout=subprocess.DEVNULL,
    )
    code, rss = wait_rss(proc, 900)
    wall = time.perf_counter() - began
    if code != 0:
        raise RuntimeError(f"ruizn batch exited {code}")
    found = sorted(logs.glob("*/events.jsonl"))
    seconds, steps, _ = fleet.span(found)
    started = json.loads(found[0].read_text().splitlines()[0])
    label = f"`ruizn batch`, {runs} runs at concurrency {concurrency}"
    return Rate(label, steps, seconds, wall, rss), started


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
    proc = subprocess.Popen(
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
    assert proc.stdout is not None
    for line in proc.stdout:  # its announce lines, until it takes work
        if "ready" in line:
            return proc
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
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    wall = time.perf_counter() - began
    seconds, steps, _ = fleet.span(logs)
    label = f"{workers} `ruizn worker` x {concurrency}, Postgres, {runs} runs"
    return Rate(label, steps, seconds, wall)


def fresh_database(pg: str, name: str) -> str:
    """A new database on the server at `pg` (one per measure: no queue left from the last)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(pg, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return pg.rsplit("/", 1)[0] + f"/{name}"


# ---------------------------------------------------------------- all of it


def measure(
    *, runs: int, concurrency: int, latency: float, pg_runs: int, pg_concurrency: int, reps: int
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "runs": runs,
        "concurrency": concurrency,
        "latency_s": latency,
        "steps_a_run": TOOL_TURNS + 1,
        "batch": [],
        "bare": [],
        "workers": {"1": [], "2": []},
        "pg_runs": pg_runs,
        "pg_concurrency": pg_concurrency,
    }
    server, url = start_server(latency)
    ws = Path(tempfile.mkdtemp(prefix="ruizn-bench-scale-"))
    (ws / "README.md").write_text("# bench\n")
    try:
        for _ in range(reps):
            batch, started = measure_batch(url, ws, runs, concurrency)
            bare = measure_bare(url, ws, bare_config(started), runs, concurrency)
            out["batch"].append(asdict(batch))
            out["bare"].append(asdict(bare))
            print(
                f"{batch.label}: {batch.per_s:.1f} steps/s, rss {batch.rss_kb / 1024:.0f} MB;"
                f" {bare.label}: {bare.per_s:.1f} steps/s",
                file=sys.stderr,
                flush=True,
            )
        if pg_runs:
            try:
                with postgres_server() as pg:
                    for rep in range(reps):
                        for n in (1, 2):
                            db = fresh_database(pg, f"scale_{rep}_{n}")
                            got = measure_workers(
                                url, db, workers=n, runs=pg_runs, concurrency=pg_concurrency
                            )
                            out["workers"][str(n)].append(asdict(got))
                            print(
                                f"{got.label}: {got.per_s:.1f} steps/s", file=sys.stderr, flush=True
                            )
            except NoPostgres as exc:
                out["workers"] = {"skipped": str(exc)}
    finally:
        server.terminate()
        server.wait()
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=LATENCY)
    parser.add_argument("--pg-runs", type=int, default=256)
    parser.add_argument("--pg-concurrency", type=int, default=32)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--bare", type=Path, help=argparse.SUPPRESS)  # the ideal's child
    args = parser.parse_args()
    if args.bare is not None:
        config = json.loads(args.bare.read_text(encoding="utf-8"))
        got = asyncio.run(bare_conversations(config, args.runs, args.concurrency))
        print(json.dumps(got), flush=True)
        return 0
    got = measure(
        runs=args.runs,
        concurrency=args.concurrency,
        latency=args.latency,
        pg_runs=args.pg_runs,
        pg_concurrency=args.pg_concurrency,
        reps=args.reps,
    )
    print(json.dumps(got, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
