"""`--model test`: an offline model behind the same Provider interface.

Deterministic and stateless (everything comes from the request), like pydantic-ai's
TestModel: it reads each file the goal names that exists in the workspace, then summarises
what the tools returned. It lets a new user, and CI, run the whole CLI without a key.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from ruizn.effects.models.provider import ModelReply
from ruizn.format import counted
from ruizn.request import MessagesRequest
from ruizn.state import ContentBlock, TextBlock, ToolUseBlock, Usage

_PATH_LIKE = re.compile(r"[A-Za-z0-9_./\-]+")


class TestModelProvider:
    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, workspace: Path) -> None:
        self._workspace = workspace

    async def aclose(self) -> None:
        """Nothing to release: the model is a function in this process."""

    async def stream(self, request: MessagesRequest) -> AsyncIterator[str | ModelReply]:
        body = request.to_json()
        messages: list[dict[str, Any]] = body["messages"]
        results = [b for b in messages[-1]["content"] if b.get("type") == "tool_result"]
        content: tuple[ContentBlock, ...]
        if results:
            text = _summary(messages, results)
            content, stop = (TextBlock(text=text),), "end_turn"
        else:
            goal = " ".join(b.get("text", "") for b in messages[0]["content"])
            paths = self._paths_in(goal)
            if paths:
                text = f"I'll read {', '.join(paths)}."
                calls = tuple(
                    ToolUseBlock(id=f"toolu_test_{i:02d}", name="read_file", input={"path": p})
                    for i, p in enumerate(paths, start=1)
                )
                content, stop = (TextBlock(text=text), *calls), "tool_use"
            else:
                text = "The goal names no file in the workspace, so there is nothing to read."
                content, stop = (TextBlock(text=text),), "end_turn"
        for piece in re.findall(r"\S+\s*|\s+", text):
            yield piece
        yield ModelReply(
            content=content,
            stop_reason=stop,
            usage=Usage(
                input_tokens=len(json.dumps(body, ensure_ascii=False)) // 4,
                output_tokens=max(1, len(text) // 4),
            ),
            request_id=None,
        )

    def _paths_in(self, goal: str) -> list[str]:
        found: list[str] = []
        for token in _PATH_LIKE.findall(goal):
            candidate = token.rstrip(".")
            if candidate and candidate not in found and (self._workspace / candidate).is_file():
                found.append(candidate)
        return found


def _summary(messages: list[dict[str, Any]], results: list[dict[str, Any]]) -> str:
    asked = {
        b["id"]: b.get("input", {}).get("path", "?")
        for b in messages[-2]["content"]
        if b.get("type") == "tool_use"
    }
    lines = []
    for result in results:
        path = asked.get(result["tool_use_id"], "?")
        body = result.get("content", "")
        if result.get("is_error"):
            lines.append(f"{path}: could not be read ({body})")
            continue
        text_lines = body.splitlines()
        first = next((line.strip() for line in text_lines if line.strip()), "")
        lines.append(
            f"{path}: {counted(len(body.encode()), 'byte')}, {counted(len(text_lines), 'line')};"
            f" it begins with {first[:80]!r}."
        )
    return "Here is what I found.\n" + "\n".join(lines)
