"""The `startup` section: `ruizn --help` and `ruizn runs` (with and without its cache of rows)
against `python -c 'import click'`, and whether `ruizn --help` imports the SDK.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from common import (
    PY,
    RUIZN,
    Judge,
    Plan,
    Row,
    Scratch,
    abba,
    base_env,
    med,
    met,
    note,
    spread,
    timed,
)

__all__ = ["startup_section"]


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
