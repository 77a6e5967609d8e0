"""What the durability points cost: a 200-step loop of writes with and without fsync.

A step is 54 events (a call start, 50 tokens, a response, a tool call start and finish), as
ruizn writes them, through the real EventWriter: one fdatasync a step, started behind the
loop at the call's start, and waited for before the response is written. (The tool here
is read-only: a tool that changes things adds one fdatasync, waited for, before it runs.)
Prints the median ms per step of 5 runs for each mode, and the difference.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from ruizn.effects.runlog.writer import EventWriter
from ruizn.events import LlmCallStarted, LlmResponse, LlmToken, ToolCallFinished, ToolCallStarted
from ruizn.state import TextBlock, ToolResult, ToolUseBlock

STEPS, RUNS, TOKENS = 200, 5, 50


def _step(write: EventWriter, seq: int) -> int:
    events = [LlmCallStarted(seq=seq, ts=0.0, step=1)]
    events += [LlmToken(seq=seq + 1 + i, ts=0.0, text="tok ") for i in range(TOKENS)]
    seq += 1 + TOKENS
    call = ToolUseBlock(id="t", name="read_file", input={"path": "README.md"})
    events += [
        LlmResponse(
            seq=seq, ts=0.0, content=(TextBlock(text="x" * 200), call), stop_reason="tool_use"
        ),
        ToolCallStarted(seq=seq + 1, ts=0.0, id="t", name="read_file", input=call.input),
        ToolCallFinished(seq=seq + 2, ts=0.0, id="t", result=ToolResult.ok("y" * 1000)),
    ]
    for event in events:
        write(event)
    return seq + 3


def ms_per_step(fsync: bool, folder: Path) -> list[float]:
    times = []
    for run in range(RUNS):
        writer = EventWriter.new(folder / f"{fsync}-{run}" / "events.jsonl", fsync=fsync)
        began, seq = time.perf_counter(), 1
        for _ in range(STEPS):
            seq = _step(writer, seq)
        times.append((time.perf_counter() - began) / STEPS * 1000)
        writer.close()
    return times


def main() -> None:
    # A folder on the working disk, not tmpfs, so fsync does real work.
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        flush = ms_per_step(False, Path(tmp))
        synced = ms_per_step(True, Path(tmp))
    for label, times in (("flush only", flush), ("flush + fsync", synced)):
        print(
            f"{label:14} {statistics.median(times):.3f} ms/step"
            f" (min {min(times):.3f}, max {max(times):.3f})"
        )
    print(f"fsync costs   {statistics.median(synced) - statistics.median(flush):.3f} ms/step")


if __name__ == "__main__":
    main()
