"""`rerun PARENT` re-drives each child from its own recording: a parent and two children
recorded against the local Messages API, then re-driven with no API at all."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import anyio
import pytest

import ruizn
from ruizn.cassette.rerun import rerun_async
from ruizn.effects.runlog.reader import iter_events
from ruizn.events import RunStarted, SubagentStarted, ToolApprovalDecided
from ruizn.resuming import UntrustedRun
from tests.fakeapi.replies import Reply, Stream, Text, ToolUse, tool_results, turns
from tests.shell.agent.test_subagents import MODEL, PARENT, _call, _lead, api

__all__ = ["api"]  # the fixture, shared with test_subagents.py

READER = ruizn.Subagent(name="reader", description="Reads.", prompt="You read files.", tools="Read")
WRITER = ruizn.Subagent(
    name="writer", description="Writes.", prompt="You write files.", tools="Write"
)


def _tool_then_answer(call: ToolUse) -> Any:
    def reply(body: dict[str, Any], index: int) -> Reply:
        if turns(body) == 0:
            return Stream((call,), stop_reason="tool_use")
        return Stream((Text(f"Got: {tool_results(body)[0]['content']}"),))

    return reply


def _closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def _recorded(
    workspace: Path, api: Any, monkeypatch: Any, **options: Any
) -> tuple[ruizn.Agent, ruizn.RunResult]:
    api(
        {
            PARENT: _lead(
                _call("toolu_a", "reader", "Read README.md"),
                _call("toolu_b", "writer", "Write notes"),
            ),
            "You read": _tool_then_answer(ToolUse("toolu_r", "read_file", {"path": "README.md"})),
            "You write": _tool_then_answer(
                ToolUse("toolu_w", "write_file", {"path": "notes.md", "content": "hi\n"})
            ),
        }
    )
    agent = ruizn.Agent(
        MODEL,
        workspace=workspace,
        system=PARENT,
        subagents=[READER, WRITER],
        approve=lambda call: True,  # the writer's write, approved at the "prompt"
        **options,
    )
    result = agent.run("Read and write.")
    assert result.status.value == "success", result.error
    assert "A small demo project" in result.output
    # From here on no API answers: a rerun that asked it would fail.
    monkeypatch.setenv("ANTHROPIC_BASE_URL", _closed_port())
    return agent, result


def test_a_rerun_of_a_parent_re_drives_each_child_from_its_own_recording(
    workspace: Path, api: Any, monkeypatch: Any
) -> None:
    agent, result = _recorded(workspace, api, monkeypatch)
    done = anyio.run(lambda: rerun_async(agent, result.run_id))
    assert done.divergence is None, done.divergence
    assert done.state.status.value == "success"
    assert done.calls == 6  # the parent's two calls, two for each child
    # The re-drive's children are runs of its own, each named as its child.
    assert done.log_path is not None
    started = [e for e in iter_events(done.log_path) if isinstance(e, SubagentStarted)]
    assert {e.agent for e in started} == {"reader", "writer"}
    for event in started:
        child_log = done.log_path.parent.parent / event.run_id / "events.jsonl"
        child = list(iter_events(child_log))
        assert isinstance(child[0], RunStarted)
        assert child[0].parent is not None
        assert child[0].parent.run_id == done.run_id
        if event.agent == "writer":
            # The writer's write was answered as the person answered it in its recording.
            decided = [e for e in child if isinstance(e, ToolApprovalDecided)]
            assert [(e.id, e.approved) for e in decided] == [("toolu_w", True)]
    assert (done.workspace / "notes.md").read_text() == "hi\n"


def test_a_child_that_leaves_its_recording_is_named_in_the_divergence(
    workspace: Path, api: Any, monkeypatch: Any
) -> None:
    agent, result = _recorded(workspace, api, monkeypatch)
    reader = next(
        e.run_id
        for e in iter_events(result.log_path)
        if isinstance(e, SubagentStarted)
        if e.agent == "reader"
    )
    # The file the reader read is not what it was: its second request differs.
    (workspace / "README.md").write_text("# Changed\n", encoding="utf-8")
    done = anyio.run(lambda: rerun_async(agent, result.run_id, in_place=True))
    assert done.divergence is not None
    assert done.divergence.child == f"agent reader (run {reader})"
    assert (done.divergence.call_id, done.divergence.tool) == ("toolu_r", "read_file")
    head = done.divergence.lines()[0]
    assert f"of agent reader (run {reader})" in head
    assert "Changed" in json.dumps(done.divergence.lines())
    assert done.state.status.value == "error"


def test_a_childs_stop_for_a_decision_is_re_driven_with_the_decision_its_resume_gave(
    workspace: Path, api: Any, monkeypatch: Any
) -> None:
    api(
        {
            PARENT: _lead(_call("toolu_b", "writer", "Write notes")),
            "You write": _tool_then_answer(
                ToolUse("toolu_w", "write_file", {"path": "notes.md", "content": "hi\n"})
            ),
        }
    )
    agent = ruizn.Agent(MODEL, workspace=workspace, system=PARENT, subagents=[WRITER])
    stopped = agent.run("Write.")
    assert stopped.status.value == "awaiting_approval", stopped.error
    done = agent.resume(stopped.run_id, approve=["toolu_w"])
    assert done.status.value == "success", done.error
    monkeypatch.setenv("ANTHROPIC_BASE_URL", _closed_port())

    again = anyio.run(lambda: rerun_async(agent, done.run_id))
    assert again.divergence is None, again.divergence
    assert again.state.status.value == "success"
    assert (again.workspace / "notes.md").read_text() == "hi\n"


def test_a_child_log_changed_since_it_was_written_makes_the_rerun_ask(
    workspace: Path, api: Any, monkeypatch: Any
) -> None:
    agent, result = _recorded(workspace, api, monkeypatch)
    reader = next(
        e.run_id
        for e in iter_events(result.log_path)
        if isinstance(e, SubagentStarted) and e.agent == "reader"
    )
    log = result.log_path.parent.parent / reader / "events.jsonl"
    text = log.read_text(encoding="utf-8")
    # Still a valid log: only its recorded answer to the prompt was edited.
    log.write_text(text.replace("Got: ", "Gxt: "), encoding="utf-8")
    with pytest.raises(UntrustedRun) as refused:
        anyio.run(lambda: rerun_async(agent, result.run_id))
    assert f"agent reader (run {reader})" in refused.value.reason
    # Accepted (--trust): re-driven, and the child's edited answer shows as a difference.
    done = anyio.run(lambda: rerun_async(agent, result.run_id, trust=True))
    assert done.divergence is not None
    assert done.divergence.call_id == "toolu_a"
