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

This module holds `main` and the table of sections; the harness is bench/common.py and each
section lives beside it: bench/tool_loop.py (loop, long), bench/tokens.py, bench/startup.py,
bench/first_token.py (first), bench/replay.py, bench/many_calls.py (calls) and
bench/fleet_rows.py (fleet, scale).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
from common import (
    BENCH,
    CHECKS,
    FULL,
    MISSED,
    PEERS_PY,
    PY,
    RUIZN,
    SMOKE,
    STARTED,
    Judge,
    Plan,
    Row,
    Scratch,
    note,
)
from fleet_rows import fleet_section, scale_section
from many_calls import calls_section
from replay import replay_section
from startup import startup_section
from tokens import token_section
from tool_loop import long_section, loop_section

__all__ = ["RESULTS", "SECTIONS", "machine", "main", "versions"]

RESULTS = BENCH / "results"
SECTIONS = ("loop", "long", "tokens", "startup", "first", "replay", "calls", "fleet", "scale")


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
        # Time to first token: bench/first_token.py, given the harness (bench/common.py).
        "first": lambda *a: __import__("first_token").section(common, *a),
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
