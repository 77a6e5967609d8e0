"""Baseline for the token pipeline: the raw SDK's text_stream written to /dev/null.

Usage: python bench/raw_tokens.py   (env: ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY)
Each delta is written and flushed, as a CLI prints it. Prints {"deltas": n, "span": s} on
stdout: s is the wall time from the first delta to the last (time.time(), as ruizn's log).
"""

import asyncio
import json
import os
import time

import anthropic


async def main() -> None:
    client = anthropic.AsyncAnthropic()
    first = last = 0.0
    count = 0
    with open(os.devnull, "w", encoding="utf-8") as sink:  # noqa: ASYNC230  # /dev/null never blocks
        async with client.messages.stream(
            model="claude-sonnet-5-5",
            max_tokens=4096,
            messages=[{"role": "user", "content": [{"type": "text", "text": "talk"}]}],
        ) as stream:
            async for text in stream.text_stream:
                sink.write(text)
                sink.flush()
                last = time.time()
                if not count:
                    first = last
                count += 1
    print(json.dumps({"deltas": count, "span": last - first}))


asyncio.run(main())
