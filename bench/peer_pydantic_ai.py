"""pydantic-ai on the same server: an Agent with AnthropicModel and the same read_file tool.

Usage: python bench/peer_pydantic_ai.py CONFIG.json   (env: ANTHROPIC_BASE_URL)
Runs until the model stops asking for tools. `event_stream_handler` makes every model
request a streamed one (plain `agent.run` sends non-streaming requests; `run_stream` ends at
the first text, before any tool runs) and writes each text delta to stdout, flushed, as the
other loops do. Prints {"requests": n, "answers": n, "seconds": s} on stderr: requests from
the run's usage, answers the ModelResponses in its messages.
"""

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.models.anthropic import AnthropicModel, AnthropicModelSettings
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.usage import UsageLimits


async def show(_ctx, events) -> None:  # type: ignore[no-untyped-def]
    async for event in events:
        if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
            sys.stdout.write(event.part.content)
            sys.stdout.flush()
        elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
            sys.stdout.write(event.delta.content_delta)
            sys.stdout.flush()


async def main(config: dict) -> None:
    provider = AnthropicProvider(base_url=os.environ["ANTHROPIC_BASE_URL"], api_key="sk-bench")
    agent = Agent(
        AnthropicModel(config["model"], provider=provider),
        system_prompt=config["system"],
        model_settings=AnthropicModelSettings(max_tokens=4096),
    )

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a UTF-8 text file in the workspace."""
        return Path(path).read_text(encoding="utf-8")

    # The default request_limit (50) would stop a 200-step loop; the server ends it.
    limits = UsageLimits(request_limit=config["steps"] + 10)
    began = time.monotonic()  # run.py compares it with the server's stamps
    result = await agent.run("loop", event_stream_handler=show, usage_limits=limits)
    ended = time.monotonic()
    seconds = ended - began
    answers = sum(1 for m in result.all_messages() if isinstance(m, ModelResponse))
    report = {
        "requests": result.usage().requests,
        "answers": answers,
        "seconds": seconds,
        "began": began,
        "ended": ended,
    }
    print(json.dumps(report), file=sys.stderr)


asyncio.run(main(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))))
