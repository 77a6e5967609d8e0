"""The `tokens` section: one answer of many text deltas, deltas per second through ruizn's CLI
(provider, runner, writer, printer) against the raw SDK's text_stream, with the server writing
each event (live) or the same bytes in one write (pre-rendered).
"""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

from common import (
    BENCH,
    CHECKS,
    MODEL,
    PY,
    RUIZN,
    Plan,
    Row,
    Scratch,
    Server,
    abba,
    client_env,
    med,
    met,
    note,
    read_log,
    server_gaps,
    spread,
    timed,
)

__all__ = ["sse_file", "token_run_raw", "token_run_ruizn", "token_section"]


def sse_file(deltas: int) -> Path:
    """The long answer exactly as the server streams it, recorded from one bare request."""
    path = Scratch.dir("sse") / "long.response.sse"
    with Server("--long-answer", str(deltas)) as server:
        conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
        body = {
            "model": MODEL,
            "max_tokens": 4096,
            "stream": True,
            "messages": [{"role": "user", "content": "talk"}],
        }
        headers = {"content-type": "application/json"}
        conn.request("POST", "/v1/messages", body=json.dumps(body), headers=headers)
        path.write_bytes(conn.getresponse().read())  # http.client undoes the chunking
        conn.close()
    return path


def token_run_ruizn(server: Server, ws: Path, deltas: int) -> tuple[float, Path]:
    server.reset()
    logs = Scratch.dir("tokens")
    cmd = [RUIZN, "run", "--goal", "talk", "--max-steps", "1", "--log-dir", str(logs)]
    timed(cmd, ws, client_env(server.url))
    server_gaps(server, "ruizn, token pipeline", 1)
    stamps = [e["ts"] for e in read_log(logs) if e["type"] == "llm_token"]
    CHECKS.check(len(stamps) == deltas, f"ruizn logged {len(stamps)} tokens, not {deltas}")
    return (len(stamps) - 1) / (stamps[-1] - stamps[0]), next(logs.glob("*/events.jsonl"))


def token_run_raw(server: Server, ws: Path, deltas: int) -> float:
    server.reset()
    proc = timed([PY, str(BENCH / "raw_tokens.py")], ws, client_env(server.url), keep_stdout=True)
    server_gaps(server, "raw SDK, token pipeline", 1)
    out = json.loads(proc.stdout)
    CHECKS.check(out["deltas"] == deltas, f"the raw SDK saw {out['deltas']} deltas, not {deltas}")
    return float((out["deltas"] - 1) / out["span"])


def token_section(plan: Plan, ws: Path, data: dict[str, Any]) -> list[Row]:
    deltas = plan.token_deltas
    rows: list[Row] = []
    for mode in plan.token_modes:
        args = ["--long-answer", str(deltas)]
        if mode == "pre-rendered":
            args = ["--sse", str(sse_file(deltas))]
        rates: dict[str, list[float]] = {"ruizn": [], "raw SDK": []}
        with Server(*args) as server:
            for side in abba(list(rates), plan.token_reps):
                note(f"token pipeline ({mode}): {side}")
                if side == "ruizn":
                    rate, log = token_run_ruizn(server, ws, deltas)
                    data["token_log"] = str(log)
                else:
                    rate = token_run_raw(server, ws, deltas)
                rates[side].append(rate)
        ratio = med(rates["ruizn"]) / med(rates["raw SDK"])
        what = "server writes each event" if mode == "live" else "pre-rendered, one write"
        rows.append(
            (
                f"token pipeline, {deltas:,} deltas, {what} (deltas/s)",
                spread(rates["ruizn"], "{:,.0f}"),
                f"raw SDK text_stream {spread(rates['raw SDK'], '{:,.0f}')}",
                f"{ratio:.2f}x",
                "≥ 1.0x",
                met(ratio >= 1.0),
            )
        )
        data.setdefault("tokens", {})[mode] = rates
    return rows
