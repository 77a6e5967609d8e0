"""The baseline: a bare tool loop on the raw anthropic SDK, sending ruizn's requests.

Usage: python bench/raw_loop.py CONFIG.json   (env: ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY)
CONFIG (written by run.py) holds ruizn's model, system prompt and exact tool schemas. Loops
until the model stops asking for tools: streams each answer to stdout (flushed per delta, as
a CLI does), reads the file, and marks the same cache_control breakpoints as ruizn (system,
last tool, newest two user turns), so the request bodies are ruizn's, byte for byte.
Prints {"requests": n, "answers": n, "seconds": loop time} on stderr: run.py checks the
counts against the server's, and takes the per-step client time from the server's clock.
"""

import asyncio
import json
import sys
import time
from pathlib import Path

import anthropic

EPHEMERAL = {"type": "ephemeral"}


async def main(config: dict) -> None:
    client = anthropic.AsyncAnthropic()
    system = [{"type": "text", "text": config["system"], "cache_control": EPHEMERAL}]
    tools = [dict(t) for t in config["tools"]]
    tools[-1]["cache_control"] = EPHEMERAL
    messages: list[dict] = [{"role": "user", "content": [{"type": "text", "text": "loop"}]}]
    began = time.monotonic()  # run.py compares it with the server's stamps
    requests = answers = 0
    while True:
        users = [m for m in messages if m["role"] == "user"]
        for m in users[-3:]:  # the rolling breakpoint: the newest two user turns
            m["content"][-1].pop("cache_control", None)
        for m in users[-2:]:
            m["content"][-1]["cache_control"] = EPHEMERAL
        requests += 1
        async with client.messages.stream(
            model=config["model"],
            max_tokens=4096,
            system=system,
            tools=tools,
            messages=messages,
        ) as s:
            async for text in s.text_stream:
                sys.stdout.write(text)
                sys.stdout.flush()
            message = await s.get_final_message()
        answers += 1
        # The blocks as ruizn sends them back (model_dump would add fields such as `caller`).
        content = [
            {"type": "text", "text": b.text}
            if b.type == "text"
            else {"type": "tool_use", "id": b.id, "name": b.name, "input": b.input}
            for b in message.content
            if b.type == "tool_use" or (b.type == "text" and b.text)
        ]
        messages.append({"role": "assistant", "content": content})
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            break
        results = [
            {
                "type": "tool_result",
                "tool_use_id": c.id,
                "content": Path(c.input["path"]).read_text(encoding="utf-8"),  # noqa: ASYNC240
            }
            for c in calls
        ]
        messages.append({"role": "user", "content": results})
    ended = time.monotonic()
    seconds = ended - began
    print(
        json.dumps(
            {
                "requests": requests,
                "answers": answers,
                "seconds": seconds,
                "began": began,
                "ended": ended,
            }
        ),
        file=sys.stderr,
    )


if __name__ == "__main__":
    asyncio.run(main(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))))
