"""The `calls` section: thousands of read_file calls in one turn, the time from the answer to
the next request, and `ruizn replay --json` of the run's log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common import (
    CHECKS,
    RUIZN,
    Plan,
    Row,
    Scratch,
    Server,
    client_env,
    count,
    met,
    note,
    read_log,
    server_gaps,
    timed,
)
from replay import replay_startup, replay_walls

__all__ = ["calls_section"]


def calls_section(plan: Plan, ws: Path, data: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    results: dict[int, Any] = {}
    base = replay_startup(plan, ws, data)
    for n in plan.calls:
        note(f"{n:,} read_file calls in one turn (timeout {plan.calls_timeout:.0f} s)")
        logs = Scratch.dir("calls")
        with Server("--tool-calls", str(n)) as server:
            # No context limit: 10,000 results in one turn are more than a real model's
            # window holds, and this measures the turn's bookkeeping, not the clearing.
            cmd = [RUIZN, "run", "--goal", "many", "--max-steps", "2", "--max-context", "off"]
            cmd += ["--log-dir", str(logs)]
            proc = timed(cmd, ws, client_env(server.url), timeout=plan.calls_timeout)
            events = read_log(logs)
            done = count(events, "tool_call_finished")
            if proc.timed_out:
                turn = None
            else:
                CHECKS.check(done == n, f"{n:,} calls in one turn: {done:,} finished")
                gaps, _, _ = server_gaps(server, f"{n:,} calls in one turn", 2)
                turn = gaps[0]
        log = next(logs.glob("*/events.jsonl"))
        try:
            replay = replay_walls(log, ws, 1, timeout=plan.calls_timeout)[0]
            replay_shown = (
                f"> {plan.calls_timeout:.0f} s (killed)"
                if replay.timed_out
                else f"{len(events) / max(replay.wall - base, 1e-6):,.0f} events/s"
                f" (wall {replay.wall:.2f} s)"
            )
        except RuntimeError as exc:  # e.g. the log of a killed run
            replay_shown = f"failed: {exc}"[:120]
        results[n] = {"turn": turn, "wall": proc.wall, "done": done, "events": len(events)}
        results[n]["replay"] = replay_shown
        shown = (
            f"{turn:.2f} s"
            if turn is not None
            else f"> {plan.calls_timeout:.0f} s ({done:,} of {n:,} done, killed)"
        )
        rows.append(
            (
                f"{n:,} read_file calls in one turn: answer to next request (s)",
                shown,
                f"`replay --json` of its {len(events):,} events: {replay_shown}",
                "",
                "< 10 s at 10,000" if n == 10_000 else "",
                met(turn is not None and turn < 10) if n == 10_000 else "",
            )
        )
    data["calls"] = results
    return rows
