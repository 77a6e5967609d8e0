"""Laws of the two projections of a log (`ruizn.view.timeline`, `ruizn.spans`) and of the live
exporter, over runs of the real runner (tests/properties/runs.simulate: drawn replies,
failures, tool results, approvals, crashes and resumes), in-process."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest
from attrs import evolve
from hypothesis import given
from hypothesis import strategies as st

from ruizn.effects.telemetry.otlp import LiveExporter, MemorySender
from ruizn.events import (
    LlmCallStarted,
    LlmResponse,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolCallFinished,
    ToolCallStarted,
)
from ruizn.spans import SpanBuilder, project_spans, trace_id
from ruizn.state import ToolUseBlock
from ruizn.view.page import page_data, script_json
from ruizn.view.timeline import project
from tests.properties.runs import json_values, runs_settings, simulate, texts

RUNS = runs_settings(60)


@RUNS
@given(st.data(), st.integers(1, 5), st.booleans(), st.booleans())
def test_spans_form_one_trace_with_a_span_per_session_call_and_answered_tool(
    data: st.DataObject, max_steps: int, errors: bool, crashes: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=errors, crashes=crashes, approvals=True)
    events = run.events
    spans = project_spans(events)
    run_id = events[0].run_id if isinstance(events[0], RunStarted) else ""
    ids = [s.span_id for s in spans]
    assert len(set(ids)) == len(ids)
    assert {s.trace_id for s in spans} == {trace_id(run_id)}
    roots = [s for s in spans if s.parent_id is None]
    assert len(roots) == 1
    assert roots[0].name == "invoke_agent ruizn"
    assert all(s.parent_id in set(ids) for s in spans if s.parent_id is not None)
    assert all(s.start_ns <= s.end_ns for s in spans)
    names = Counter(s.name.split(" ", 1)[0] for s in spans)
    sessions = sum(isinstance(e, RunStarted | RunResumed) for e in events)
    assert names["invoke_agent"] == sessions == run.sessions
    assert names["chat"] == sum(isinstance(e, LlmCallStarted) for e in events)
    finished = {e.id for e in events if isinstance(e, ToolCallFinished)}
    started = {e.id for e in events if isinstance(e, ToolCallStarted)}
    assert names["execute_tool"] == len(finished | started)
    # the tokens on the chat spans add up to the run's own totals
    last = next(e for e in reversed(events) if isinstance(e, RunFinished))
    chats = [s.attrs for s in spans if s.name.startswith("chat ")]
    out = sum(int(a.get("gen_ai.usage.output_tokens", 0)) for a in chats)
    prompt = sum(int(a.get("gen_ai.usage.input_tokens", 0)) for a in chats)
    assert out == last.usage.output_tokens
    assert prompt == last.usage.total_input_tokens
    # nothing of the conversation is in a span: only names, ids, numbers and errors
    for span in spans:
        for key, value in span.attributes:
            if isinstance(value, str) and key not in _TEXT_KEYS:
                raise AssertionError(f"{span.name} carries {key}={value!r}")


# The string attributes a span may carry: names, ids, kinds, statuses, error types.
_TEXT_KEYS = frozenset(
    {
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.agent.name",
        "gen_ai.request.model",
        "gen_ai.conversation.id",
        "gen_ai.tool.name",
        "gen_ai.tool.call.id",
        "gen_ai.tool.type",
        "ruizn.run.id",
        "ruizn.run.status",
        "ruizn.request_id",
        "ruizn.approval.by",
        "error.type",
    }
)


@RUNS
@given(st.data(), st.integers(1, 4), st.booleans(), st.booleans())
def test_a_span_once_ended_in_a_prefix_of_the_log_never_changes(
    data: st.DataObject, max_steps: int, errors: bool, crashes: bool
) -> None:
    """The same log gives the same trace, and appending to it (a resume, a run still going)
    only adds spans: what a live export sent is what a later export sends."""
    run = simulate(data, max_steps=max_steps, errors=errors, crashes=crashes, approvals=True)
    whole = project_spans(run.events)
    assert whole == project_spans(run.events)
    by_id = {s.span_id: s for s in whole}
    cut = data.draw(st.integers(1, len(run.events)), label="cut")
    builder = SpanBuilder()
    for event in run.events[:cut]:
        for span in builder.feed(event):
            assert by_id[span.span_id] == span
    for span in builder.close():  # what the prefix left open is cut, and says so
        assert span.attrs["ruizn.incomplete"] is True
        assert span.span_id in by_id


@RUNS
@given(st.data(), st.integers(1, 5), st.booleans(), st.booleans())
def test_the_timeline_holds_every_call_and_every_tool_use_once(
    data: st.DataObject, max_steps: int, errors: bool, crashes: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=errors, crashes=crashes, approvals=True)
    cut = data.draw(st.integers(1, len(run.events)), label="cut")
    for events in (run.events, run.events[:cut]):  # a log cut anywhere still projects
        timeline = project(events)
        attempts = [a for step in timeline.steps for a in step.attempts]
        assert len(attempts) == sum(isinstance(e, LlmCallStarted) for e in events)
        asked = [
            b.id
            for e in events
            if isinstance(e, LlmResponse)
            for b in e.content
            if isinstance(b, ToolUseBlock)
        ]
        shown = [t.id for step in timeline.steps for t in step.tools]
        assert Counter(shown) >= Counter(asked)
        for event in events:
            if isinstance(event, ToolCallFinished):
                tool = next(t for s in timeline.steps for t in s.tools if t.id == event.id)
                assert tool.result is not None
        # calls of one step that overlap in time never share a lane
        for step in timeline.steps:
            ran = [t for t in step.tools if t.start is not None]
            for i, a in enumerate(ran):
                for b in ran[i + 1 :]:
                    a_end = a.end if a.end is not None else a.start
                    b_end = b.end if b.end is not None else b.start
                    assert a.start is not None
                    assert b.start is not None
                    if a.start < b_end and b.start < a_end:
                        assert a.lane != b.lane
        # cost is unknown until the log has prices: never 0 for a call that was made
        assert all(a.cost is None for a in attempts)
        if any(a.usage is not None for a in attempts):
            assert timeline.cost is None
        data_text = script_json(page_data(timeline))
        assert not set("<>&\u2028\u2029") & set(data_text)
        assert json.loads(data_text) == json.loads(json.dumps(page_data(timeline)))


@given(json_values, texts)
def test_script_json_is_inert_inside_a_script_element_and_round_trips(
    value: object, text: str
) -> None:
    data = {"v": value, "t": text + "</script><!--<script>\u2028&amp;"}
    out = script_json(data)
    assert out.isascii()
    assert not set("<>&") & set(out)
    assert json.loads(out) == data


@RUNS
@given(st.data(), st.integers(1, 3))
def test_a_calls_cost_is_the_one_it_recorded_and_one_unknown_makes_the_total_unknown(
    data: st.DataObject, max_steps: int
) -> None:
    run = simulate(data, max_steps=max_steps, errors=True)
    prices = iter(data.draw(st.lists(st.none() | st.floats(0, 5), min_size=len(run.events))))
    events = [
        evolve(e, cost=next(prices), priced_by="genai-prices test")
        if isinstance(e, LlmResponse)
        else e
        for e in run.events
    ]
    recorded = [e.cost for e in events if isinstance(e, LlmResponse)]
    timeline = project(events)
    shown = [a.cost for step in timeline.steps for a in step.attempts if a.usage is not None]
    assert shown == recorded
    if None in recorded:
        assert timeline.cost is None  # never $0.00 for a call nobody priced
    else:
        assert timeline.cost == pytest.approx(sum(c for c in recorded if c is not None))


@RUNS
@given(st.data(), st.integers(1, 4), st.booleans())
def test_the_live_exporter_sends_exactly_the_spans_of_the_log(
    data: st.DataObject, max_steps: int, crashes: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=True, crashes=crashes, approvals=True)
    sender = MemorySender()
    exporter = LiveExporter(sender, flush_timeout=30)
    for event in run.events:
        exporter(event)
    exporter.close()
    assert exporter.complete
    assert sender.closed
    assert sender.spans == list(project_spans(run.events))
    assert exporter.sent == len(sender.spans)


def test_a_collector_that_hangs_or_fails_never_holds_the_run() -> None:
    from ruizn.events import LlmToken
    from ruizn.settings import RunSettings
    from ruizn.state import Status, TextBlock, Usage

    events = [
        RunStarted(seq=1, ts=1.0, run_id="r", goal="g", settings=RunSettings(model="m")),
        LlmCallStarted(seq=2, ts=1.1, step=1),
        *(LlmToken(seq=3 + i, ts=1.2, text="x") for i in range(1000)),
        LlmResponse(
            seq=1003,
            ts=1.3,
            content=(TextBlock(text="x"),),
            stop_reason="end_turn",
            usage=Usage(output_tokens=1),
        ),
        RunFinished(seq=1004, ts=1.4, status=Status.SUCCESS, steps=1, elapsed=0.4),
    ]
    hold = threading.Event()
    for sender in (MemorySender(hold=hold), MemorySender(fail="refused")):
        exporter = LiveExporter(sender, flush_timeout=0.2)
        fed = threading.Thread(target=lambda ex=exporter: [ex(e) for e in events])
        fed.start()
        fed.join(10)
        assert not fed.is_alive(), "a subscriber call waited on the collector"
        exporter.close()  # returns: after the flush timeout, or at once once a send failed
        assert not exporter.complete
        assert exporter.failure is not None
    hold.set()


def test_a_grandchilds_log_alone_puts_its_spans_in_the_top_runs_trace() -> None:
    """A subagent's run_started names its tree's top run (`root`) when its parent is a
    subagent too, so `ruizn export` of its log alone nests it in the top run's trace; one
    written before `root` was recorded still reads, in its parent's trace."""
    from ruizn.events import Parent
    from ruizn.reducers import start
    from ruizn.serde import decode, encode
    from ruizn.settings import RunSettings

    def started(parent: Parent) -> RunStarted:
        return RunStarted(
            seq=1, ts=1.0, run_id="grandchild", goal="g", settings=RunSettings(), parent=parent
        )

    deep = Parent(run_id="child", seq=3, kind="agent", agent="a", call="c", root="top")
    event = started(deep)
    assert decode(encode(event)) == event
    assert {s.trace_id for s in project_spans([event])} == {trace_id("top")}
    child = start(event)
    assert child.agent_of == ("child", "a")
    assert child.agent_root == "top"
    old = evolve(deep, root=None)
    assert "root" not in encode(started(old))
    assert {s.trace_id for s in project_spans([started(old)])} == {trace_id("child")}
    assert start(started(old)).agent_root == "child"
