"""The approval rules of the pure core: what the reducer refuses, what decide chooses.

The reducer is what makes approval trustworthy: the runner reduces every event before it
writes it, so an event the reducer refuses can never be in a log. These are the refusals a
person relies on (nothing runs unasked) and the decisions each mode makes.
"""

from __future__ import annotations

from typing import Any

import pytest

from ruizn.decide import (
    AnswerDenied,
    AskApproval,
    DecideApprovals,
    Finish,
    RequestApproval,
    ResumeRefused,
    RunTools,
    approval_candidates,
    next_action,
    resume_decisions,
)
from ruizn.events import (
    Event,
    LlmCallStarted,
    LlmResponse,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallFinished,
    ToolCallStarted,
)
from ruizn.reducers import InvalidTransition, reduce, start
from ruizn.rules import NEVER_APPROVED, ApprovalDecision
from ruizn.settings import RunSettings
from ruizn.state import ExecutionContext, JsonObject, Status, ToolResult, ToolUseBlock

WRITE = {"path": "a.txt", "content": "x"}


def needs(name: str, input: JsonObject) -> bool:
    return name == "write_file"


class Log:
    """Builds a run event by event, each reduced as the runner would."""

    def __init__(self, approval: str = "ask", calls: tuple[tuple[str, str], ...] = ()) -> None:
        self.state = start(
            RunStarted(
                seq=1,
                ts=0.0,
                run_id="r1",
                goal="g",
                settings=RunSettings(
                    model="m", max_steps=5, max_tokens=100, system="", approval=approval
                ),
            )
        )
        if calls:
            content = tuple(
                ToolUseBlock(id=i, name=n, input=WRITE if n == "write_file" else {"path": "a"})
                for i, n in calls
            )
            self.add(LlmCallStarted, step=1)
            self.add(LlmResponse, content=content, stop_reason="tool_use")

    def add(self, cls: type[Any], **fields: Any) -> ExecutionContext:
        event: Event = cls(seq=self.state.last_seq + 1, ts=0.0, **fields)
        self.state = reduce(self.state, event)
        return self.state

    def refused(self, cls: type[Any], match: str, **fields: Any) -> None:
        before = self.state
        with pytest.raises(InvalidTransition, match=match):
            self.add(cls, **fields)
        assert self.state == before

    def request(self, call_id: str, name: str = "write_file") -> ExecutionContext:
        return self.add(ToolApprovalRequested, id=call_id, name=name, input=WRITE)


def test_a_requested_call_cannot_start_before_a_yes_nor_after_a_no() -> None:
    log = Log(calls=(("t1", "write_file"), ("t2", "write_file")))
    log.request("t1")
    log.request("t2")
    log.refused(ToolCallStarted, "still awaiting approval", id="t1", name="write_file", input=WRITE)
    log.refused(ToolCallFinished, "still awaiting approval", id="t1", result=ToolResult.ok("x"))
    log.add(ToolApprovalDecided, id="t1", approved=False, by="user", reason="no")
    log.refused(ToolCallStarted, "denied", id="t1", name="write_file", input=WRITE)
    log.refused(ToolCallFinished, "not a denied result", id="t1", result=ToolResult.ok("x"))
    log.add(ToolApprovalDecided, id="t2", approved=True, by="user")
    log.add(ToolCallStarted, id="t2", name="write_file", input=WRITE)


def test_requests_and_decisions_must_match_the_turn_and_happen_once() -> None:
    log = Log(calls=(("t1", "write_file"),))
    log.refused(ToolApprovalDecided, "was not requested", id="t1", approved=True, by="user")
    log.refused(ToolApprovalRequested, "did not ask for", id="t9", name="write_file", input=WRITE)
    log.refused(
        ToolApprovalRequested, "another tool or input", id="t1", name="read_file", input=WRITE
    )
    log.request("t1")
    log.refused(ToolApprovalRequested, "twice", id="t1", name="write_file", input=WRITE)
    log.add(ToolApprovalDecided, id="t1", approved=True, by="user")
    log.refused(ToolApprovalDecided, "twice", id="t1", approved=False, by="user")


@pytest.mark.parametrize(
    ("mode", "approved", "by", "ok"),
    [
        ("ask", True, "policy", False),
        ("ask", False, "policy", False),
        ("always", True, "policy", True),
        ("always", False, "policy", False),
        ("never", False, "policy", True),
        ("never", True, "policy", False),
        ("ask", True, "always-rule", False),  # nobody said "a" for write_file
    ],
)
def test_a_decision_by_the_rules_must_be_the_rule_of_the_run(
    mode: str, approved: bool, by: str, ok: bool
) -> None:
    log = Log(approval=mode, calls=(("t1", "write_file"),))
    log.request("t1")
    if ok:
        log.add(ToolApprovalDecided, id="t1", approved=approved, by=by)
    else:
        log.refused(ToolApprovalDecided, "rules .* do not make", id="t1",
                    approved=approved, by=by)  # fmt: skip


def test_a_then_always_rule_for_later_calls_of_that_tool_only() -> None:
    log = Log(calls=(("t1", "write_file"), ("t2", "write_file"), ("t3", "edit_file")))
    for call_id, name in (("t1", "write_file"), ("t2", "write_file")):
        log.request(call_id, name)
    log.refused(ToolApprovalDecided, "whole run", id="t1", approved=False, by="user", always=True)
    log.add(ToolApprovalDecided, id="t1", approved=True, by="user", always=True)
    assert log.state.always_approved == ("write_file",)
    assert next_action(log.state, needs) == DecideApprovals(
        decisions=(ApprovalDecision(id="t2", approved=True, by="always-rule"),)
    )


def test_run_finished_awaiting_approval_only_while_a_call_awaits() -> None:
    log = Log(calls=(("t1", "write_file"),))
    finish: dict[str, Any] = {"status": Status.AWAITING_APPROVAL, "steps": 1, "elapsed": 0.0}
    log.refused(RunFinished, "no call awaits", **finish)
    log.request("t1")
    log.add(RunFinished, **finish)
    # resume: the same call still waits, and the run is back in its tools phase
    state = log.add(RunResumed, max_steps=5)
    assert [c.id for c in state.awaiting_approval] == ["t1"]
    assert next_action(state, needs) == Finish(status=Status.AWAITING_APPROVAL)
    assert next_action(state, needs, can_ask=True) == AskApproval(call=state.turn_calls[0])


def test_decide_requests_first_then_rules_then_denials_then_asks_then_runs() -> None:
    log = Log(approval="never", calls=(("t1", "write_file"), ("t2", "read_file")))
    action = next_action(log.state, needs, can_ask=True)
    assert isinstance(action, RequestApproval)
    assert [c.id for c in action.calls] == ["t1"]  # read_file needs none
    log.request("t1")
    assert next_action(log.state, needs) == DecideApprovals(
        decisions=(ApprovalDecision(id="t1", approved=False, by="policy", reason=NEVER_APPROVED),)
    )
    log.add(ToolApprovalDecided, id="t1", approved=False, by="policy", reason=NEVER_APPROVED)
    action = next_action(log.state, needs)
    assert isinstance(action, AnswerDenied)
    ((call, result),) = action.answers
    assert call.id == "t1"
    assert result.error_type == "denied"
    assert "the approval policy denied this call" in result.content
    log.add(ToolCallFinished, id="t1", result=result)
    action = next_action(log.state, needs)
    assert isinstance(action, RunTools)
    assert [c.id for c in action.calls] == ["t2"]


def test_resume_decisions_name_only_waiting_calls() -> None:
    log = Log(calls=(("t1", "write_file"), ("t2", "write_file"), ("t3", "read_file")))
    log.request("t1")  # t2 is not requested yet (a crash): it is a candidate all the same
    assert [c.id for c in approval_candidates(log.state, needs)] == ["t1", "t2"]
    assert resume_decisions(log.state, needs, approve=("all",), deny=("t2",), reason="r") == (
        ApprovalDecision(id="t1", approved=True, by="user"),
        ApprovalDecision(id="t2", approved=False, by="user", reason="r"),
    )
    for kwargs, says in (
        ({"approve": ("t3",)}, "'t3' is not a tool call awaiting approval"),
        ({"approve": ("all",), "deny": ("all",)}, "both --approve and --deny"),
        ({"reason": "r"}, "--reason goes with --deny"),
    ):
        with pytest.raises(ResumeRefused, match=says):
            resume_decisions(log.state, needs, **kwargs)  # type: ignore[arg-type]
    done = Log(calls=(("t3", "read_file"),))
    with pytest.raises(ResumeRefused, match="no tool call awaiting approval"):
        resume_decisions(done.state, needs, approve=("all",))
