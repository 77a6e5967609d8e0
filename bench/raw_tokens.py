"""Baseline for the token pipeline: the raw SDK's text_stream written to /dev/null.

Prints deltas per second from the first to the last delta (ANTHROPIC_BASE_URL: the server).
"""

import asyncio
import os
import time

import anthropic


async def main() -> None:
    client = anthropic.AsyncAnthropic()
    stamps = []
    with open(os.devnull, "w", encoding="utf-8") as sink:  # noqa: ASYNC230  # /dev/null never blocks
        async with client.messages.stream(
            model="claude-sonnet-4-5",
            max_tokens=4096,
            messages=[{"role": "user", "content": "talk"}],
        ) as stream:
            async for text in stream.text_stream:
                sink.write(text)
                sink.flush()
                stamps.append(time.time())
    print(len(stamps) / (stamps[-1] - stamps[0]))


asyncio.run(main())
