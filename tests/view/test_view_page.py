"""`ruizn view`: the page of a real run, drawn by headless Chromium (Debian's `chromium`).

What a person sees is checked in the DOM Chromium dumps after the page's script ran: the
steps, the tool calls (parallel ones in lanes of their own), the retry, the denied call, the
answer. A hostile transcript (the model, a file, a tool input and the goal all carrying
markup and script) is shown as text and runs nothing. A screenshot of the real run is kept
as an artifact (RUIZN_TEST_ARTIFACTS, else the test's tmp folder), never compared.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import cli_env, run_cli
from tests.fakeapi import Stream, Text, ToolUse, tool_loop
from tests.view.chromium import dump_dom, screenshot
from tests.view.conftest import Dom, artifacts, view_page
from tests.view.demo import FINAL_ANSWER, demo_run, demo_script, make_workspace


def test_the_page_of_a_real_run_shows_its_steps_calls_and_answer(
    tmp_path: Path, server_factory: Any
) -> None:
    workspace = make_workspace(tmp_path / "ws")
    run = demo_run(workspace, server_factory(demo_script()))
    page = view_page(workspace)
    assert page == run.log_path.parent / "view.html"
    html = page.read_text(encoding="utf-8")
    # self-contained: nothing is loaded from anywhere, and the policy forbids it too
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=", html)
    assert "default-src 'none'" in html

    dom = Dom(dump_dom(page))
    root = dom.tags("html")[0]
    assert root.get("data-ready") == "1", "the page's script did not finish"
    text = dom.text
    run_id = run.log_path.parent.name
    assert dom.tags("title")
    assert f"ruizn · {run_id}" in text
    assert FINAL_ANSWER in text
    for step in ("Step 1", "Step 2", "Step 3"):
        assert step in text
    assert "3 steps" in text
    assert "4 model calls" in text
    assert "4 tool calls" in text
    for name in ("read_file", "fetch_docs", "write_file"):
        assert name in text
    # the retry, the failed tool, the call the policy denied, the run's end
    assert "attempt 1 failed" in text
    assert "overloaded_error (529)" in text
    assert "retried in" in text
    assert "error: not_found" in text
    assert "denied by policy" in text
    assert "finished: success · 3 steps" in text
    # a long result: the page holds its first 4,000 characters and says how long it is
    assert "result · 5,040 chars" in text
    assert "showing 4,000 of 5,040 characters (all of it is in the log)" in text
    # each call's cost and the run's, as the log recorded them when the calls were made
    costs = [
        e["cost"]
        for e in map(json.loads, run.log_path.read_text(encoding="utf-8").splitlines())
        if e["type"] == "llm_response"
    ]
    assert len(costs) == 3
    assert all(isinstance(c, float) and c > 0 for c in costs)
    assert f"${costs[0]:.4f}" in text
    assert f"${sum(costs):.4f}" in text
    assert "cost unknown" not in text
    # tokens and cache reads of the first call as the log has them (1,850 + 1,600 written)
    assert "in 3,450 · out 96 · cache read 0 · cache write 1,600" in text
    # step 1 asked for three calls at once: calls whose run times overlapped (as the log
    # has them) are drawn in lanes of their own, and no more lanes than the overlap needs.
    # The two fetch_docs calls sleep 0.35 s and 0.2 s side by side, so they always overlap;
    # read_file may finish before they start (it reads in place on a local disk).
    step1_bars = _bars_of_step(dump_dom(page), 1)
    tool_bars = [(title.split(" · ")[0], top) for cls, top, title in step1_bars if "tool" in cls]
    assert sorted(name for name, _ in tool_bars) == ["fetch_docs", "fetch_docs", "read_file"]
    spans = _tool_spans(run.log_path, step=1)
    assert len(spans) == 3
    placed = list(zip(spans, (top for _, top in tool_bars), strict=True))
    for (a, top_a), (b, top_b) in _pairs(placed):
        if a[0] < b[1] and b[0] < a[1]:  # their run times overlapped
            assert top_a != top_b
    assert len({top for _, top in tool_bars}) == _most_at_once(spans)
    assert _most_at_once(spans) >= 2  # the two fetch_docs calls
    assert any("failed" in cls for cls, _, _ in step1_bars)  # the failed attempt's bar

    shot = screenshot(page, artifacts(tmp_path) / "view.png")
    assert shot.stat().st_size > 10_000  # a drawn page, not a blank one


def _bars_of_step(html: str, step: int) -> list[tuple[str, int, str]]:
    """(class, top px, title) of each bar in the timeline row of `step`, in page order."""
    row = html.split(f'data-step="{step}"', 1)[1].split('class="row', 1)[0]
    bars = re.findall(r'<div (class="bar [^"]*"[^>]*)>', row)
    found = []
    for attrs in bars:
        cls = re.search(r'class="([^"]*)"', attrs)
        style = re.search(r'style="([^"]*)"', attrs)
        title = re.search(r'title="([^"]*)"', attrs)
        top = re.search(r"top: (\d+)px", style.group(1)) if style else None
        assert cls is not None
        found.append(
            (cls.group(1), int(top.group(1)) if top else 0, title.group(1) if title else "")
        )
    return found


def _tool_spans(log: Path, step: int) -> list[tuple[float, float]]:
    """(started, finished) of each tool call of `step`, in the order they were asked for."""
    events = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    responses = [e for e in events if e["type"] == "llm_response"]
    asked = [b["id"] for b in responses[step - 1]["content"] if b.get("type") == "tool_use"]
    started = {e["id"]: e["ts"] for e in events if e["type"] == "tool_call_started"}
    finished = {e["id"]: e["ts"] for e in events if e["type"] == "tool_call_finished"}
    return [(started[i], finished[i]) for i in asked]


def _pairs(items: list[Any]) -> list[tuple[Any, Any]]:
    return [(a, b) for n, a in enumerate(items) for b in items[n + 1 :]]


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most calls running at one moment."""
    return max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)


PAYLOADS = (
    "<script>document.documentElement.setAttribute('data-pwned','script')</script>",
    "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','img')\">",
    "</script><script>document.title='PWNED'</script>",
    "<a href=\"javascript:document.title='PWNED'\">click</a>",
    "<svg onload=\"document.documentElement.setAttribute('data-pwned','svg')\"></svg>",
    "<!-- <script>",
    "\u2028\u2029 &lt;b&gt; & <b>bold?</b>",
)
HOSTILE = "\n".join(PAYLOADS)


def test_a_hostile_transcript_is_shown_as_text_and_runs_nothing(
    tmp_path: Path, server_factory: Any
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "evil.md").write_text(HOSTILE, encoding="utf-8")
    server = server_factory(
        [
            Stream(
                (
                    Text("Reading it. " + HOSTILE),
                    ToolUse("toolu_evil_1", "read_file", {"path": "evil.md"}),
                    ToolUse("toolu_evil_2", "read_file", {"path": PAYLOADS[1]}),
                ),
                stop_reason="tool_use",
            ),
            Stream((Text(HOSTILE),)),
        ]
    )
    goal = "Summarise evil.md " + PAYLOADS[2]
    run = run_cli(["run", "--goal", goal], workspace=workspace, base_url=server.base_url)
    assert run.code == 0, run.stderr
    page = view_page(workspace)
    html = page.read_text(encoding="utf-8")
    # the data cannot close its element: no `<` from the log is in the file at all
    data = html.split('<script type="application/json" id="run-data">', 1)[1]
    data = data.split("</script>", 1)[0]
    assert "<" not in data
    assert ">" not in data
    assert "&" not in data
    assert json.loads(data)["run"]["goal"]["t"] == goal

    dom = Dom(dump_dom(page))
    root = dom.tags("html")[0]
    assert root.get("data-ready") == "1"
    assert "data-pwned" not in root
    assert not [a for _, a in dom.elements if "data-pwned" in a]
    assert len(dom.tags("script")) == 2  # the data and the page's own script, nothing more
    assert not dom.tags("img")
    assert not dom.tags("svg")
    assert not dom.tags("b")
    assert not dom.tags("a"), "no link is ever made from the log"
    assert not [a for _, a in dom.elements if any(k.startswith("on") for k in a)]
    assert not [a for _, a in dom.elements if "href" in a or "src" in a]
    titles = re.findall(r"<title>(.*?)</title>", dump_dom(page), re.S)
    assert titles == [f"ruizn · {run.log_path.parent.name}"]
    # ... and every payload is on the page, as the text it is: in the goal, the model's
    # words, the tool's input and its result
    shown = dom.text
    for payload in PAYLOADS:
        visible_form = payload.replace("\u2028", "").replace("\u2029", "")
        assert shown.count(visible_form.strip()) >= 3, payload


def test_view_writes_where_o_says_and_opens_the_browser(
    tmp_path: Path, server_factory: Any
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    server = server_factory([Stream((Text("hello"),))])
    assert run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url).code == 0
    opened = tmp_path / "opened.txt"
    browser = tmp_path / "browser.py"
    browser.write_text(
        f"import sys, pathlib\npathlib.Path({str(opened)!r}).write_text(sys.argv[1])\n",
        encoding="utf-8",
    )
    env = cli_env(None, BROWSER=f"{sys.executable} {browser} %s")
    out = tmp_path / "pages" / "mine.html"
    out.parent.mkdir()
    result = run_cli(["view", "last", "-o", str(out), "--open"], workspace=workspace, env=env)
    assert result.code == 0, result.stderr
    assert result.stdout == f"{out}\n"
    assert out.is_file()
    assert not list(out.parent.glob(".*tmp"))
    assert opened.read_text() == out.resolve().as_uri()


def test_view_errors_are_one_line(tmp_path: Path, server_factory: Any) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    missing = run_cli(["view", "nope"], workspace=workspace)
    assert missing.code == 2
    assert missing.stdout == ""
    assert missing.stderr.startswith("ruizn: error: no run 'nope'")
    assert missing.stderr.count("\n") == 1

    server = server_factory([Stream((Text("hello"),))])
    assert run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url).code == 0
    folder = tmp_path / "readonly"
    folder.mkdir()
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.access(folder, os.W_OK):  # root writes anyway: use a path that cannot be
            target = str(tmp_path / "no-such-folder" / "x.html")
        else:
            target = str(folder / "x.html")
        blocked = run_cli(["view", "last", "-o", target], workspace=workspace)
    finally:
        folder.chmod(stat.S_IRWXU)
    assert blocked.code == 2
    assert blocked.stdout == ""
    assert blocked.stderr.startswith("ruizn: error: cannot write")
    assert blocked.stderr.count("\n") == 1

    log = next((workspace / ".ruizn" / "runs").glob("*/events.jsonl"))
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    log.write_text(lines[0] + '{"v":2,"type":"nonsense","seq":2}\n' + "".join(lines[1:]))
    bad = run_cli(["view", "last"], workspace=workspace)
    assert bad.code == 2
    assert bad.stderr.startswith("ruizn: error: ")
    assert "line 2" in bad.stderr
    assert bad.stderr.count("\n") == 1


def test_view_db_draws_a_fleet_run_like_the_local_one(tmp_path: Path, server_factory: Any) -> None:
    pytest.importorskip(
        "sqlalchemy",
        reason="the fleet extra is missing: pip install -e '.[test]' in the checkout brings it",
    )
    workspace = make_workspace(tmp_path / "ws")
    run = demo_run(workspace, server_factory(demo_script()))
    run_id = run.log_path.parent.name
    # A fleet's database holds the log's lines as they are (what `ruizn batch` and the
    # workers write); put this run's there.
    from ruizn.fleet.database import EventStore

    db = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    store = EventStore(db)
    lines = run.log_path.read_text(encoding="utf-8").splitlines()
    store.append(run_id, [(i + 1, line) for i, line in enumerate(lines)])
    store.close()
    assert sqlite3.connect(tmp_path / "fleet.sqlite").execute("select 1").fetchone()

    local = view_page(workspace)
    result = run_cli(["view", "--db", db, run_id], workspace=workspace)
    assert result.code == 0, result.stderr
    fleet_page = workspace / result.stdout.strip()
    assert fleet_page.name == f"view-{run_id}.html"

    def run_data(page: Path) -> dict[str, Any]:
        html = page.read_text(encoding="utf-8")
        data = html.split('id="run-data">', 1)[1].split("</script>", 1)[0]
        loaded: dict[str, Any] = json.loads(data)
        loaded["run"].pop("source")
        return loaded

    assert run_data(fleet_page) == run_data(local)
    # export --db sends the spans a local export sends
    from tests.view.receiver import OtlpReceiver

    with OtlpReceiver() as local_spans, OtlpReceiver() as fleet_spans:
        assert run_cli(["export", "last", "--otlp", local_spans.url], workspace=workspace).code == 0
        fleet_export = run_cli(
            ["export", "--db", db, run_id, "--otlp", fleet_spans.url], workspace=workspace
        )
        assert fleet_export.code == 0, fleet_export.stderr
    assert [s.SerializeToString() for *_, s in fleet_spans.spans()] == [
        s.SerializeToString() for *_, s in local_spans.spans()
    ]
    unknown = run_cli(["view", "--db", db, "no-such-run"], workspace=workspace)
    assert unknown.code == 2
    assert "no run 'no-such-run' in the database" in unknown.stderr


def test_a_stopped_and_resumed_run_shows_both_sessions(tmp_path: Path, server_factory: Any) -> None:
    workspace = make_workspace(tmp_path / "ws")
    server = server_factory(tool_loop(2, final_text="All read."))
    first = run_cli(
        ["run", "--max-steps", "1", "read the README twice"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert first.code == 3, first.stderr
    env = cli_env(server.base_url)
    resumed = run_cli(["resume", "last", "--max-steps", "5"], workspace=workspace, env=env)
    assert resumed.code == 0, resumed.stderr
    dom = Dom(dump_dom(view_page(workspace)))
    text = dom.text
    assert "2 sessions" in text
    assert "finished: max steps · 1 step" in text
    assert "resumed at" in text
    assert "finished: success · 3 steps" in text
    assert "All read." in text
    # in time order: the first session's end, the resume, then the steps after it
    order = [text.index(s) for s in ("step 1", "finished: max steps", "resumed at", "step 2")]
    assert order == sorted(order)


def test_a_planted_view_html_link_is_replaced_never_written_through(
    tmp_path: Path, server_factory: Any
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    server = server_factory([Stream((Text("hello"),))])
    run = run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url)
    assert run.code == 0, run.stderr
    precious = tmp_path / "precious.txt"
    precious.write_text("mine", encoding="utf-8")
    (run.log_path.parent / "view.html").symlink_to(precious)
    page = view_page(workspace)
    assert precious.read_text(encoding="utf-8") == "mine"
    assert not page.is_symlink()
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
