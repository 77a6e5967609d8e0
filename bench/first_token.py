"""Time to first token: from exec to the first streamed byte of the answer on stdout, for
`ruizn run` and for a minimal script on the `anthropic` SDK (`client.messages.stream`, print
the first text delta), the same goal and model against the fake API with a latency of
LATENCY_S before the first byte of every answer (Messages and Models API alike), as a real
endpoint has.

ruizn is timed with the Models API's answer about its model already kept in its state folder
("warm", as every run after the first of the day) and without ("cold": a fresh state folder,
so the run asks the Models API first, one more round trip). All three sides run in ABBA
order in the same rounds. bench/run.py calls `section` (`--only first`); the figures are
each side's median (min-max) over the rounds.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

# About what a request to the real API waits for its first byte from a nearby machine.
LATENCY_S = 0.15
TARGET = 1.1
SDK_SCRIPT = """\
import anthropic
client = anthropic.Anthropic()
with client.messages.stream(
    model=MODEL, max_tokens=1024, messages=[{"role": "user", "content": GOAL}]
) as stream:
    for text in stream.text_stream:
        print(text, end="", flush=True)
        break
"""
GOAL = "Say hello."


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) a live process has used, from /proc (0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def first_byte(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 120
) -> tuple[float, float]:
    """Seconds from exec to the command's first byte on stdout, and the CPU seconds it had
    used by then (on a loaded machine wall time is mostly waiting for a core); the command
    then runs to its end untimed, and must end with 0."""
    began = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    first = proc.stdout.read(1)
    seconds = time.perf_counter() - began
    cpu = cpu_seconds(proc.pid)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RuntimeError(f"{Path(cmd[1]).name}: no end within {timeout:.0f} s") from None
    if proc.returncode != 0 or not first:
        tail = (err.decode(errors="replace").strip().splitlines() or ["(no stderr)"])[-1]
        raise RuntimeError(f"{Path(cmd[1]).name} exited {proc.returncode}: {tail[:200]}")
    return seconds, cpu


def section(bench: Any, plan: Any, ws: Path, data: dict[str, Any]) -> list[tuple[str, ...]]:
    """The "first token" rows. `bench` is bench/common.py's module, the harness bench/run.py
    runs on (its server, environment, ABBA order, checks and formatting)."""
    smoke = not bench.Judge.on  # a smoke run checks the harness: one round, few warm-ups
    reps = 1 if smoke else plan.startup_reps
    logs = bench.Scratch.dir("first-token-logs")
    warm_state = bench.Scratch.dir("first-token-state")
    script = ws.parent / "sdk_first_token.py"
    script.write_text(f"MODEL = {bench.MODEL!r}\nGOAL = {GOAL!r}\n{SDK_SCRIPT}")
    run = [bench.RUIZN, "run", "--model", bench.MODEL, "--log-dir", str(logs), GOAL]
    with bench.Server("--tool-loop", "0", "--latency-s", str(LATENCY_S)) as server:
        env = bench.client_env(server.url)

        def cold_env() -> dict[str, str]:
            return {**env, "RUIZN_STATE_DIR": str(bench.Scratch.dir("first-token-cold"))}

        sides = {
            "ruizn, facts kept": lambda: (run, {**env, "RUIZN_STATE_DIR": str(warm_state)}),
            "ruizn, cold": lambda: (run, cold_env()),
            "SDK script": lambda: ([bench.PY, str(script)], env),
        }
        # Untimed, once each: the page cache, .pyc files, and the warm side's kept answer.
        for name, side in sides.items():
            if not smoke or name == "ruizn, facts kept":
                cmd, side_env = side()
                first_byte(cmd, ws, side_env)
        bench.note("first token")
        gets = {name: 0 for name in sides}
        times: dict[str, list[float]] = {name: [] for name in sides}
        cpus: dict[str, list[float]] = {name: [] for name in sides}
        for name in bench.abba(list(sides), reps):
            server.reset()
            cmd, side_env = sides[name]()
            wall, cpu = first_byte(cmd, ws, side_env)
            times[name].append(wall * 1000)
            cpus[name].append(cpu * 1000)
            stats = server._call("GET")
            bench.CHECKS.check(
                stats["requests"] == 1, f"first token, {name}: one Messages request a run"
            )
            gets[name] += stats["model_gets"]
    bench.CHECKS.check(gets["ruizn, facts kept"] == 0, "first token: kept facts asked no API")
    bench.CHECKS.check(gets["ruizn, cold"] == reps, "first token: a cold run asks once")
    bench.CHECKS.check(gets["SDK script"] == 0, "first token: the SDK script asks no Models API")
    data["first_token_ms"] = times
    data["first_token_cpu_ms"] = cpus
    cpu_ratio = bench.med(cpus["ruizn, facts kept"]) / max(bench.med(cpus["SDK script"]), 1e-9)
    sdk = bench.med(times["SDK script"])
    baseline = f"SDK script {bench.spread(times['SDK script'], '{:.0f}')}"
    warm = bench.med(times["ruizn, facts kept"]) / sdk
    cold = bench.med(times["ruizn, cold"]) / sdk
    ms = int(LATENCY_S * 1000)
    return [
        (
            f"first token, exec to first byte, {ms} ms latency, model facts kept (ms)",
            bench.spread(times["ruizn, facts kept"], "{:.0f}"),
            baseline,
            f"{warm:.2f}x",
            f"≤ {TARGET}x",
            bench.met(warm <= TARGET),
        ),
        (
            f"first token, {ms} ms latency, no kept facts (asks the Models API first) (ms)",
            bench.spread(times["ruizn, cold"], "{:.0f}"),
            baseline,
            f"{cold:.2f}x",
            "",
            "",
        ),
        (
            "first token, CPU time used by the first byte, model facts kept (ms)",
            bench.spread(cpus["ruizn, facts kept"], "{:.0f}"),
            f"SDK script {bench.spread(cpus['SDK script'], '{:.0f}')}",
            f"{cpu_ratio:.2f}x",
            "",
            "",
        ),
    ]
