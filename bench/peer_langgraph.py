"""LangGraph on the same server: create_react_agent with langchain-anthropic's ChatAnthropic.

Usage: python bench/peer_langgraph.py STEPS   (prints the loop's seconds on stderr)
Run with a Python that has langgraph and langchain-anthropic (see bench/README.md).
"""

import os
import sys
import time
import warnings
from pathlib import Path

from langchain_anthropic import ChatAnthropic
from langchain_core.tools import tool
from langgraph.errors import GraphRecursionError
from langgraph.prebuilt import create_react_agent

SYSTEM = Path(os.environ["RUIZN_BENCH_SYSTEM"]).read_text(encoding="utf-8")


@tool
def read_file(path: str) -> str:
    """Read a UTF-8 text file in the workspace."""
    return Path(path).read_text(encoding="utf-8")


def main(steps: int) -> None:
    model = ChatAnthropic(
        model="claude-sonnet-4-5",
        base_url=os.environ["ANTHROPIC_BASE_URL"],
        api_key="sk-bench",
        streaming=True,
        max_tokens=4096,
    )
    with warnings.catch_warnings():  # deprecated in favour of langchain.agents; same loop
        warnings.simplefilter("ignore")
        agent = create_react_agent(model, [read_file], prompt=SYSTEM)
    began = time.perf_counter()
    try:
        # Each step is a model node and a tool node: 2 supersteps.
        for chunk, _ in agent.stream(
            {"messages": [("user", "loop")]}, {"recursion_limit": 2 * steps}, stream_mode="messages"
        ):
            sys.stdout.write(str(chunk.content)[:0])
    except GraphRecursionError:
        pass
    print(time.perf_counter() - began, file=sys.stderr)


main(int(sys.argv[1]))
