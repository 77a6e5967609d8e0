"""What a run hands back: a Session, its RunResult; a Resume request and its refusals."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from attrs import field, frozen

from ruizn.defaults import ApprovalMode, Effort
from ruizn.effects.runlog.trust import TrustStore
from ruizn.events import RunStarted
from ruizn.limits import Limits
from ruizn.resuming import ResumeRefused
from ruizn.shell.runner import AgentRunner
from ruizn.state import ExecutionContext, Status, TextBlock, Usage


@frozen(kw_only=True)
class RunResult:
    status: Status
    """success, max_steps, error, cancelled or awaiting_approval (a call needs a decision
    and nobody could be asked: `agent.resume(run, approve=...)` goes on)."""
    output: Any
    """The text of the model's last answer; for a run with an output schema, the validated
    answer: an instance of `output_type` (a pydantic model, a TypedDict's dict), the JSON
    value for a schema given as a dict, None unless the run succeeded."""
    run_id: str
    log_path: Path | None
    """The run's events.jsonl (None when the agent keeps no log)."""
    usage: Usage
    cost: float | None
    """What the run's model calls cost in USD, every session of it (None: unknown, a model
    with no known price)."""
    error: str | None
    state: ExecutionContext
    """The final state; `ruizn.replay(log_path)` rebuilds exactly this."""


def call_ids(ids: Iterable[str]) -> tuple[str, ...]:
    return tuple(ids)


def limits_or_none(limits: Limits | None) -> Limits:
    return Limits() if limits is None else limits


@frozen(kw_only=True)
class Resume:
    """How a stopped run goes on (`Agent.resume`, `ruizn resume`)."""

    limits: Limits = field(factory=Limits, converter=limits_or_none)
    """The new limits (each None: the run's own). `max_steps` is the run's new step total
    (None: another batch as big as the first after max_steps, else the run's own); a run
    stopped by its budget needs a `max_cost` above what it has spent."""
    approve: tuple[str, ...] = field(default=(), converter=call_ids)
    """Waiting tool calls to approve, by id, or "all"."""
    deny: tuple[str, ...] = field(default=(), converter=call_ids)
    """Waiting tool calls to deny, by id, or "all"."""
    always: tuple[str, ...] = field(default=(), converter=call_ids)
    """Of the approved calls, those whose tool is approved for the rest of the run too (what
    a person's `a` at the prompt gives; a rerun gives what its recording's person gave)."""
    reason: str | None = None
    """Why the calls are denied (the model is told)."""
    approval: ApprovalMode | None = None
    """A new approval mode for the rest of the run (None: the run's own)."""
    trust: bool = False
    """Accept the grant of a run ruizn did not start here (or whose log changed). The
    approvals its log records (calls approved and not run yet, "always" rules) are not
    accepted with it: each such call is asked again, unless `keep_approvals`; nor are its
    `--sandbox off`, `--allow-command` patterns and `--shell-allow-domain` hosts, unless
    `keep_shell`."""
    keep_approvals: bool = False
    """With `trust`: apply the approvals the log records too (a person saw them listed in
    the grant and accepted them all)."""
    keep_shell: bool = False
    """With `trust`: apply the log's `--sandbox off`, `--allow-command` patterns and
    `--shell-allow-domain` hosts too (a person saw them listed in the grant and accepted
    them)."""
    read_timeout: float | None = None
    """This session's stream timeout (None: the run's own)."""
    vouched: bool = False
    """The store vouches for the run (a fleet's database): no trust record is needed."""
    message: str | None = None
    """A person's new message (`continue_run`, `ruizn continue`): the run goes on with it
    after its whole history, and `limits.max_steps` is the budget for this message (the run's
    new total is the steps it has taken plus that many; None: the run's own limit)."""
    model: str | None = None
    """With `message`: the model from this message on (a session's `/model`; logged as a
    settings_changed event). None: the run's own."""
    effort: Effort | None = None
    """With `message`: the effort from this message on (a session's `/effort`)."""
    cancelled: bool = False
    """With `message`: the run's last turn was cancelled by the person (a session's Ctrl-C):
    its open tool calls are answered as not run (`resuming.cancelled_answers`), never run."""


class NothingToResume(ResumeRefused):
    """The run finished with success: there is nothing to go on with."""

    def __init__(self, state: ExecutionContext) -> None:
        super().__init__(
            f"run {state.run_id} already finished with {state.status.value}; nothing to resume"
        )
        self.state = state


class Session:
    """One run, built and begun (or resumed), not yet driven. `await drive()` runs it to its
    end; `state` is where it stands at any moment (after a cancellation too)."""

    def __init__(
        self,
        runner: AgentRunner,
        run_id: str,
        log_path: Path | None,
        *,
        trust: tuple[TrustStore, RunStarted] | None = None,
        typed: Callable[[Any], Any] | None = None,
    ) -> None:
        self.runner = runner
        self.run_id = run_id
        self.log_path = log_path
        self._trust = trust
        self._typed = typed

    @property
    def state(self) -> ExecutionContext:
        return self.runner.state

    async def drive(self) -> RunResult:
        try:
            return self.result(await self.runner.drive())
        finally:
            # The log stands as this session left it (finished, or cancelled and closed).
            if self._trust is not None and self.log_path is not None:
                store, first = self._trust
                with contextlib.suppress(OSError):
                    store.closed(first, self.log_path)

    @staticmethod
    def of(
        state: ExecutionContext,
        run_id: str,
        log_path: Path | None,
        typed: Callable[[Any], Any] | None = None,
    ) -> RunResult:
        """The result a run that stands at `state` gives (`typed` makes the validated output
        the caller's type)."""
        return RunResult(
            status=state.status,
            output=final_text(state, typed),
            run_id=run_id,
            log_path=log_path,
            usage=state.usage,
            cost=state.total_cost,
            error=state.error,
            state=state,
        )

    def result(self, state: ExecutionContext | None = None) -> RunResult:
        state = self.state if state is None else state
        return Session.of(state, self.run_id, self.log_path, self._typed)


def final_text(state: ExecutionContext, typed: Callable[[Any], Any] | None = None) -> Any:
    if state.settings.output_schema is not None:
        if not state.output_valid:
            return None
        return state.output if typed is None else typed(state.output)
    for message in reversed(state.messages):
        if message.role == "assistant":
            return "".join(b.text for b in message.content if isinstance(b, TextBlock))
    return ""
