"""The runner's approvals: a request logged for each call that needs one, each decision
logged, and a call put to the person (or callback) who answers in `ask` mode."""

from __future__ import annotations

from collections.abc import Sequence

from ruizn.effects.person.approval import Approver
from ruizn.events import ToolApprovalDecided, ToolApprovalRequested
from ruizn.rules import ApprovalDecision
from ruizn.shell.recorder import Recorder
from ruizn.shell.toolchange import ToolChanges
from ruizn.state import ToolCall


class Approvals:
    """Who answers for calls that need approval in `ask` mode (a terminal, a callback): None,
    or an approver that could not answer, stops the run awaiting_approval (`can_ask`)."""

    def __init__(self, run: Recorder, approver: Approver | None, changes: ToolChanges) -> None:
        self._run = run
        self._approver = approver
        self._changes = changes
        self.can_ask = approver is not None

    def request(self, calls: Sequence[ToolCall]) -> None:
        for call in calls:
            self._run.emit(ToolApprovalRequested, id=call.id, name=call.name, input=call.input)

    def decide(self, decision: ApprovalDecision, *, always: bool = False) -> None:
        self._run.emit(
            ToolApprovalDecided,
            id=decision.id,
            approved=decision.approved,
            by=decision.by,
            reason=decision.reason,
            always=always,
        )

    async def ask(self, call: ToolCall) -> None:
        """Put one call to the approver; no answer (no one there) stops the asking, and the
        run then finishes awaiting_approval with the call still waiting."""
        assert self._approver is not None  # decide asks only when one can answer
        answer = await self._approver(call, self._changes.registry.get(call.name))
        if answer is None:
            self.can_ask = False
            return
        self.decide(
            ApprovalDecision(id=call.id, approved=answer.approved, by="user", reason=answer.reason),
            always=answer.always and answer.approved,
        )


__all__ = ("Approvals",)
