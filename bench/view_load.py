"""How long `ruizn view`'s page of a long run takes to open in a browser.

    python bench/view_load.py                 a 2,000-step run, 5 loads (about 40 s)
    python bench/view_load.py --steps 200 --loads 2

Makes a real run of --steps steps (the real runner, through `ruizn.Agent`, with an in-process
model that asks for a tool at every step, two at once every tenth step, ~1.6 KB a result),
writes its page with the `ruizn view` CLI, then opens the page --loads times in Debian's
headless Chromium (a fresh profile each time) and reads the page's own ready marker: the ms
from navigation start until the whole run is drawn and laid out (`data-ready-ms` on <html>,
set by the page's script after a forced layout). The target is under 2,000 ms at 2,000 steps.
Also shown: the time `ruizn view` takes, the page's size, and each Chromium process's wall
time (start-up and DOM dump included, for scale). Writes bench/results/view.json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.view.chromium import FLAGS, chromium_path  # noqa: E402 - after the path

RUIZN = shutil.which("ruizn", path=str(Path(sys.executable).parent)) or "ruizn"
TARGET_MS = 2000


def make_run(steps: int, folder: Path) -> Path:
    import ruizn
    from ruizn.effects.models.provider import ModelReply
    from ruizn.state import TextBlock, ToolUseBlock, Usage

    @ruizn.tool(read_only=True)
    def lookup(topic: str) -> str:
        """Look a topic up.

        Args:
            topic: What to look up.
        """
        return (f"Notes on {topic}: " + "lorem ipsum dolor sit amet " * 20 + "\n") * 3

    def model(request: dict[str, Any]) -> ModelReply:
        turns = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if turns >= steps - 1:
            return ModelReply(
                content=(TextBlock(text="All done."),),
                stop_reason="end_turn",
                usage=Usage(input_tokens=10, output_tokens=3),
            )
        calls = [
            ToolUseBlock(id=f"toolu_{turns:05d}_{i}", name="lookup", input={"topic": f"t{i}"})
            for i in range(2 if turns % 10 == 0 else 1)
        ]
        return ModelReply(
            content=(TextBlock(text=f"Step {turns}: looking up more notes."), *calls),
            stop_reason="tool_use",
            usage=Usage(input_tokens=1000, output_tokens=40, cache_read_input_tokens=900),
        )

    agent = ruizn.Agent(
        model=model, tools=[lookup], max_steps=steps, workspace=folder, log_dir=folder / "runs"
    )
    result = agent.run("a long run")
    assert str(result.status) == "success", result
    (log,) = (folder / "runs").glob("*/events.jsonl")
    return log


def load_once(browser: str, page: Path) -> tuple[int, float]:
    with tempfile.TemporaryDirectory(prefix="ruizn-bench-chromium-") as profile:
        began = time.perf_counter()
        done = subprocess.run(
            [browser, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
            capture_output=True,
            timeout=120,
            check=False,
            env={**os.environ, "HOME": profile},
        )
        wall = time.perf_counter() - began
    head = done.stdout[:2000].decode("utf-8", "replace")
    found = re.search(r'data-ready-ms="(\d+)"', head)
    if done.returncode != 0 or found is None or 'data-ready="1"' not in head:
        raise SystemExit(f"the page did not finish drawing: {done.stderr.decode()[-1000:]}")
    return int(found.group(1)), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--loads", type=int, default=5)
    args = parser.parse_args()
    browser = chromium_path()
    if browser is None:
        raise SystemExit("Debian's chromium is needed: apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="ruizn-bench-view-") as tmp:
        folder = Path(tmp)
        began = time.perf_counter()
        log = make_run(args.steps, folder)
        made = time.perf_counter() - began
        began = time.perf_counter()
        subprocess.run(
            [RUIZN, "view", str(log)], check=True, capture_output=True, cwd=folder, timeout=300
        )
        view_s = time.perf_counter() - began
        page = log.parent / "view.html"
        size = page.stat().st_size
        load_once(browser, page)  # warm-up: the first Chromium start reads its files from disk
        loads = [load_once(browser, page) for _ in range(args.loads)]
    ready = [ms for ms, _ in loads]
    walls = [wall for _, wall in loads]
    median = statistics.median(ready)
    verdict = "yes" if median < TARGET_MS else "**MISSED**"
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "python bench/view_load.py"
    if (args.steps, args.loads) != (2000, 5):
        command += f" --steps {args.steps} --loads {args.loads}"
    print(
        f"| page of a {args.steps:,}-step run: ms to drawn (data-ready-ms) |"
        f" {median:.0f} ({min(ready)}-{max(ready)}) | under {TARGET_MS:,} ms | {verdict} |"
    )
    print(
        f"\n{when} · `{command}` · page {size / 1e6:.1f} MB written by `ruizn view` in"
        f" {view_s:.2f} s · Chromium process wall {statistics.median(walls):.2f} s (start-up and"
        f" DOM dump included) · run made in {made:.1f} s · {platform.machine()},"
        f" {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    )
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "view.json").write_text(
        json.dumps(
            {
                "when": when,
                "steps": args.steps,
                "ready_ms": ready,
                "chromium_wall_s": walls,
                "view_s": view_s,
                "page_bytes": size,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
