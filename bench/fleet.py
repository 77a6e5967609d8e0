"""Fleet throughput: `ruizn batch` at concurrency 1/4/16 (SQLite) and 2 workers on Postgres,
against the zero-latency fake API (tests/fakeapi, its own process); the takeover time after
a worker is killed with -9; and, for scale, single `ruizn run`s of the same goal.

    python bench/fleet.py [--runs N] [--smoke]

Runs/s and steps/s count from the first `run_started` to the last `run_finished` over all
logs, so DBOS's start-up (about 2-3 s a process) is left out; "per-run overhead" is that
span times the concurrency, divided by the runs, minus the mean `elapsed` of a run (the
loop's own time): what the queue, the checkpoints and the export add to each run.
"ms/step" is that span times the concurrency over the steps: what one step costs a slot of
the batch, its run's share of the queue included. A single run's ms/step is its own span
(run_started to run_finished) over its steps, the median of a few `ruizn run`s.
`bench/run.py` takes its fleet rows from here (`--only fleet`). Not a test: it prints
figures, nothing passes or fails.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fleet.pg import NoPostgres, postgres_server  # noqa: E402

PY = sys.executable
TOOL_TURNS = 2
# Named on every batch: an older checkout's default (dd30d61: claude-sonnet-4-5) is retired in
# the fake API's catalogue, so its batch would fail every run instead of being measured.
MODEL = "claude-sonnet-5-5"


def start_server(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [PY, "-m", "tests.fakeapi", *args], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


# RUIZN_BENCH_SRC: another checkout's src/ (e.g. main before a change) runs instead.
SRC = os.environ.get("RUIZN_BENCH_SRC") or None


def env_for(url: str, *, src: str | None = SRC, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "RUIZN_"))}
    env.update(
        ANTHROPIC_API_KEY="sk-ant-bench",
        ANTHROPIC_BASE_URL=url,
        NO_COLOR="1",
        PYTHONPATH=os.pathsep.join([*([src] if src else []), str(ROOT)]),
        **extra,
    )
    return env


def goals_file(folder: Path, runs: int) -> Path:
    path = folder / "goals.jsonl"
    path.write_text("".join(json.dumps({"goal": f"bench {i}"}) + "\n" for i in range(runs)))
    return path


def span(logs: list[Path]) -> tuple[float, int, float]:
    """(seconds from first run_started to last run_finished, steps, mean elapsed)."""
    first, last, steps, elapsed = float("inf"), 0.0, 0, []
    for log in logs:
        lines = log.read_text().splitlines()
        start, end = json.loads(lines[0]), json.loads(lines[-1])
        first, last = min(first, start["ts"]), max(last, end["ts"])
        steps += int(end["steps"])
        elapsed.append(float(end["elapsed"]))
    return last - first, steps, sum(elapsed) / len(elapsed)


@dataclass
class Batch:
    label: str
    runs: int
    concurrency: int
    seconds: float  # first run_started to last run_finished
    steps: int
    mean_elapsed: float  # a run's own loop time, mean
    wall: float  # the whole command, DBOS's start-up included

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds

    @property
    def ms_per_step(self) -> float:
        """What a step costs one of the batch's slots, its share of the queue included."""
        return self.seconds * min(self.concurrency, self.runs) / self.steps * 1000

    @property
    def overhead_ms(self) -> float:
        return (
            self.seconds * min(self.concurrency, self.runs) / self.runs - self.mean_elapsed
        ) * 1000

    def row(self) -> str:
        return (
            f"| {self.label} | {self.runs} | {self.seconds:.2f} | {self.runs / self.seconds:.1f}"
            f" | {self.steps_per_s:.1f} | {self.ms_per_step:.1f} | {self.overhead_ms:.0f} ms |"
        )


def row(label: str, runs: int, seconds: float, steps: int, *, concurrency: int, mean: float) -> str:
    return Batch(label, runs, concurrency, seconds, steps, mean, 0.0).row()


def workspace(tmp: str) -> Path:
    ws = Path(tmp)
    (ws / "README.md").write_text("# bench\n")
    return ws


def measure_batch(url: str, runs: int, concurrency: int, *, src: str | None = SRC) -> Batch:
    with tempfile.TemporaryDirectory(prefix="ruizn-bench-") as tmp:
        ws = workspace(tmp)
        goals = goals_file(ws, runs)
        logs = ws / "logs"
        began = time.perf_counter()
        subprocess.run(
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
                MODEL,
            ],
            cwd=ws,
            env=env_for(url, src=src, XDG_STATE_HOME=str(ws / "state")),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        wall = time.perf_counter() - began
        seconds, steps, mean = span(sorted(logs.glob("*/events.jsonl")))
        return Batch(
            f"batch, SQLite, concurrency {concurrency} (wall {wall:.1f}s)",
            runs,
            concurrency,
            seconds,
            steps,
            mean,
            wall,
        )


def bench_batch(url: str, runs: int, concurrency: int) -> str:
    return measure_batch(url, runs, concurrency).row()


def measure_single(url: str, runs: int, *, src: str | None = SRC) -> list[float]:
    """ms per step of `runs` single `ruizn run`s of a goal like the batch's, one at a time."""
    out = []
    with tempfile.TemporaryDirectory(prefix="ruizn-bench-1-") as tmp:
        ws = workspace(tmp)
        for i in range(runs):
            logs = ws / f"logs{i}"
            subprocess.run(
                [PY, "-m", "ruizn", "run", "--goal", f"bench {i}", "--log-dir", str(logs)],
                cwd=ws,
                env=env_for(url, src=src),
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            seconds, steps, _ = span(sorted(logs.glob("*/events.jsonl")))
            out.append(seconds / steps * 1000)
    return out


def worker(db: str, name: str, ws: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
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
            "4",
            "--dead-after",
            "2",
            "--log-dir",
            str(ws / name),
        ],
        cwd=ws,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def finished_logs(ws: Path, count: int, timeout: float) -> list[Path]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = {}
        for log in ws.glob("*/*/events.jsonl"):
            lines = log.read_text().splitlines()
            if lines and '"type":"run_finished"' in lines[-1]:
                done[log.parent.name] = log
        if len(done) >= count:
            return list(done.values())
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {count} runs")


def bench_postgres(url: str, db: str, runs: int) -> list[str]:
    out = []
    with tempfile.TemporaryDirectory(prefix="ruizn-bench-pg-") as tmp:
        ws = Path(tmp)
        (ws / "README.md").write_text("# bench\n")
        env = env_for(url, RUIZN_DB=db)
        workers = [worker(db, f"w{i}", ws, env) for i in (1, 2)]
        time.sleep(4)  # both workers up before any work exists
        subprocess.run(
            [PY, "-m", "ruizn", "submit", str(goals_file(ws, runs))],
            cwd=ws,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        logs = finished_logs(ws, runs, 600)
        seconds, steps, mean = span(logs)
        out.append(row("2 workers x 4, Postgres", runs, seconds, steps, concurrency=8, mean=mean))
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
    return out


def bench_takeover(db: str) -> str | None:
    """Kill a worker mid-run; time from the kill to the run going on elsewhere."""
    server, url = start_server("--tool-loop", "2", "--trickle", "0.05")
    try:
        with tempfile.TemporaryDirectory(prefix="ruizn-bench-to-") as tmp:
            ws = Path(tmp)
            (ws / "README.md").write_text("# bench\n")
            env = env_for(url, RUIZN_DB=db)
            victim = worker(db, "v1", ws, env)
            time.sleep(4)
            subprocess.run(
                [PY, "-m", "ruizn", "submit", "--goal", "takeover"],
                cwd=ws,
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 60
            while not list(ws.glob("v1/*/events.jsonl")) and time.monotonic() < deadline:
                time.sleep(0.05)
            # The heir starts once the victim holds the run, and is up before the kill.
            heir = worker(db, "h1", ws, env)
            while time.monotonic() < deadline:
                # Mid-run: past the tool turns, in the trickled final answer.
                if any(
                    log.read_text().count('"type":"llm_response"') >= 2
                    for log in ws.glob("v1/*/events.jsonl")
                ):
                    break
                time.sleep(0.05)
            os.kill(victim.pid, signal.SIGKILL)
            killed = time.time()
            log = finished_logs(ws, 1, 120)  # any finished copy
            resumed = [
                json.loads(line)
                for line in log[0].read_text().splitlines()
                if '"run_resumed"' in line
            ]
            heir.send_signal(signal.SIGTERM)
            heir.wait(20)
            if not resumed:
                return None  # the run ended before the kill (a slow start): try again
            return (
                f"| takeover (--dead-after 2, heir already up) |"
                f" {resumed[0]['ts'] - killed:.2f} s from kill -9 to run_resumed |"
            )
    finally:
        server.terminate()
        server.wait()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=None, help="runs a batch (48; --smoke 8)")
    parser.add_argument("--smoke", action="store_true", help="8 runs, no Postgres")
    parser.add_argument("--takeover-only", action="store_true")
    args = parser.parse_args()
    runs = args.runs or (8 if args.smoke else 48)
    server, url = start_server("--tool-loop", str(TOOL_TURNS))
    print("| what | runs | seconds | runs/s | steps/s | ms/step | per-run overhead |")
    print("|---|---|---|---|---|---|---|")
    try:
        if not args.takeover_only:
            single = measure_single(url, 3 if args.smoke else 5)
            shown = ", ".join(f"{ms:.1f}" for ms in single)
            print(
                f"| single `ruizn run`, one at a time | {len(single)} | | | |"
                f" {statistics.median(single):.1f} ({shown}) | |",
                flush=True,
            )
        for concurrency in () if args.takeover_only else (1, 4, 16):
            print(bench_batch(url, runs, concurrency), flush=True)
        if not args.smoke:
            try:
                with postgres_server() as db:
                    for line in () if args.takeover_only else bench_postgres(url, db, runs):
                        print(line, flush=True)
                    for _ in range(3):
                        taken = bench_takeover(db)
                        if taken is not None:
                            break
                    print(
                        taken or "| takeover | the run ended before the kill, 3 times |",
                        flush=True,
                    )
            except NoPostgres as exc:
                print(f"| Postgres | not measured: {exc} |")
    finally:
        server.terminate()
        server.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
