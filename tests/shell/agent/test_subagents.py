"""Subagents as child runs, against the local Messages API: each conversation (the parent,
each child) is served from its own script, picked by its system prompt."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ruizn
from ruizn.effects.runlog.reader import iter_events
from ruizn.events import RunStarted, SubagentFinished, SubagentStarted
from ruizn.settings import HookSpec
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
    assert "LGTM" in result.output
    assert "in docs/" in result.output

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
        assert first.parent is not None
        assert first.parent.run_id == result.run_id
        assert (first.parent.kind, first.parent.agent, first.parent.call) == (
            "agent",
            event.agent,
            event.id,
        )
        assert ruizn.replay(child_log).status.value == "success"
        spans.append((child[0].ts, child[-1].ts))
    # Side by side: each child started before the other ended.
    (a0, a1), (b0, b1) = spans
    assert a0 < b1
    assert b0 < a1
    # Each child was offered only its definition's tools (a subset of the parent's).
    by_prompt = {json.dumps(r.body.get("system")): r.body for r in server.requests}
    offered = {
        key: [t["name"] for t in body.get("tools", [])]
        for key, body in by_prompt.items()
        if "You review" in key or "You find" in key
    }
    assert sorted(offered.values()) == [["list_dir"], ["read_file"]]


def _looping(tool: str, tool_input: dict[str, Any], usage: Usage) -> Any:
    """A child that calls `tool` every turn and never ends on its own."""

    def reply(body: dict[str, Any], index: int) -> Reply:
        n = turns(body)
        return Stream(
            (Text("Again."), ToolUse(f"toolu_{n:04d}_child", tool, tool_input)),
            stop_reason="tool_use",
            usage=usage,
        )

    return reply


def test_a_budget_spent_inside_a_child_stops_the_child_then_the_parent(
    workspace: Path, api: Any
) -> None:
    api(
        {
            PARENT: _lead(_call("toolu_a", "finder", "List forever")),
            # $3 a million input tokens: each child call costs $0.003.
            "You find": _looping("list_dir", {"path": "."}, Usage(1000, 0)),
        }
    )
    agent = ruizn.Agent(
        MODEL, workspace=workspace, system=PARENT, subagents=[FINDER], max_cost=0.01
    )
    result = agent.run("Find.")
    assert result.status.value == "max_cost", result.error
    finished = [e for e in _events(result.log_path) if isinstance(e, SubagentFinished)]
    assert [e.status.value for e in finished] == ["max_cost"]
    # The tree spent its budget and no more than one call past it (the one that reached it).
    assert result.cost is not None
    assert 0.01 <= result.cost < 0.01 + 0.0031
    assert finished[0].cost is not None
    assert finished[0].cost > 0
    assert ruizn.replay(result.log_path) == result.state


def test_a_pre_tool_use_hook_blocks_a_childs_call_and_is_told_which_agent(
    workspace: Path, api: Any, tmp_path: Path
) -> None:
    seen = tmp_path / "seen.jsonl"
    hook = tmp_path / "hook.py"
    hook.write_text(
        "import json, sys\n"
        "data = json.load(sys.stdin)\n"
        f"open({str(seen)!r}, 'a').write(json.dumps(data) + '\\n')\n"
        "if data.get('agent_type') == 'finder' and data.get('tool_name') == 'list_dir':\n"
        "    print('no listing for finders', file=sys.stderr)\n"
        "    sys.exit(2)\n",
        encoding="utf-8",
    )
    command = f"{sys.executable} {hook}"
    hooks = [
        HookSpec(event=event, command=command, matcher=matcher)
        for event, matcher in (
            ("PreToolUse", "list_dir|Task"),
            ("SubagentStart", ""),
            ("SubagentStop", ""),
        )
    ]

    def finder(body: dict[str, Any], index: int) -> Reply:
        if turns(body) == 0:
            return Stream((ToolUse("toolu_ls", "list_dir", {"path": "."}),), stop_reason="tool_use")
        return Stream((Text(f"Told: {tool_results(body)[0]['content']}"),))

    api({PARENT: _lead(_call("toolu_a", "finder", "List")), "You find": finder})
    agent = ruizn.Agent(MODEL, workspace=workspace, system=PARENT, subagents=[FINDER], hooks=hooks)
    result = agent.run("Find.")
    assert result.status.value == "success", result.error
    assert "no listing for finders" in result.output
    inputs = [json.loads(line) for line in seen.read_text(encoding="utf-8").splitlines()]
    by_event = [(d["hook_event_name"], d.get("tool_name"), d.get("agent_type")) for d in inputs]
    # The parent's `agent` call matched "Task" (Claude Code's name for it, so the hook is
    # told that name); the child's call carried the agent's id and name; the parent heard
    # the child start and stop.
    assert by_event == [
        ("PreToolUse", "Task", None),
        ("SubagentStart", "agent", "finder"),
        ("PreToolUse", "list_dir", "finder"),
        ("SubagentStop", "agent", "finder"),
    ]
    child_id = next(e.run_id for e in _events(result.log_path) if isinstance(e, SubagentStarted))
    assert inputs[2]["agent_id"] == child_id
    assert inputs[1]["agent_id"] == child_id
    assert ruizn.replay(result.log_path) == result.state


@pytest.mark.parametrize(("max_depth", "child_has_agent"), [(1, False), (2, True)])
def test_max_depth_decides_whether_a_child_may_start_children(
    workspace: Path, api: Any, max_depth: int, child_has_agent: bool
) -> None:
    helper = ruizn.Subagent(name="helper", description="Helps.", prompt="You help.")
    server = api({PARENT: _lead(_call("toolu_a", "helper", "Think")), "You help": _answer("ok")})
    agent = ruizn.Agent(
        MODEL, workspace=workspace, system=PARENT, subagents=[helper], max_depth=max_depth
    )
    result = agent.run("Go.")
    assert result.status.value == "success", result.error
    child = next(r.body for r in server.requests if "You help" in json.dumps(r.body["system"]))
    names = [t["name"] for t in child["tools"]]
    assert ("agent" in names) is child_has_agent
    assert "read_file" in names  # a definition naming no tools keeps the parent's


def test_a_childs_call_needing_a_decision_stops_the_tree_and_a_resume_answers_it(
    workspace: Path, api: Any
) -> None:
    writer = ruizn.Subagent(name="writer", description="Writes.", prompt="You write files.")

    def child(body: dict[str, Any], index: int) -> Reply:
        if turns(body) == 0:
            write = ToolUse("toolu_w", "write_file", {"path": "notes.md", "content": "hi\n"})
            return Stream((write,), stop_reason="tool_use")
        return Stream((Text(f"Wrote: {tool_results(body)[0]['content']}"),))

    api({PARENT: _lead(_call("toolu_a", "writer", "Write notes")), "You write": child})
    agent = ruizn.Agent(MODEL, workspace=workspace, system=PARENT, subagents=[writer])
    stopped = agent.run("Take notes.")
    # Nobody to ask (no approver): the child stops for its write, and the parent with it.
    assert stopped.status.value == "awaiting_approval", stopped.error
    (child_run,) = stopped.state.children_awaiting
    assert [call.id for call in child_run.awaiting] == ["toolu_w"]
    assert not (workspace / "notes.md").exists()
    assert ruizn.replay(stopped.log_path) == stopped.state

    done = agent.resume(stopped.run_id, approve=["toolu_w"])
    assert done.status.value == "success", done.error
    assert (workspace / "notes.md").read_text() == "hi\n"
    assert "Wrote:" in done.output
    ends = [e for e in _events(done.log_path) if isinstance(e, SubagentFinished)]
    assert [e.status.value for e in ends] == ["awaiting_approval", "success"]
    # The child's totals count once: the second end's usage is the child's whole.
    assert done.usage.output_tokens == ends[-1].usage.output_tokens + sum(
        r.usage.output_tokens for r in _events(done.log_path) if type(r).__name__ == "LlmResponse"
    )
    assert ruizn.replay(done.log_path) == done.state


def test_children_side_by_side_share_the_parents_one_budget(workspace: Path, api: Any) -> None:
    api(
        {
            PARENT: _lead(
                _call("toolu_a", "finder", "List forever"), _call("toolu_b", "finder", "Also")
            ),
            "You find": _looping("list_dir", {"path": "."}, Usage(1000, 0)),
        }
    )
    agent = ruizn.Agent(
        MODEL, workspace=workspace, system=PARENT, subagents=[FINDER], max_cost=0.01
    )
    result = agent.run("Find twice.")
    assert result.status.value == "max_cost", result.error
    ends = [e for e in _events(result.log_path) if isinstance(e, SubagentFinished)]
    assert [e.status.value for e in ends] == ["max_cost", "max_cost"]
    # Each child alone was given the whole $0.01 left; together they stop at it, each past it
    # by at most the one call it had made when the other's spending reached it.
    assert result.cost is not None
    assert 0.01 <= result.cost < 0.01 + 2 * 0.0031
    assert ruizn.replay(result.log_path) == result.state


def test_max_agents_caps_the_children_running_at_once(workspace: Path, api: Any) -> None:
    api(
        {
            PARENT: _lead(_call("toolu_a", "reviewer", "One"), _call("toolu_b", "finder", "Two")),
            "You review": _answer("LGTM", delay=0.02),
            "You find": _answer("in docs/", delay=0.02),
        }
    )
    agent = ruizn.Agent(
        MODEL, workspace=workspace, system=PARENT, subagents=[REVIEWER, FINDER], max_agents=1
    )
    result = agent.run("Review and find.")
    assert result.status.value == "success", result.error
    started = [e for e in _events(result.log_path) if isinstance(e, SubagentStarted)]
    spans = sorted(
        (events[0].ts, events[-1].ts)
        for events in (
            _events(result.log_path.parent.parent / e.run_id / "events.jsonl") for e in started
        )
    )
    # One after the other: the second began after the first had ended.
    assert spans[0][1] <= spans[1][0]


def test_permission_mode_plan_denies_a_childs_write_and_bypass_permissions_grants_nothing(
    workspace: Path, api: Any
) -> None:
    from ruizn.effects.agents.files import parse_definition

    def writes(body: dict[str, Any], index: int) -> Reply:
        if turns(body) == 0:
            write = ToolUse("toolu_w", "write_file", {"path": "out.md", "content": "x\n"})
            return Stream((write,), stop_reason="tool_use")
        return Stream((Text(f"Told: {tool_results(body)[0]['content']}"),))

    planner = ruizn.Subagent(
        name="planner", description="Plans.", prompt="You plan.", permission_mode="plan"
    )
    # A workspace's file asking for bypassPermissions: its child is asked like any other.
    bypasser = parse_definition(
        "---\nname: bypasser\ndescription: Bypasses.\npermissionMode: bypassPermissions\n"
        "---\nYou bypass.\n",
        ".ruizn/agents/bypasser.md",
    )
    api(
        {
            PARENT: _lead(
                _call("toolu_a", "planner", "Plan it"), _call("toolu_b", "bypasser", "Do it")
            ),
            "You plan": writes,
            "You bypass": writes,
        }
    )
    asked: list[str] = []

    def approve(call: Any) -> bool:
        asked.append(call.name)
        return False

    agent = ruizn.Agent(
        MODEL, workspace=workspace, system=PARENT, subagents=[planner, bypasser], approve=approve
    )
    result = agent.run("Go.")
    assert result.status.value == "success", result.error
    assert not (workspace / "out.md").exists()
    # The planner's write was denied by its mode, never put to the person; the bypasser's
    # was asked, under the parent's `ask`.
    assert asked == ["bypasser \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} write_file"]
    decided = {}
    for event in _events(result.log_path):
        if isinstance(event, SubagentStarted):
            child = result.log_path.parent.parent / event.run_id / "events.jsonl"
            decided[event.agent] = [
                (e.approved, e.by)
                for e in _events(child)
                if type(e).__name__ == "ToolApprovalDecided"
            ]
    assert decided == {"planner": [(False, "policy")], "bypasser": [(False, "user")]}
