"""Per-step client time: ruizn's provider against the raw SDK's `messages.stream` loop.

    python bench/provider_client_time.py [--steps 50 200] [--runs 4] [--profile FILE]

Both loops drive the same tool loop on tests/fakeapi (run in its own process, so the
server's CPU is not the client's), with the same system prompt, tool and tool result:

- raw: `messages.stream` + `get_final_message`, history kept as dicts (bench/raw_loop.py);
- ruizn: `plan_request(state)` -> `AnthropicProvider.stream` -> the ModelReply's blocks
  appended to the immutable history (what the runner does, minus the log);
- ruizn-dict: the same with `build_request(state)`, the dict today's runner passes.

Client time of a step = the process's CPU time over the step (time.process_time: the
client is one thread; the server is another process). Wall time is printed too. Loops run
in ABBA order; each figure is the median over runs of the median step, with min-max.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# RUIZN_BENCH_SRC: another checkout's src/ (e.g. the provider before a change), for "before".
sys.path.insert(0, os.environ.get("RUIZN_BENCH_SRC", str(ROOT / "src")))

import anthropic  # noqa: E402
from attrs import evolve  # noqa: E402

from ruizn.effects.models.anthropic import AnthropicProvider  # noqa: E402
from ruizn.effects.models.provider import ModelReply  # noqa: E402
from ruizn.request import build_request  # noqa: E402

try:
    from ruizn.request import plan_request
except ImportError:  # an older checkout: only the dict path exists
    plan_request = None  # type: ignore[assignment]
from ruizn.state import ExecutionContext, Message, TextBlock, ToolResultBlock, ToolUseBlock  # noqa: E402

KEY = "sk-bench"
EPHEMERAL = {"type": "ephemeral"}
SYSTEM = "You are a careful assistant. " * 60  # ~1.7 KB, cached like a real system prompt
RESULT = (ROOT / "README.md").read_text(encoding="utf-8")[:2000]
TOOL = {
    "name": "read_file",
    "description": "Read a UTF-8 text file in the workspace.",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
}
Steps = list[tuple[float, float]]  # (cpu seconds, wall seconds) per step


async def raw_loop(base_url: str, steps: int) -> Steps:
    client = anthropic.AsyncAnthropic(base_url=base_url, api_key=KEY, max_retries=0)
    system = [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]
    tools = [{**TOOL, "cache_control": EPHEMERAL}]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "loop"}]}
    ]
    out: Steps = []
    for _ in range(steps + 1):
        cpu, wall = time.process_time(), time.perf_counter()
        users = [m for m in messages if m["role"] == "user"]
        for m in users:
            m["content"][-1].pop("cache_control", None)
        for m in users[-2:]:
            m["content"][-1]["cache_control"] = EPHEMERAL
        async with client.messages.stream(
            model="claude-sonnet-5-5",
            max_tokens=4096,
            system=system,
            tools=tools,
            messages=messages,
        ) as s:
            async for _text in s.text_stream:
                pass
            message = await s.get_final_message()
        content = [b.model_dump(exclude_none=True) for b in message.content]
        messages.append({"role": "assistant", "content": content})
        calls = [b for b in message.content if b.type == "tool_use"]
        out.append((time.process_time() - cpu, time.perf_counter() - wall))
        if not calls:
            break
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": c.id, "content": RESULT} for c in calls
                ],
            }
        )
    await client.close()
    return out


async def ruizn_loop(base_url: str, steps: int, *, plan: bool) -> Steps:
    provider = AnthropicProvider(api_key=KEY, base_url=base_url)
    state = ExecutionContext(
        run_id="bench",
        goal="loop",
        model="claude-sonnet-5-5",
        max_steps=steps + 1,
        system=SYSTEM,
        tools=(TOOL,),
        messages=(Message(role="user", content=(TextBlock(text="loop"),)),),
    )
    out: Steps = []
    for _ in range(steps + 1):
        cpu, wall = time.process_time(), time.perf_counter()
        request: Any = plan_request(state) if plan else build_request(state)
        reply: ModelReply | None = None
        async for item in provider.stream(request):
            if not isinstance(item, str):
                reply = item
        assert reply is not None
        messages = (*state.messages, Message(role="assistant", content=reply.content))
        calls = [b for b in reply.content if isinstance(b, ToolUseBlock)]
        if calls:
            results = tuple(ToolResultBlock(tool_use_id=c.id, content=RESULT) for c in calls)
            messages = (*messages, Message(role="user", content=results))
        state = evolve(state, messages=messages)
        out.append((time.process_time() - cpu, time.perf_counter() - wall))
        if not calls:
            break
    await provider.aclose()
    return out


def start_server(steps: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakeapi.server", "--tool-loop", str(steps)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def median_step(samples: Steps, which: int) -> float:
    return statistics.median(s[which] for s in samples[1:])  # step 1 warms the connection


def growth(samples: Steps) -> float:
    """CPU of the last 10 steps over the first 10 (after the first)."""
    cpu = [s[0] for s in samples]
    return statistics.median(cpu[-10:]) / statistics.median(cpu[1:11])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--profile", help="write a pyinstrument profile of ruizn's loop here")
    parser.add_argument("--loops", nargs="+", default=["raw", "ruizn", "ruizn-dict"])
    args = parser.parse_args()
    gc.freeze()  # start-up garbage is not per-step work, for both loops alike
    loops: dict[str, Callable[[str, int], Awaitable[Steps]]] = {
        "raw": raw_loop,
        "ruizn": lambda url, n: ruizn_loop(url, n, plan=True),
        "ruizn-dict": lambda url, n: ruizn_loop(url, n, plan=False),
    }
    loops = {k: v for k, v in loops.items() if k in args.loops}
    for steps in args.steps:
        proc, url = start_server(steps)
        try:
            results: dict[str, list[Steps]] = {name: [] for name in loops}
            names = list(loops)
            for run in range(args.runs):
                order = names if run % 2 == 0 else names[::-1]  # ABBA
                for name in order:
                    samples = asyncio.run(loops[name](url, steps))
                    assert len(samples) == steps + 1, f"{name}: {len(samples)} steps"
                    results[name].append(samples)
            if args.profile:
                from pyinstrument import Profiler

                profiler = Profiler(interval=0.0005)
                profiler.start()
                asyncio.run(loops[names[-1] if "ruizn" not in loops else "ruizn"](url, steps))
                profiler.stop()
                Path(f"{args.profile}.{steps}.txt").write_text(profiler.output_text(unicode=True))
        finally:
            proc.terminate()
            proc.wait()
        raw_cpu = statistics.median(median_step(s, 0) for s in results.get("raw", [[(1, 1)] * 3]))
        print(f"{steps} steps, {args.runs} runs a side (ABBA), per-step median, ms")
        for name, runs in results.items():
            cpu = [median_step(s, 0) * 1000 for s in runs]
            wall = [median_step(s, 1) * 1000 for s in runs]
            grow = [growth(s) for s in runs]
            ratio = statistics.median(cpu) / (raw_cpu * 1000)
            print(
                f"  {name:10s} cpu {statistics.median(cpu):6.2f} ({min(cpu):.2f}-{max(cpu):.2f})"
                f"  wall {statistics.median(wall):6.2f} ({min(wall):.2f}-{max(wall):.2f})"
                f"  growth last10/first10 {statistics.median(grow):.2f}x"
                f"  vs raw {ratio:.2f}x"
            )


if __name__ == "__main__":
    main()
