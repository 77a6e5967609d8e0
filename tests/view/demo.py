"""A real run worth looking at, made by the real CLI against the fake Messages API: a
retried call, two tool calls side by side, a call the approval policy denies, a failed tool
and an answer. The view tests, the export tests and docs/make_view_png.py all use it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cli.conftest import Result, run_cli
from tests.fakeapi import FakeAnthropic, HttpError, Stream, Text, ToolUse, Usage

FINAL_ANSWER = "The demo project has one module, search.py; its docs say it ranks by BM25."

TOOLS_PY = '''
import time

import ruizn


@ruizn.tool(read_only=True)
def fetch_docs(topic: str) -> str:
    """Fetch the project's notes on a topic.

    Args:
        topic: What to look up.
    """
    time.sleep(0.35 if topic == "ranking" else 0.2)
    if topic == "missing":
        raise FileNotFoundError("no notes on 'missing'")
    return f"Notes on {topic}: results are ranked by BM25, then by recency.\\n" * 80
'''


def demo_script() -> list[Any]:
    slow = 0.01  # seconds a delta: the model calls take a visible while
    return [
        HttpError(529, "overloaded_error", "Overloaded"),
        Stream(
            (
                Text("I'll read the README and look up the docs, side by side.", chunk=6),
                ToolUse("toolu_01_readme", "read_file", {"path": "README.md"}),
                ToolUse("toolu_02_ranking", "fetch_docs", {"topic": "ranking"}),
                ToolUse("toolu_03_missing", "fetch_docs", {"topic": "missing"}),
            ),
            stop_reason="tool_use",
            usage=Usage(input_tokens=1850, output_tokens=96, cache_creation_input_tokens=1600),
            token_delay=slow,
        ),
        Stream(
            (
                Text("I'll keep a note of that.", chunk=6),
                ToolUse("toolu_04_note", "write_file", {"path": "NOTES.md", "content": "BM25"}),
            ),
            stop_reason="tool_use",
            usage=Usage(input_tokens=420, output_tokens=51, cache_read_input_tokens=1600),
            token_delay=slow,
        ),
        Stream(
            (Text(FINAL_ANSWER, chunk=6),),
            usage=Usage(input_tokens=510, output_tokens=38, cache_read_input_tokens=1600),
            token_delay=slow,
        ),
    ]


def make_workspace(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "README.md").write_text(
        "# Demo\n\nsearch.py ranks documents; see the docs.\n", encoding="utf-8"
    )
    (folder / "demo_tools.py").write_text(TOOLS_PY, encoding="utf-8")
    return folder


def demo_run(workspace: Path, server: FakeAnthropic) -> Result:
    """`ruizn run` of the demo goal; asserts it ended as the script says."""
    result = run_cli(
        [
            "run",
            "--goal",
            "What does the demo project do, and how does it rank results?",
            "--tool",
            "demo_tools.py:fetch_docs",
            "--approval",
            "never",
        ],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    return result
