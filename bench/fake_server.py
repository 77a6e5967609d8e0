"""tests/fakeapi's server for the benchmark: its own CLI, plus two bench-only scripts.

    python bench/fake_server.py --tool-loop N | --long-answer N     (tests/fakeapi's own)
    python bench/fake_server.py --sse FILE                          FILE's bytes, in one write
    python bench/fake_server.py --tool-calls N [--path P]           N tool calls in one turn
    python bench/fake_server.py --bench-loop N                      --tool-loop N, lighter
    ... --latency-s S       every API request waits S seconds before its first byte

Prints `http://127.0.0.1:PORT` once listening and serves until SIGTERM/SIGINT. GET /_stats
gives each POST's request-line and last-byte times (run.py's clock for client time), DELETE
/_stats resets them between runs.

`--sse FILE` answers every request with FILE's bytes in one write (a `Recording`), so a
token-throughput figure measures the client alone, not the server's per-event writes.
`--tool-calls N` answers the first request with N `read_file` calls of P (README.md) in one
message, and any later request with "Done.": the many-calls-in-one-turn measure.
`--bench-loop N` is `--tool-loop N` with a fixed usage instead of the prompt-cache emulation,
whose cost grows with the history (90 ms a request at 2,000 steps). No gap holds server
time either way; this only makes the long runs shorter. These servers keep no request.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tests.fakeapi.server as fake  # noqa: E402  # after the path set-up
from tests.fakeapi.replies import (  # noqa: E402
    Recording,
    Reply,
    Script,
    Stream,
    Text,
    ToolUse,
    Usage,
    tool_loop,
)


def recording(sse: Path) -> Script:
    stem = sse.with_name(sse.name.removesuffix(".response.sse"))  # x.response.sse -> x
    reply = Recording(stem)
    return lambda body, index: reply


def many_calls(calls: int, path: str) -> Script:
    ask = Stream(
        (
            Text("Reading."),
            *(ToolUse(f"toolu_{i:06d}_many", "read_file", {"path": path}) for i in range(calls)),
        ),
        stop_reason="tool_use",
    )
    done = Stream((Text("Done."),))

    def reply(body: dict[str, Any], index: int) -> Reply:
        turns = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        return ask if turns == 0 else done

    return reply


def bench_loop(steps: int) -> Script:
    inner = tool_loop(steps)
    usage = Usage(input_tokens=20, output_tokens=30, cache_read_input_tokens=2_000)

    def reply(body: dict[str, Any], index: int) -> Reply:
        got = inner(body, index)
        return dataclasses.replace(got, usage=usage) if isinstance(got, Stream) else got

    return reply


def serve(script: Script, latency_s: float = 0.0) -> None:
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    # keep=False: no request is read back here (GET /_stats gives the timings), and a
    # 2,000-step run's kept bodies, gigabytes, slowed the client it served.
    server = fake.FakeAnthropic(script, keep=False, latency_s=latency_s).start()
    print(server.base_url, flush=True)
    while not done.wait(0.2):  # a timed wait, so the main thread runs the handler promptly
        pass
    server.stop()


def main(argv: list[str]) -> None:
    if not argv or argv[0] not in ("--sse", "--tool-calls", "--bench-loop"):
        fake.main(argv)
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sse", type=Path)
    parser.add_argument("--tool-calls", type=int)
    parser.add_argument("--path", default="README.md")
    parser.add_argument("--bench-loop", type=int)
    parser.add_argument("--latency-s", type=float, default=0.0)
    args = parser.parse_args(argv)
    if args.sse:
        serve(recording(args.sse), args.latency_s)
    elif args.bench_loop is not None:
        serve(bench_loop(args.bench_loop), args.latency_s)
    else:
        serve(many_calls(args.tool_calls, args.path), args.latency_s)


if __name__ == "__main__":
    main(sys.argv[1:])
