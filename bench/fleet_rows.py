"""The `fleet` and `scale` sections: `ruizn batch` on SQLite (bench/fleet.py's measures) against
single runs and, with RUIZN_BENCH_BASE_SRC, an older checkout in the same rounds; and fleets at
scale (bench/fleet_scale.py's rows).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import asdict
from pathlib import Path
from typing import Any

from common import PY, SMOKE, Plan, Row, abba, base_env, med, met, note, spread

__all__ = ["BASE_SRC", "FLEET16_BEFORE", "fleet_section", "scale_section"]

# The fleet's rows can be judged against an older checkout's src/ run in the same rounds
# (concurrency 16 at 3x the steps/s of the base commit dd30d61), e.g.
# `git worktree add /tmp/ruizn-base dd30d61` and RUIZN_BENCH_BASE_SRC=/tmp/ruizn-base/src.
BASE_SRC = os.environ.get("RUIZN_BENCH_BASE_SRC", "")
# Steps/s of `ruizn batch` at concurrency 16 at the base commit dd30d61 on this machine:
# shown beside the row when no baseline runs in the same rounds.
FLEET16_BEFORE = 57.0


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
