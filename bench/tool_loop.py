"""The `loop` and `long` sections: ruizn's client time per step of a tool loop against the raw
SDK's loop and the peers' (ABBA rounds), its growth over a run and peak RSS; and one long run's
late steps against its early ones (long_unfinished: the row of a run killed at its timeout).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common import (
    BENCH,
    CHECKS,
    MODEL,
    PEERS_PY,
    PY,
    RUIZN,
    STAMP_SLACK,
    SYSTEM_TEXT,
    Plan,
    Row,
    Scratch,
    Server,
    TimedOut,
    abba,
    base_env,
    client_env,
    count,
    med,
    met,
    note,
    read_log,
    server_gaps,
    spread,
    timed,
    within,
)

__all__ = [
    "LOOP_TARGETS",
    "PEERS",
    "PEER_PIP",
    "RAW_GAP_SUSPECT_MS",
    "LoopRun",
    "long_section",
    "long_unfinished",
    "loop_config",
    "loop_section",
    "peer_problem",
    "ruizn_tools",
    "run_ruizn_loop",
    "run_script_loop",
]

PEERS = {
    "pydantic-ai": ("peer_pydantic_ai.py", "import pydantic_ai.models.anthropic"),
    "LangGraph": ("peer_langgraph.py", "import langgraph.prebuilt, langchain_anthropic"),
}
PEER_PIP = "pip install 'pydantic-ai-slim[anthropic]' langgraph langchain-anthropic"
# The raw SDK loop's gap is a few ms on any machine this runs on; far above that, the figure
# is mostly not client time (load, a sleeping SDK, a harness bug): say so beside the table.
RAW_GAP_SUSPECT_MS = 25.0
# Client time per step against the raw SDK loop's, by steps (1.0x elsewhere).
LOOP_TARGETS = {50: 0.7, 200: 0.5}


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
