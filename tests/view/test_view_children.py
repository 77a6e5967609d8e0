"""A run's children in its views: `ruizn view PARENT` draws each child run inside the
`agent` call that started it (the page's data, then the page as headless Chromium draws
it), and the spans of each child nest in the parent's trace, live and from the logs. A
parent and two children are recorded against the local Messages API."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ruizn.cli.view import _child_spans, view_run
from ruizn.effects.runlog.reader import iter_events
from ruizn.effects.telemetry.otlp import LiveExporter, MemorySender
from ruizn.events import SubagentStarted
from ruizn.spans import project_spans
from tests.shell.agent.test_subagents_rerun import _recorded, api
from tests.view.chromium import dump_dom
from tests.view.conftest import Dom

__all__ = ["api"]  # the fixture, shared with tests/shell/agent


def _data(page: Path) -> dict[str, Any]:
    html = page.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', html)
    assert found is not None
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def test_view_draws_each_child_inside_the_agent_call_that_started_it(
    workspace: Path, api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent, result = _recorded(workspace, api, monkeypatch)
    children = {
        e.agent: e.run_id for e in iter_events(result.log_path) if isinstance(e, SubagentStarted)
    }
    # `ruizn view PARENT`, in this process (the page is the same: the CLI calls this).
    assert view_run(agent.store(), result.run_id, out=None, open_browser=False) == 0
    page = result.log_path.parent / "view.html"

    data = _data(page)
    calls = {t["id"]: t for s in data["steps"] for t in s["tools"]}
    drawn = {calls[i]["child"]["agent"]: calls[i]["child"] for i in ("toolu_a", "toolu_b")}
    assert {name: c["run"] for name, c in drawn.items()} == children
    reader = drawn["reader"]
    assert (reader["status"], reader["steps"]) == ("success", 2)
    # Its own run, from its own log: its goal, its read_file call and what it read.
    assert reader["page"]["run"]["goal"]["t"] == "Read README.md"
    (read,) = [t for s in reader["page"]["steps"] for t in s["tools"]]
    assert read["name"] == "read_file"
    assert "A small demo project" in read["result"]["t"]
    assert "A small demo project" in reader["page"]["run"]["answer"]["t"]
    # On the parent's clock: the child started after the parent did.
    assert reader["page"]["steps"][0]["start"] > 0

    # A child whose log is gone is still named, from what the parent's log says.
    (result.log_path.parent.parent / children["writer"] / "events.jsonl").unlink()
    assert view_run(agent.store(), result.run_id, out=str(page), open_browser=False) == 0
    calls = {t["id"]: t for s in _data(page)["steps"] for t in s["tools"]}
    assert calls["toolu_b"]["child"]["page"] is None
    assert calls["toolu_b"]["child"]["status"] == "success"

    dom = Dom(dump_dom(page))
    assert dom.tags("html")[0].get("data-ready") == "1", "the page's script did not finish"
    text = dom.text
    assert f"agent reader · run {children['reader']} · success · 2 steps" in text
    assert "its run · 2 steps · ask reader" in text
    assert f"agent writer · run {children['writer']} · success" in text
    assert "its log is not here" in text
    assert len(dom.by_class("child")) == 2


def test_a_childs_spans_nest_under_the_call_that_started_it_in_the_parents_trace(
    workspace: Path, api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sender = MemorySender()
    exporter = LiveExporter(sender, flush_timeout=30)
    agent, result = _recorded(workspace, api, monkeypatch, subscribers=[exporter])
    exporter.close()
    assert exporter.complete
    spans = sender.spans
    (root,) = [s for s in spans if s.parent_id is None]
    assert root.name == "invoke_agent ruizn"
    assert {s.trace_id for s in spans} == {root.trace_id}  # one trace for the tree
    by_id = {s.span_id: s for s in spans}
    children = {
        e.agent: e.run_id for e in iter_events(result.log_path) if isinstance(e, SubagentStarted)
    }
    for agent_name, call_id in (("reader", "toolu_a"), ("writer", "toolu_b")):
        (invoke,) = [s for s in spans if s.name == f"invoke_agent {agent_name}"]
        assert invoke.attrs["gen_ai.operation.name"] == "invoke_agent"
        assert invoke.attrs["gen_ai.agent.name"] == agent_name
        assert invoke.attrs["gen_ai.agent.id"] == children[agent_name]
        # Under the parent's `agent` call, itself under the parent's invoke_agent span.
        call = by_id[invoke.parent_id]  # type: ignore[index]
        assert call.name == "execute_tool agent"
        assert call.attrs["gen_ai.tool.call.id"] == call_id
        assert call.attrs["ruizn.subagent.run_id"] == children[agent_name]
        assert call.parent_id == root.span_id
        # The child's own model calls and tools sit under its invoke_agent span.
        own = [s for s in spans if s.parent_id == invoke.span_id]
        assert [s.name for s in own].count(f"chat {invoke.attrs['gen_ai.request.model']}") == 2
        assert len([s for s in own if s.name.startswith("execute_tool")]) == 1

    # `ruizn export PARENT` sends the same spans, read from each log.
    parent = list(project_spans(iter_events(result.log_path)))
    exported = parent + _child_spans(
        agent.store(), list(children.values()), root.trace_id, {result.run_id}
    )
    assert sorted(exported, key=lambda s: s.span_id) == sorted(spans, key=lambda s: s.span_id)
