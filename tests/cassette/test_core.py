"""The pure parts of continue, fork, rerun and diff, one case at a time (in-process):
user_message in the transition table, what continue refuses, what diff ignores, and the
divergences a recording names."""

from __future__ import annotations

import pytest
from attrs import evolve

from ruizn.cassette.diff import first_difference, items
from ruizn.events import (
    Event,
    LlmCallFailed,
    LlmCallStarted,
    LlmResponse,
    LlmToken,
    RunFinished,
    RunResumed,
    ToolApprovalRequested,
    ToolCallFinished,
    UserMessage,
)
from ruizn.limits import Limits
from ruizn.recording import compare_requests, recording_of
from ruizn.reducers import InvalidTransition
from ruizn.request import plan_request
from ruizn.resuming import ResumeRefused, plan_continue
from ruizn.state import ErrorType, Phase, Status, TextBlock, ToolResult, ToolUseBlock, Usage
from tests.core_world import FIRST, STARTED, TEXT_TURN, TOOL_TURN, after, then

DONE = (RunFinished, {"status": Status.SUCCESS, "steps": 1, "elapsed": 0.0})
RESUMED = (RunResumed, {"max_steps": 3})


@pytest.mark.parametrize(
    ("before", "says"),
    [
        ((STARTED,), "cannot follow phase streaming"),
        ((STARTED, TOOL_TURN), "cannot follow phase tools"),
        ((STARTED, TEXT_TURN, DONE), "cannot follow phase finished"),
        (
            (STARTED, (LlmCallFailed, {"error_type": "e", "message": "m", "will_retry": True})),
            "between the attempts",
        ),
    ],
)
def test_a_user_message_is_refused_inside_a_call_a_turn_or_a_finished_run(
    before: tuple[object, ...], says: str
) -> None:
    with pytest.raises(InvalidTransition, match=says):
        then(after(*before), UserMessage, text="hello")


def test_a_user_message_after_a_resume_joins_the_history_and_the_model_is_called_next() -> None:
    resumed = after(STARTED, TEXT_TURN, DONE, RESUMED)
    assert resumed.phase is Phase.DONE
    with pytest.raises(InvalidTransition, match="no text"):
        then(resumed, UserMessage, text=" \n")
    said = then(resumed, UserMessage, text="more")
    assert said.phase is Phase.READY
    assert [m.role for m in said.messages] == ["user", "assistant", "user"]
    assert plan_request(said).messages[-1].content == (TextBlock(text="more"),)


def test_a_user_message_after_a_turns_results_joins_them() -> None:
    answered = (ToolCallFinished, {"id": "t1", "result": ToolResult.ok("r")})
    stopped = (RunFinished, {"status": Status.ERROR, "steps": 1, "elapsed": 0.0})
    state = after(STARTED, TOOL_TURN, answered, stopped)
    said = then(then(state, RunResumed, max_steps=3), UserMessage, text="and now?")
    assert [m.role for m in said.messages] == ["user", "assistant", "user"]
    assert said.messages[-1].content[-1] == TextBlock(text="and now?")


def test_continue_refuses_a_run_stopped_inside_a_call_or_with_calls_unanswered() -> None:
    with pytest.raises(ResumeRefused, match="middle of a model call"):
        plan_continue(after(STARTED), "hi", Limits())
    with pytest.raises(ResumeRefused, match="not answered"):
        plan_continue(after(STARTED, TOOL_TURN), "hi", Limits())
    waiting = after(
        STARTED,
        TOOL_TURN,
        (ToolApprovalRequested, {"id": "t1", "name": "look", "input": {"p": 1}}),
        (RunFinished, {"status": Status.AWAITING_APPROVAL, "steps": 1, "elapsed": 0.0}),
    )
    with pytest.raises(ResumeRefused, match="--approve"):
        plan_continue(waiting, "hi", Limits())
    done = after(STARTED, TEXT_TURN, DONE)
    with pytest.raises(ResumeRefused, match="empty"):
        plan_continue(done, "", Limits())
    with pytest.raises(ResumeRefused, match="UTF-8"):
        plan_continue(done, "\udcff", Limits())
    plan = plan_continue(done, "hi", Limits())
    assert plan.limits.max_steps == 1 + FIRST.settings.max_steps  # the run's own limit, again
    assert plan_continue(done, "hi", Limits(max_steps=4)).limits.max_steps == 1 + 4


def _run(*events: Event) -> tuple[Event, ...]:
    return (FIRST, *events)


def test_diff_ignores_ids_clock_paths_and_how_a_stream_was_cut() -> None:
    reply = LlmResponse(
        seq=5, ts=9.0, content=(TextBlock(text="hello"),), stop_reason="end_turn", request_id="a"
    )
    one = _run(
        LlmCallStarted(seq=2, ts=1.0, step=1),
        LlmToken(seq=3, ts=1.1, text="hel"),
        LlmToken(seq=4, ts=1.2, text="lo"),
        reply,
    )
    other_first = evolve(
        FIRST,
        ts=99.0,
        run_id="other",
        ruizn_version="9.9",
        settings=evolve(FIRST.settings, workspace="/elsewhere"),
    )
    two = (
        other_first,
        LlmCallStarted(seq=2, ts=5.0, step=1),
        LlmToken(seq=3, ts=5.1, text="hello"),
        LlmResponse(seq=4, ts=6.0, content=reply.content, stop_reason="end_turn", request_id="b"),
    )
    assert first_difference(items(one), items(two)) is None
    changed = (*two[:-1], LlmResponse(seq=4, ts=6.0, content=reply.content, stop_reason=None))
    difference = first_difference(items(one), items(changed))
    assert difference is not None
    assert difference.a is not None
    assert difference.b is not None
    assert (difference.a.seq, difference.b.seq) == (5, 4)  # each run's own seq
    assert difference.fields() == ("stop_reason",)
    shorter = first_difference(items(one), items(two[:2]))
    assert shorter is not None
    assert shorter.b is None


def test_a_tape_names_the_call_and_the_tool_whose_result_changed() -> None:
    call = ToolUseBlock(id="t1", name="look", input={"p": 1})
    recorded = _run(
        LlmCallStarted(seq=2, ts=1.0, step=1),
        LlmResponse(seq=3, ts=2.0, content=(call,), stop_reason="tool_use", usage=Usage()),
        ToolCallFinished(seq=4, ts=3.0, id="t1", result=ToolResult.ok("old")),
        LlmCallStarted(seq=5, ts=4.0, step=2),
        LlmResponse(seq=6, ts=5.0, content=(TextBlock(text="ok"),), stop_reason="end_turn"),
    )
    recording = recording_of(recorded)
    assert [e.seq for e in recording.exchanges] == [2, 5]
    now = after(
        STARTED,
        TOOL_TURN,
        (ToolCallFinished, {"id": "t1", "result": ToolResult.error(ErrorType.NOT_FOUND, "gone")}),
    )
    divergence = compare_requests(recording, recording.exchanges[1], plan_request(now))
    assert divergence is not None
    assert (divergence.seq, divergence.call_id, divergence.tool) == (4, "t1", "look")
    assert (divergence.recorded, divergence.now) == ("old", "(error) gone")
    assert (
        compare_requests(recording, recording.exchanges[1], recording.exchanges[1].request) is None
    )
