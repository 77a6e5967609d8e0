"""pydantic-ai on the same server: an Agent with AnthropicModel and the same read_file tool.

Usage: python bench/peer_pydantic_ai.py STEPS   (prints the loop's seconds on stderr)
Run with a Python that has pydantic-ai-slim[anthropic] (see bench/README.md).
"""

import asyncio
import os
import sys
import time
from pathlib import Path

from pydantic_ai import Agent, UsageLimitExceeded
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.usage import UsageLimits

SYSTEM = Path(os.environ["RUIZN_BENCH_SYSTEM"]).read_text(encoding="utf-8")


async def main(steps: int) -> None:
    provider = AnthropicProvider(base_url=os.environ["ANTHROPIC_BASE_URL"], api_key="sk-bench")
    agent = Agent(AnthropicModel("claude-sonnet-4-5", provider=provider), system_prompt=SYSTEM)

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a UTF-8 text file in the workspace."""
        return Path(path).read_text(encoding="utf-8")

    began = time.perf_counter()
    try:
        async with agent.run_stream("loop", usage_limits=UsageLimits(request_limit=steps)) as run:
            async for text in run.stream_text(delta=True):
                sys.stdout.write(text)
    except UsageLimitExceeded:
        pass
    print(time.perf_counter() - began, file=sys.stderr)


asyncio.run(main(int(sys.argv[1])))
