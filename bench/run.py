"""ruizn's benchmark: its overhead on top of the model, side by side with the alternatives.

    python bench/run.py            the full run (a few minutes on 2 cores)
    python bench/run.py --smoke    a few steps of each measure, for CI

Everything talks to a zero-latency local Messages API (tests/fakeapi) started as a separate
process, so its time does not compete with the client's for the GIL; the time the server
spends on each request is read back from it and subtracted. Each figure is the median of
several runs (min and max shown) and is compared with a baseline measured in the same run.
Prints a Markdown table and writes it to bench/results/latest.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ruizn.effects.logfile import replay_file  # noqa: E402  # after the path set-up
from ruizn.events import LlmCallStarted, LlmResponse, LlmToken, RunFinished, RunStarted  # noqa: E402
from ruizn.reducers import reduce, start  # noqa: E402
from ruizn.request import build_request  # noqa: E402
from ruizn.serde import decode, encode  # noqa: E402
from ruizn.state import Status, TextBlock, Usage  # noqa: E402

PY = sys.executable
PEERS_PY = os.environ.get("RUIZN_BENCH_PEERS_PYTHON", "")
Row = tuple[str, str, str, str, str, str]


class Server:
    """The fake API in its own process."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [PY, "-m", "tests.fakeapi", *args], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def stats(self) -> list[float]:
        with urllib.request.urlopen(self.url + "/_stats") as response:
            seconds: list[float] = json.load(response)["handler_seconds"]
        return seconds

    def reset(self) -> None:
        request = urllib.request.Request(self.url + "/_stats", method="DELETE")
        urllib.request.urlopen(request).close()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


# A realistic agent system prompt (~1,600 tokens): the API caches nothing under 1,024, and
# the share of a prompt that a cache can serve depends on how big the fixed prefix is.
SYSTEM_TEXT = "\n".join(
    f"Rule {i}: read the files you need with read_file before you answer; quote paths exactly;"
    " keep answers short; say when a file is missing or cut off; never invent content."
    for i in range(1, 41)
)
SYSTEM_FILE = Path(tempfile.mkdtemp(prefix="ruizn-bench-")) / "system.txt"
SYSTEM_FILE.write_text(SYSTEM_TEXT, encoding="utf-8")


def env_for(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "RUIZN_"))}
    env.update(
        ANTHROPIC_BASE_URL=url,
        ANTHROPIC_API_KEY="sk-bench",
        NO_COLOR="1",
        RUIZN_BENCH_SYSTEM=str(SYSTEM_FILE),
    )
    return env


def timed(
    cmd: Sequence[str], cwd: Path, env: dict[str, str] | None = None
) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (KiB) and stderr of one command, stdout to /dev/null."""
    began = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - began
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 3):
        raise RuntimeError(f"{Path(cmd[1]).name} exited {code}: {stderr.strip()[-200:]}")
    return wall, usage.ru_maxrss, stderr


def spread(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    return (
        f"{fmt.format(statistics.median(values))} "
        f"({fmt.format(min(values))}-{fmt.format(max(values))})"
    )


def workspace() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="ruizn-bench-"))
    (folder / "README.md").write_text("# Bench\n\nA small file read every step.\n")
    return folder


def ruizn_cmd(steps: int, log_dir: Path) -> list[str]:
    return [
        PY,
        "-m",
        "ruizn",
        "run",
        "--goal",
        "loop",
        "--max-steps",
        str(steps),
        "--log-dir",
        str(log_dir),
        "--system",
        SYSTEM_TEXT,
    ]


def ruizn_loop_seconds(log_dir: Path, stderr: str) -> float:
    """From the run's own log: first model call to the last event (start-up excluded)."""
    del stderr
    log = max(log_dir.glob("*/events.jsonl"), key=lambda p: p.stat().st_mtime)
    lines = log.read_text(encoding="utf-8").splitlines()
    first = next(json.loads(line)["ts"] for line in lines if '"llm_call_started"' in line)
    return float(json.loads(lines[-1])["ts"]) - first


def stderr_seconds(log_dir: Path, stderr: str) -> float:
    del log_dir
    return float(stderr.strip().splitlines()[-1])


Loop = tuple[Callable[[int, Path], list[str]], Callable[[Path, str], float]]
RUIZN: Loop = (ruizn_cmd, ruizn_loop_seconds)
RAW: Loop = (lambda n, _: [PY, str(ROOT / "bench" / "raw_loop.py"), str(n)], stderr_seconds)


def per_step(server: Server, loop: Loop, steps: int, runs: int, ws: Path) -> list[float]:
    """ms of client work per model call: the loop's own time minus the server's."""
    command, seconds_of = loop
    env = env_for(server.url)
    out = []
    for _ in range(runs):
        server.reset()
        logs = Path(tempfile.mkdtemp(prefix="ruizn-logs-"))
        _, _, stderr = timed(command(steps, logs), ws, env)
        served = server.stats()
        out.append((seconds_of(logs, stderr) - sum(served)) / len(served) * 1000)
    return out


def measure_steps(smoke: bool, ws: Path) -> tuple[list[Row], dict[str, Any]]:
    server = Server("--tool-loop", "100000")
    runs = 2 if smoke else 5
    rows: list[Row] = []
    extra: dict[str, Any] = {}
    try:
        for steps in (5,) if smoke else (50, 200):
            ours = per_step(server, RUIZN, steps, runs, ws)
            raw = per_step(server, RAW, steps, runs, ws)
            ratio = statistics.median(ours) / statistics.median(raw)
            rows.append(
                (
                    f"per-step overhead, {steps} steps (ms/step)",
                    spread(ours),
                    f"raw SDK {spread(raw)}",
                    f"{ratio:.2f}x",
                    "<= 1.2x raw SDK",
                    "yes" if ratio <= 1.2 else "MISSED",
                )
            )
            for peer in ("pydantic_ai", "langgraph"):
                rows.append(
                    peer_row(peer, server, steps=steps, runs=runs, ws=ws, ours=ours, smoke=smoke)
                )
        logs = Path(tempfile.mkdtemp(prefix="ruizn-logs-"))
        server.reset()
        growth_steps = 20 if smoke else 200
        _, rss, _ = timed(ruizn_cmd(growth_steps, logs), ws, env_for(server.url))
        extra["rss_run"] = rss
        extra["growth_log"] = next(logs.glob("*/events.jsonl"))
        extra["server_seconds"] = server.stats()
    finally:
        server.stop()
    return rows, extra


def peer_row(
    peer: str, server: Server, *, steps: int, runs: int, ws: Path, ours: list[float], smoke: bool
) -> Row:
    name = f"  vs {peer.replace('_', '-')}, {steps} steps (ms/step)"
    target = f"lower than {peer.replace('_', '-')}"
    if smoke or not PEERS_PY:
        why = "smoke run" if smoke else "set RUIZN_BENCH_PEERS_PYTHON (bench/README.md)"
        return (name, spread(ours), "not measured", "", target, why)
    script = ROOT / "bench" / f"peer_{peer}.py"
    loop: Loop = (lambda n, _: [PEERS_PY, str(script), str(n)], stderr_seconds)
    try:
        theirs = per_step(server, loop, steps, runs, ws)
    except RuntimeError as exc:
        return (name, spread(ours), "not measured", "", target, str(exc)[:80])
    ratio = statistics.median(ours) / statistics.median(theirs)
    return (
        name,
        spread(ours),
        f"{peer} {spread(theirs)}",
        f"{ratio:.2f}x",
        target,
        "yes" if ratio < 1 else "MISSED",
    )


def growth(log: Path, server_seconds: list[float]) -> Row:
    """Client time of late steps vs early ones, net of request serialisation."""
    lines = log.read_text(encoding="utf-8").splitlines()
    events = [decode(line) for line in lines]
    state = start(events[0])  # type: ignore[arg-type]
    ends: list[float] = [events[0].ts]
    serialise: list[float] = []
    for event in events[1:]:
        if isinstance(event, LlmCallStarted):
            request = build_request(state)
            began = time.perf_counter()
            json.dumps(request)
            serialise.append(time.perf_counter() - began)
        state = reduce(state, event)
        if event.TAG == "tool_call_finished":
            ends.append(event.ts)
    durations = [b - a for a, b in itertools.pairwise(ends)]
    net = [d - s - srv for d, s, srv in zip(durations, serialise, server_seconds, strict=False)]
    n = len(net)
    early = statistics.median(net[7:12] if n >= 12 else net[1:3])
    late = statistics.median(net[-6:-1])
    ratio = late / early
    label = f"growth: step {n} vs step 10 (ms, net)"
    return (
        label,
        f"{late * 1000:.2f}",
        f"{early * 1000:.2f}",
        f"{ratio:.2f}x",
        "≤ 1.5x",
        "yes" if ratio <= 1.5 else "MISSED",
    )


def startup(smoke: bool, ws: Path) -> list[Row]:
    runs = 3 if smoke else 10
    logs = Path(tempfile.mkdtemp(prefix="ruizn-logs-"))
    timed(
        [
            PY,
            "-m",
            "ruizn",
            "run",
            "--model",
            "test",
            "--goal",
            "README.md",
            "--log-dir",
            str(logs),
        ],
        ws,
    )
    run_id = next(logs.iterdir()).name

    def wall(cmd: list[str]) -> list[float]:
        return [timed(cmd, ws)[0] * 1000 for _ in range(runs)]

    click = wall([PY, "-c", "import click"])
    bare = wall([PY, "-c", "pass"])
    rows: list[Row] = []
    cases = {
        "--help": [PY, "-m", "ruizn", "--help"],
        "replay": [PY, "-m", "ruizn", "replay", run_id, "--log-dir", str(logs)],
        "runs": [PY, "-m", "ruizn", "runs", "--log-dir", str(logs)],
        "run --model test": [
            PY,
            "-m",
            "ruizn",
            "run",
            "--model",
            "test",
            "--goal",
            "读取当前目录下的 README.md",
            "--log-dir",
            str(logs),
        ],
    }
    for name, cmd in cases.items():
        ours = wall(cmd)
        ratio = statistics.median(ours) / statistics.median(click)
        target = "≤ 2x import click" if name == "--help" else "(no target)"
        met = ("yes" if ratio <= 2 else "MISSED") if name == "--help" else ""
        rows.append(
            (
                f"start-up: ruizn {name} (ms)",
                spread(ours, "{:.0f}"),
                f"import click {spread(click, '{:.0f}')}",
                f"{ratio:.2f}x",
                target,
                met,
            )
        )
    rows.append(("start-up: python -c pass (ms)", spread(bare, "{:.0f}"), "", "", "", ""))
    heavy = []
    for name in ("--help", "replay", "runs", "show"):
        args = {
            "--help": ["--help"],
            "replay": ["replay", run_id],
            "runs": ["runs"],
            "show": ["show", run_id],
        }[name]
        if name != "--help":
            args += ["--log-dir", str(logs)]
        code = (
            f"import sys, runpy; sys.argv=['ruizn', *{args!r}]\n"
            "try: runpy.run_module('ruizn', run_name='__main__')\n"
            "except SystemExit: pass\n"
            "print('anthropic' in sys.modules, file=sys.stderr)"
        )
        out = subprocess.run([PY, "-c", code], cwd=ws, capture_output=True, text=True, check=False)
        if out.stderr.strip().splitlines()[-1] == "True":
            heavy.append(name)
    rows.append(
        (
            "--help/replay/runs/show import anthropic?",
            "no" if not heavy else ", ".join(heavy),
            "",
            "",
            "no",
            "yes" if not heavy else "MISSED",
        )
    )
    return rows


def synthetic_log(path: Path, events: int) -> None:
    tokens = events - 4
    with path.open("w", encoding="utf-8") as f:
        f.write(
            encode(
                RunStarted(
                    seq=1,
                    ts=0.0,
                    run_id="20260101-000000-000000",
                    goal="g",
                    model="m",
                    max_steps=1,
                    max_tokens=1,
                    system="s",
                )
            )
            + "\n"
        )
        f.write(encode(LlmCallStarted(seq=2, ts=0.0, step=1)) + "\n")
        line = encode(LlmToken(seq=0, ts=1767225600.123, text="tok "))
        head, tail = line.split('"seq":0')
        f.writelines(f'{head}"seq":{i}{tail}\n' for i in range(3, tokens + 3))
        f.write(
            encode(
                LlmResponse(
                    seq=tokens + 3, ts=0.0, content=(TextBlock(text="x"),), stop_reason="end_turn"
                )
            )
            + "\n"
        )
        f.write(
            encode(
                RunFinished(
                    seq=tokens + 4,
                    ts=0.0,
                    status=Status.SUCCESS,
                    steps=1,
                    elapsed=0.0,
                    usage=Usage(),
                )
            )
            + "\n"
        )


def replay_rows(smoke: bool, ws: Path) -> tuple[list[Row], int]:
    sizes = (10_000, 20_000) if smoke else (10_000, 100_000, 1_000_000)
    folder = Path(tempfile.mkdtemp(prefix="ruizn-replay-"))
    seconds: dict[int, float] = {}
    rows: list[Row] = []
    for size in sizes:
        path = folder / f"{size}.jsonl"
        synthetic_log(path, size)
        times = []
        for _ in range(3):  # the 1M log too: one sample was once 20% off under load
            began = time.perf_counter()
            replayed = replay_file(path)
            times.append(time.perf_counter() - began)
            assert replayed.events == size
        seconds[size] = statistics.median(times)
        rate = [size / t for t in times]
        rows.append(
            (
                f"replay {size:,} events (events/s)",
                spread(rate, "{:,.0f}"),
                "",
                "",
                "≥ 100,000/s",
                "yes" if min(rate) >= 100_000 else "MISSED",
            )
        )
    small, large = sizes[-2], sizes[-1]
    linear = (seconds[large] / seconds[small]) / (large / small)
    rows.append(
        (
            f"replay linearity: t({large:,}) / t({small:,}) / {large // small}",
            f"{linear:.2f}",
            "",
            "",
            "≤ 1.10",
            "yes" if linear <= 1.10 else "MISSED",
        )
    )
    _, rss, _ = timed([PY, "-m", "ruizn", "replay", "--json", str(folder / f"{large}.jsonl")], ws)
    return rows, rss


def token_pipeline(smoke: bool, ws: Path) -> list[Row]:
    deltas = 2_000 if smoke else 20_000
    server = Server("--long-answer", str(deltas))
    env = env_for(server.url)
    ours, raw = [], []
    try:
        for _ in range(2 if smoke else 5):
            logs = Path(tempfile.mkdtemp(prefix="ruizn-logs-"))
            timed(ruizn_cmd(1, logs), ws, env)
            log = next(logs.glob("*/events.jsonl"))
            stamps = [
                json.loads(line)["ts"]
                for line in log.read_text().splitlines()
                if '"type":"llm_token"' in line
            ]
            ours.append(len(stamps) / (stamps[-1] - stamps[0]))
            out = subprocess.run(
                [PY, str(ROOT / "bench" / "raw_tokens.py")],
                cwd=ws,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            raw.append(float(out.stdout.strip()))
    finally:
        server.stop()
    ratio = statistics.median(ours) / statistics.median(raw)
    return [
        (
            f"token pipeline, {deltas:,} deltas (deltas/s)",
            spread(ours, "{:,.0f}"),
            spread(raw, "{:,.0f}"),
            f"{ratio:.2f}x",
            "≥ 0.9x raw SDK",
            "yes" if ratio >= 0.9 else "MISSED",
        )
    ]


def cache_row(log: Path) -> Row:
    ratios = []
    for line in log.read_text().splitlines():
        if '"type":"llm_response"' in line:
            usage = json.loads(line)["usage"]
            total = (
                usage["input_tokens"]
                + usage["cache_creation_input_tokens"]
                + usage["cache_read_input_tokens"]
            )
            ratios.append(usage["cache_read_input_tokens"] / total)
    later = ratios[2:20]
    return (
        "cache reads / input tokens, steps 3-20",
        f"min {min(later):.1%}",
        f"median {statistics.median(later):.1%}",
        "",
        "≥ 90%",
        "yes" if min(later) >= 0.9 else "MISSED",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a few steps of each, for CI")
    smoke = parser.parse_args(argv).smoke
    began = time.perf_counter()
    ws = workspace()
    rows, extra = measure_steps(smoke, ws)
    rows.append(growth(extra["growth_log"], extra["server_seconds"]))
    rows.append(cache_row(extra["growth_log"]))
    rows += startup(smoke, ws)
    replayed, rss_replay = replay_rows(smoke, ws)
    rows += replayed
    rows += token_pipeline(smoke, ws)
    bare_rss = timed([PY, "-c", "pass"], ws)[1]
    rows.append(
        (
            f"peak RSS: ruizn run, {replay_file(extra['growth_log']).state.step} steps (MB)",
            f"{extra['rss_run'] / 1024:.0f}",
            f"python -c pass {bare_rss / 1024:.0f}",
            "",
            "bounded",
            "",
        )
    )
    rows.append(
        (
            "peak RSS: ruizn replay --json of the largest log (MB)",
            f"{rss_replay / 1024:.0f}",
            f"python -c pass {bare_rss / 1024:.0f}",
            "",
            "bounded (streams the file)",
            "",
        )
    )
    table = ["| measure | ruizn | baseline | ratio | target | met? |", "|---|---|---|---|---|---|"]
    table += ["| " + " | ".join(row) + " |" for row in rows]
    mode = "smoke" if smoke else "full"
    text = "\n".join(table) + f"\n\n({mode} run, {time.perf_counter() - began:.0f} s)\n"
    print(text)
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / ("smoke.md" if smoke else "latest.md")).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
