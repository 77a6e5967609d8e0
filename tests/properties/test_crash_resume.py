"""Laws over crashes: the real runner, killed at any event and resumed from its log.

A crash is the sink failing from a drawn event on (a dead process writes nothing more),
including mid-stream and between a tool's run and its result. After each crash the run is
rebuilt from the log alone and resumed, as `ruizn resume` does, up to three times.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from ruizn.events import RunResumed, ToolCallFinished, ToolCallStarted
from ruizn.reducers import rebuild
from ruizn.state import Status, ToolUseBlock
from tests.properties.runs import runs_settings, simulate

RUNS = runs_settings(80)


@RUNS
@given(st.data(), st.integers(1, 6), st.booleans())
def test_a_crash_at_any_event_then_resume_answers_every_tool_use_exactly_once(
    data: st.DataObject, max_steps: int, errors: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=errors, crashes=True)
    # seq is contiguous across every session: no gap, no repeat
    assert [e.seq for e in run.events] == list(range(1, len(run.events) + 1))
    assert sum(isinstance(e, RunResumed) for e in run.events) == run.sessions - 1
    # the log alone rebuilds exactly the state the last session ended with
    assert rebuild(run.events) == run.final
    assert run.final.status is not Status.RUNNING
    # every tool_use the model asked for is answered exactly once
    asked = Counter(
        b.id for m in run.final.messages for b in m.content if isinstance(b, ToolUseBlock)
    )
    answered = Counter(e.id for e in run.events if isinstance(e, ToolCallFinished))
    assert answered == asked
    # a tool that is not read-only never starts twice (a crash mid-call is answered
    # `interrupted` on resume), and never runs more often than it was started
    starts = Counter(
        e.id for e in run.events if isinstance(e, ToolCallStarted) and e.name == "change"
    )
    assert all(count == 1 for count in starts.values())
    assert run.ran.count("change") <= len(starts)
