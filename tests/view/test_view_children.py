"""`ruizn view PARENT` draws each child run inside the `agent` call that started it: a
parent and two children recorded against the local Messages API, the page's data read,
then the page as headless Chromium draws it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ruizn.cli.view import view_run
from ruizn.effects.runlog.reader import iter_events
from ruizn.events import SubagentStarted
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
