"""pydantic-ai on the same server: an Agent with AnthropicModel and the same read_file tool.

Usage: python bench/peer_pydantic_ai.py STEPS   (prints the loop's seconds on stderr)
Run with a Python that has pydantic-ai-slim[anthropic] (see bench/README.md).
"""

import asyncio
import contextlib
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
    # agent.run, not run_stream: run_stream ends at the first text, before the tool loop.
    with contextlib.suppress(UsageLimitExceeded):
        await agent.run("loop", usage_limits=UsageLimits(request_limit=steps))
    print(time.perf_counter() - began, file=sys.stderr)


asyncio.run(main(int(sys.argv[1])))
