"""Fleet fixtures: a scripted fake API keyed by goal, and a real Postgres server."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cli.conftest import server_factory, workspace  # noqa: F401 (shared fixtures)
from tests.fakeapi import Reply, Stream, Text, ToolUse
from tests.fleet.pg import NoPostgres, postgres_server


def first_text(body: dict[str, Any]) -> str:
    content = body["messages"][0]["content"]
    return str(content if isinstance(content, str) else content[0]["text"])


def note_loop(tool_turns: int = 2, token_delay: float = 0.0) -> Any:
    """Each run asks `tool_turns` times for the `note` tool (input: its goal and turn), then
    answers. Stateless, like tests.fakeapi.tool_loop, so retries and resumes get the reply
    their history calls for."""

    def reply(body: dict[str, Any], index: int) -> Reply:
        turns = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        goal = first_text(body)
        if turns < tool_turns:
            return Stream(
                (
                    Text("Noting it.", chunk=2),
                    ToolUse(f"toolu_{turns:04d}_note", "note", {"text": f"{goal} #{turns}"}),
                ),
                stop_reason="tool_use",
                token_delay=token_delay,
            )
        return Stream((Text("All noted.", chunk=2),), token_delay=token_delay)

    return reply


def requests_per_goal(requests: list[Any]) -> Counter[tuple[str, int]]:
    """(goal, assistant turns in the request) -> how many times the server got it."""
    seen: Counter[tuple[str, int]] = Counter()
    for request in requests:
        turns = sum(1 for m in request.body["messages"] if m["role"] == "assistant")
        seen[(first_text(request.body), turns)] += 1
    return seen


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    try:
        with postgres_server() as url:
            yield url
    except NoPostgres as exc:
        pytest.skip(str(exc))


def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
