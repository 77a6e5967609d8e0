"""Never twice (#29), as one law over every tool that is not read-only: the real runner,
killed at any event (mid-call included), resumed from its log alone, with tools that need
approval and tools that do not. The rule lives once, as data: the `read_only` flag each tool
source recorded in run_started (decide.interrupted_calls); the shell's `bash` is one more
such tool, and tests/cli/test_shell.py kills a real command mid-run to show it."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from ruizn.events import RunResumed, ToolCallFinished, ToolCallStarted
from ruizn.resuming import interrupted_calls
from ruizn.state import ErrorType
from tests.properties.runs import runs_settings, simulate

RUNS = runs_settings(80)


@RUNS
@given(st.data(), st.integers(1, 6), st.booleans())
def test_a_tool_that_is_not_read_only_is_never_started_twice_whatever_the_kill_point(
    data: st.DataObject, max_steps: int, approvals: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=True, crashes=True, approvals=approvals)
    changing = {tool.name for tool in run.tools if not tool.read_only}
    assert changing  # the law is about them: the run must offer some
    starts = Counter(
        e.id for e in run.events if isinstance(e, ToolCallStarted) and e.name in changing
    )
    assert all(count == 1 for count in starts.values())
    # never executed more often than started (a crash may stop it before it acts)
    assert sum(run.ran.count(name) for name in changing) <= sum(starts.values())
    # a call the kill cut off (started, then a resume before its result) is answered
    # `interrupted`, telling the model its effects are unknown
    finished: set[str] = set()
    open_calls: set[str] = set()
    for event in run.events:
        if isinstance(event, ToolCallStarted) and event.name in changing:
            open_calls.add(event.id)
        elif isinstance(event, ToolCallFinished):
            finished.add(event.id)
            if event.id in open_calls and event.result.error_type == ErrorType.INTERRUPTED:
                open_calls.discard(event.id)
                continue
            open_calls.discard(event.id)
        elif isinstance(event, RunResumed):
            cut = open_calls - finished
            following = [
                e
                for e in run.events[run.events.index(event) + 1 :]
                if isinstance(e, ToolCallFinished) and e.id in cut
            ]
            assert {e.id for e in following} == cut
            assert all(e.result.error_type == ErrorType.INTERRUPTED for e in following)


@RUNS
@given(st.data(), st.integers(1, 6), st.booleans())
def test_at_every_kill_point_each_unfinished_call_of_a_changing_tool_is_answered_not_rerun(
    data: st.DataObject, max_steps: int, approvals: bool
) -> None:
    """Every prefix of a log is a point a kill -9 may leave it at. At each, the calls that
    started and did not finish are exactly what resume must answer `interrupted` for every
    tool that is not read-only (and may run again only for a read-only one, unapproved)."""
    run = simulate(data, max_steps=max_steps, approvals=approvals)
    flags = {tool.name: tool.read_only for tool in run.tools}
    for state in run.states:
        in_flight = set(state.tools_in_flight)
        answered = {call.id for call in interrupted_calls(state, lambda n: flags.get(n, False))}
        for call in state.pending_tool_calls:
            if call.id in in_flight and not flags.get(call.name, False):
                assert call.id in answered, (call.name, state.last_seq)
            if call.id not in in_flight:
                assert call.id not in answered
