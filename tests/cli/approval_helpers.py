"""Shared by the approval tests: a model that asks to change files, and log readers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.cli.conftest import read_events
from tests.fakeapi import Reply, Stream, Text, ToolUse

events = read_events  # the approval tests' name for it


def turns_model(
    turns: Sequence[Sequence[ToolUse]], final: str = "Done."
) -> Callable[[dict[str, Any], int], Reply]:
    """Stateless: turn k (k assistant turns in the request) asks for `turns[k]`, then the
    final answer. Stateless, so a run stopped and resumed in another process gets the reply
    its own history calls for."""

    def reply(body: dict[str, Any], index: int) -> Reply:
        done = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        if done < len(turns):
            return Stream((Text("Changing files."), *turns[done]), stop_reason="tool_use")
        return Stream((Text(final),))

    return reply


def write(call_id: str, path: str, content: str) -> ToolUse:
    return ToolUse(call_id, "write_file", {"path": path, "content": content})


def of_type(log: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in events(log) if e["type"] == kind]


def tool_results(request_body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tool_result blocks of a request's last message, by tool_use id."""
    last = request_body["messages"][-1]
    return {b["tool_use_id"]: b for b in last["content"] if b.get("type") == "tool_result"}
