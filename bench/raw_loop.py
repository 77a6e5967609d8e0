"""The baseline: a bare tool loop on the raw anthropic SDK, sending ruizn's requests.

Usage: python bench/raw_loop.py STEPS  (env: ANTHROPIC_BASE_URL, RUIZN_BENCH_SYSTEM)
Writes each streamed delta to stdout (flushed, as a CLI would), reads the file each step,
and prints the loop's own seconds (start-up excluded) on stderr.
"""

import asyncio
import os
import sys
import time
from pathlib import Path

import anthropic

EPHEMERAL = {"type": "ephemeral"}
SYSTEM = Path(os.environ["RUIZN_BENCH_SYSTEM"]).read_text(encoding="utf-8")
TOOL = {
    "name": "read_file",
    "description": "Read a UTF-8 text file in the workspace.",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
    "cache_control": EPHEMERAL,
}


def read(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


async def main(steps: int) -> None:
    client = anthropic.AsyncAnthropic()
    system = [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]
    messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": "loop"}]}]
    began = time.perf_counter()
    for _ in range(steps):
        users = [m for m in messages if m["role"] == "user"]
        for m in users:  # the rolling breakpoint: the newest two user turns
            m["content"][-1].pop("cache_control", None)
        for m in users[-2:]:
            m["content"][-1]["cache_control"] = EPHEMERAL
        async with client.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=4096,
            system=system,
            tools=[TOOL],
            messages=messages,
        ) as s:
            async for text in s.text_stream:
                sys.stdout.write(text)
                sys.stdout.flush()
            message = await s.get_final_message()
        content = [b.model_dump(exclude_none=True) for b in message.content]
        messages.append({"role": "assistant", "content": content})
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            break
        results = [
            {"type": "tool_result", "tool_use_id": c.id, "content": read(c.input["path"])}
            for c in calls
        ]
        messages.append({"role": "user", "content": results})
    print(time.perf_counter() - began, file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
