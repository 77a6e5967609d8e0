"""The rerun law: any run, re-driven from its own log (`ruizn.cassette.rerun`, a `Cassette` for its
model) with tools that answer what they answered then, is identical to the recording: no
divergence, the same history, status, steps and usage, and its own log rebuilds it.

The runs are the real runner's (runs.simulate: failed and retried calls, parallel tools,
approvals answered at a prompt or left waiting and decided by a resume, messages added by
continue); the re-drive is the real one, through ruizn.Agent, a file store and the trust
record. And a re-drive whose tool answers otherwise, once, is stopped exactly there.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ruizn.cassette.rerun import Rerun, rerun_async
from ruizn.effects.runlog.store import FileStore, replay
from ruizn.effects.runlog.trust import TrustStore
from ruizn.effects.tools.base import BaseTool
from ruizn.events import Event, LlmResponse, RunStarted, ToolCallFinished, ToolCallStarted
from ruizn.recording import RecordingError
from ruizn.serde import encode
from ruizn.shell.agent import Agent
from ruizn.state import JsonObject, ToolResult
from tests.properties.runs import SCALE, simulate

RERUNS = settings(
    max_examples=25 * SCALE,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


class _Replaying(BaseTool):
    """A tool of the recorded run that answers each call with what it answered then (in the
    order the calls with that input started)."""

    description = "a generated tool"
    input_schema: JsonObject = {"type": "object"}  # noqa: RUF012 - read-only class data

    def __init__(self, like: BaseTool, answers: dict[str, list[ToolResult]]) -> None:
        super().__init__()
        self.name = like.name  # type: ignore[misc]
        self.read_only = like.read_only  # type: ignore[misc]
        self.needs_approval = like.needs_approval
        self._answers = answers
        self.changed: ToolResult | None = None  # answer this instead, once

    async def invoke(self, input: JsonObject) -> ToolResult:
        answer = self._answers[_key(self.name, input)].pop(0)
        if self.changed is not None:
            answer, self.changed = self.changed, None
        return answer


def _key(name: str, input: JsonObject) -> str:
    return name + "\n" + json.dumps(input, sort_keys=True)


def _answers(events: tuple[Event, ...]) -> dict[str, list[ToolResult]]:
    started: dict[str, str] = {}
    results: dict[str, ToolResult] = {}
    order: list[str] = []
    for event in events:
        if isinstance(event, ToolCallStarted):
            started[event.id] = _key(event.name, event.input)
            order.append(event.id)
        elif isinstance(event, ToolCallFinished):
            results[event.id] = event.result
    answers: dict[str, list[ToolResult]] = defaultdict(list)
    for call in order:
        answers[started[call]].append(results[call])
    return answers


def _recorded(tmp: Path, events: tuple[Event, ...], trust: TrustStore) -> str:
    first = events[0]
    assert isinstance(first, RunStarted)
    log = tmp / "runs" / first.run_id / "events.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("".join(encode(e) + "\n" for e in events), encoding="utf-8")
    trust.closed(first, log)  # as ruizn leaves a run it wrote here
    return first.run_id


def _rerun(tmp: Path, run: Any, *, change: ToolResult | None = None) -> tuple[Rerun, Any]:
    trust = TrustStore(tmp / "state")
    run_id = _recorded(tmp, run.events, trust)
    answers = _answers(run.events)
    tools = [_Replaying(tool, answers) for tool in run.tools]
    if change is not None:
        tools[0].changed = change
    (tmp / "ws").mkdir()
    agent = Agent(
        tools=tools,
        builtins=False,
        store=FileStore(tmp / "runs"),
        trust_store=trust,
        workspace=tmp / "ws",
    )
    return anyio.run(lambda: rerun_async(agent, run_id)), tools


@RERUNS
@given(st.data(), st.integers(1, 4), st.booleans(), st.booleans())
def test_a_rerun_whose_tools_answer_as_recorded_is_identical_to_the_recording(
    tmp_path_factory: pytest.TempPathFactory,
    data: st.DataObject,
    max_steps: int,
    errors: bool,
    approvals: bool,
) -> None:
    run = simulate(data, max_steps=max_steps, errors=errors, approvals=approvals, continues=True)
    if not any(isinstance(e, LlmResponse) for e in run.events):
        with pytest.raises(RecordingError, match="no model reply"):
            _rerun(tmp_path_factory.mktemp("rerun"), run)
        return  # every call failed: nothing to serve, refused before anything is written
    done, _ = _rerun(tmp_path_factory.mktemp("rerun"), run)
    assert done.divergence is None, "\n".join(done.divergence.lines())
    assert done.state.messages == run.final.messages
    assert (done.state.status, done.state.step, done.state.usage) == (
        run.final.status,
        run.final.step,
        run.final.usage,
    )
    assert done.log_path is not None
    assert replay(done.log_path) == done.state


@RERUNS
@given(st.data(), st.integers(2, 4), st.booleans())
def test_a_rerun_stops_at_the_first_tool_result_that_differs_naming_it(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, max_steps: int, errors: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=errors, tools=True)
    first_look = next(
        (e for e in run.events if isinstance(e, ToolCallStarted) and e.name == "look"), None
    )
    if first_look is None:
        return  # the model never called the tool whose answer changes
    recorded = next(
        e for e in run.events if isinstance(e, ToolCallFinished) and e.id == first_look.id
    )
    changed = ToolResult.ok(recorded.result.content + " (changed)")
    done, _ = _rerun(tmp_path_factory.mktemp("rerun"), run, change=changed)
    assert done.divergence is not None
    assert done.divergence.call_id == first_look.id
    assert done.divergence.tool == "look"
    assert done.divergence.seq == recorded.seq
    assert done.divergence.now.endswith(" (changed)")
    assert done.log_path is not None
    assert replay(done.log_path) == done.state
