"""Laws over approvals: any mix of approval modes, a person's answers (y, n, a, none), stops
awaiting_approval resumed with drawn --approve/--deny, crashes anywhere and resumes. The real
runner, a FunctionModel and a memory sink (see runs.simulate)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from ruizn.events import (
    RunFinished,
    RunResumed,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallFinished,
    ToolCallStarted,
)
from ruizn.reducers import rebuild
from ruizn.state import Status, ToolUseBlock
from tests.properties.runs import runs_settings, simulate

RUNS = runs_settings(120)


@RUNS
@given(st.data(), st.integers(1, 5), st.booleans(), st.booleans(), st.sampled_from([None, True]))
def test_any_mix_of_decisions_crashes_and_resumes_answers_every_tool_use_once(
    data: st.DataObject, max_steps: int, errors: bool, crashes: bool, tools: bool | None
) -> None:
    run = simulate(
        data, max_steps=max_steps, errors=errors, crashes=crashes, approvals=True, tools=tools
    )
    assert [e.seq for e in run.events] == list(range(1, len(run.events) + 1))
    assert sum(isinstance(e, RunResumed) for e in run.events) == run.sessions - 1
    # the log alone rebuilds exactly the state the last session ended with
    assert rebuild(run.events) == run.final
    assert run.final.status is not Status.RUNNING
    if run.final.status is Status.AWAITING_APPROVAL:
        assert run.final.awaiting_approval
    # every tool_use the model asked for is answered exactly once, except the calls of a
    # run still waiting for a decision, which are answered by nothing yet
    asked = Counter(
        b.id for m in run.final.messages for b in m.content if isinstance(b, ToolUseBlock)
    )
    answered = Counter(e.id for e in run.events if isinstance(e, ToolCallFinished))
    waiting = Counter(call.id for call in run.final.pending_tool_calls)
    assert answered == asked - waiting
    assert all(count == 1 for count in answered.values())
    # a tool that is not read-only never starts twice, and never runs more than it started
    starts = Counter(
        e.id
        for e in run.events
        if isinstance(e, ToolCallStarted) and e.name in ("change", "guarded")
    )
    assert all(count == 1 for count in starts.values())
    for name in ("change", "guarded"):
        started = sum(1 for e in run.events if isinstance(e, ToolCallStarted) and e.name == name)
        assert run.ran.count(name) <= started


@RUNS
@given(st.data(), st.integers(1, 5), st.booleans())
def test_a_call_that_asked_for_approval_runs_only_after_a_yes_and_a_no_is_answered_denied(
    data: st.DataObject, max_steps: int, crashes: bool
) -> None:
    run = simulate(data, max_steps=max_steps, crashes=crashes, approvals=True, tools=True)
    mode = run.events[0].settings.approval  # type: ignore[union-attr]
    requested: set[str] = set()
    decided: dict[str, ToolApprovalDecided] = {}
    for event in run.events:
        match event:
            case ToolApprovalRequested(id=call_id, name=name):
                assert name == "guarded"  # built-in rules: only the tool that needs it asks
                assert call_id not in requested, "asked twice"
                requested.add(call_id)
            case ToolApprovalDecided(id=call_id, by=by, approved=approved):
                assert call_id in requested
                assert call_id not in decided
                decided[call_id] = event
                if by == "policy":
                    assert mode != "ask"
                    assert approved == (mode == "always")
                else:
                    assert mode == "ask" or by == "user"
            case ToolCallStarted(id=call_id, name=name):
                if call_id in requested:
                    assert decided[call_id].approved, f"{call_id} ran without a yes"
                if name == "guarded":  # its rule asked for every input drawn with a path
                    assert call_id in requested or "path" not in event.input
            case ToolCallFinished(id=call_id, result=result) if call_id in decided:
                if not decided[call_id].approved:
                    assert result.error_type == "denied"
            case RunFinished(status=Status.AWAITING_APPROVAL):
                assert any(call_id not in decided for call_id in requested)
            case _:
                pass
