"""LangGraph on the same server: create_react_agent with langchain-anthropic's ChatAnthropic.

Usage: python bench/peer_langgraph.py CONFIG.json   (env: ANTHROPIC_BASE_URL)
Runs until the model stops asking for tools, streaming (stream_mode "messages"): each text
chunk goes to stdout, flushed, as the other loops do. Prints {"requests": n, "answers": n,
"seconds": s} on stderr: requests are the distinct model calls whose chunks streamed, answers
the model node's finished updates.
"""

import json
import os
import sys
import time
import warnings
from pathlib import Path

from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessageChunk
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent


@tool
def read_file(path: str) -> str:
    """Read a UTF-8 text file in the workspace."""
    return Path(path).read_text(encoding="utf-8")


def main(config: dict) -> None:
    model = ChatAnthropic(
        model=config["model"],
        base_url=os.environ["ANTHROPIC_BASE_URL"],
        api_key="sk-bench",
        streaming=True,
        max_tokens=4096,
    )
    with warnings.catch_warnings():  # deprecated in favour of langchain.agents; same loop
        warnings.simplefilter("ignore")
        agent = create_react_agent(model, [read_file], prompt=config["system"])
    # Each step is a model node and a tool node: 2 supersteps; the limit only guards.
    limit = {"recursion_limit": 2 * config["steps"] + 10}
    calls: set[str] = set()
    answers = 0
    began = time.monotonic()  # run.py compares it with the server's stamps
    modes = ["messages", "updates"]
    for mode, item in agent.stream({"messages": [("user", "loop")]}, limit, stream_mode=modes):
        if mode == "updates":
            answers += sum(1 for node in item if node != "tools")
            continue
        chunk, _ = item
        if not isinstance(chunk, AIMessageChunk):
            continue
        calls.add(str(chunk.id))
        content = chunk.content
        if isinstance(content, str):
            sys.stdout.write(content)
        else:
            for part in content:
                if isinstance(part, dict) and part.get("type") == "text":
                    sys.stdout.write(part.get("text", ""))
        sys.stdout.flush()
    ended = time.monotonic()
    seconds = ended - began
    report = {
        "requests": len(calls),
        "answers": answers,
        "seconds": seconds,
        "began": began,
        "ended": ended,
    }
    print(json.dumps(report), file=sys.stderr)


main(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8")))
