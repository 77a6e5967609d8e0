"""Subagents as child runs, against the local Messages API: each conversation (the parent,
each child) is served from its own script, picked by its system prompt."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ruizn
from ruizn.effects.runlog.reader import iter_events
from ruizn.events import RunStarted, SubagentFinished, SubagentStarted
from tests.fakeapi.replies import (
    Reply,
    Stream,
    Text,
    ToolUse,
    Usage,
    by_system,
    tool_results,
    turns,
)
from tests.fakeapi.server import FakeAnthropic

MODEL = "claude-sonnet-5-5"
PARENT = "You are the lead."
REVIEWER = ruizn.Subagent(
    name="reviewer",
    description="Reviews a text.",
    prompt="You review texts.",
    tools=["read_file"],
)
FINDER = ruizn.Subagent(
    name="finder", description="Finds things.", prompt="You find things.", tools="list_dir"
)


def _call(call_id: str, agent: str, prompt: str) -> ToolUse:
    return ToolUse(
        call_id, "agent", {"subagent_type": agent, "description": f"ask {agent}", "prompt": prompt}
    )


def _lead(*calls: ToolUse) -> Any:
    """The parent: the calls in its first turn, then an answer quoting every result."""

    def reply(body: dict[str, Any], index: int) -> Reply:
        if turns(body) == 0:
            return Stream((Text("Delegating."), *calls), stop_reason="tool_use")
        said = " | ".join(str(r.get("content")) for r in tool_results(body))
        return Stream((Text(f"They said: {said}"),))

    return reply


def _answer(text: str, delay: float = 0.0) -> Any:
    def reply(body: dict[str, Any], index: int) -> Reply:
        return Stream((Text(text),), token_delay=delay, usage=Usage(10, 5))

    return reply


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    servers: list[FakeAnthropic] = []

    def start(routes: dict[str, Any]) -> FakeAnthropic:
        server = FakeAnthropic(by_system(routes)).start()
        servers.append(server)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        return server

    yield start
    for server in servers:
        server.stop()


def _events(path: Path) -> list[Any]:
    return list(iter_events(path))


def test_two_children_run_at_once_and_their_totals_roll_up(workspace: Path, api: Any) -> None:
    server = api(
        {
            PARENT: _lead(
                _call("toolu_a", "reviewer", "Review README.md"),
                _call("toolu_b", "finder", "Find the docs"),
            ),
            "You review": _answer("LGTM", delay=0.02),
            "You find": _answer("in docs/", delay=0.02),
        }
    )
    agent = ruizn.Agent(MODEL, workspace=workspace, system=PARENT, subagents=[REVIEWER, FINDER])
    result = agent.run("Review and find.")
    assert result.status.value == "success", result.error
    assert "LGTM" in result.output and "in docs/" in result.output

    events = _events(result.log_path)
    started = [e for e in events if isinstance(e, SubagentStarted)]
    finished = [e for e in events if isinstance(e, SubagentFinished)]
    assert {e.agent for e in started} == {"reviewer", "finder"}
    assert {e.status.value for e in finished} == {"success"}
    # The parent's totals hold its children's: its own two calls and one call per child.
    assert result.usage.output_tokens == sum(e.usage.output_tokens for e in finished) + sum(
        r.usage.output_tokens for r in events if type(r).__name__ == "LlmResponse"
    )
    # The parent's log alone replays to its state; each child's to its own.
    assert ruizn.replay(result.log_path) == result.state
    spans = []
    for event in started:
        child_log = result.log_path.parent.parent / event.run_id / "events.jsonl"
        child = _events(child_log)
        first = child[0]
        assert isinstance(first, RunStarted)
        assert first.parent is not None and first.parent.run_id == result.run_id
        assert (first.parent.kind, first.parent.agent, first.parent.call) == (
            "agent",
            event.agent,
            event.id,
        )
        assert ruizn.replay(child_log).status.value == "success"
        spans.append((child[0].ts, child[-1].ts))
    # Side by side: each child started before the other ended.
    (a0, a1), (b0, b1) = spans
    assert a0 < b1 and b0 < a1
    # Each child was offered only its definition's tools (a subset of the parent's).
    by_prompt = {json.dumps(r.body.get("system")): r.body for r in server.requests}
    offered = {
        key: [t["name"] for t in body.get("tools", [])]
        for key, body in by_prompt.items()
        if "You review" in key or "You find" in key
    }
    assert sorted(offered.values()) == [["list_dir"], ["read_file"]]
