"""The Observe→Act loop: ask the core what to do, do it, record what happened.

Every change of state goes through `emit`, in h11's order: the event is stamped (seq, ts)
and *reduced first*; an event the reducer refuses is never written. Then it goes to the
sink (the log), then to the subscribers (the printer), and only then is the new state
committed. So the log is never behind the state, and replaying it gives exactly the state
this loop ended with. Every decision (retry, give up, refuse, finish) comes from
`ruizn.decide`; this module only carries them out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

import anyio
from attrs import evolve

from ruizn.checkpoints import checkpoint_at_end, checkpoint_before
from ruizn.compaction import (
    block_of,
    compaction_request,
    form,
    instructions_of,
    tokens_after,
)
from ruizn.decide import (
    AnswerDenied,
    AnswerStale,
    AskApproval,
    CallModel,
    CheckOutput,
    ClearContext,
    CompactContext,
    DecideApprovals,
    Finish,
    Finished,
    NeedsApproval,
    RefuseTools,
    RequestApproval,
    RunHooks,
    RunTools,
    after_failure,
    approvals_to_request,
    next_action,
    reply_refusal,
)
from ruizn.effects.checkpoints.store import CheckpointError, Snapshot
from ruizn.effects.hooks.command import HookExecutor
from ruizn.effects.models.pricing import Pricer, SharedBudget
from ruizn.effects.models.provider import ModelReply, Provider, ProviderError, ReplayDiverged
from ruizn.effects.person.approval import Approver
from ruizn.effects.runlog.sink import EventSink, LogLost, SinkError
from ruizn.effects.tools.base import ToolRegistry
from ruizn.events import (
    BudgetSpent,
    Checkpointed,
    ContextCleared,
    ContextCompacted,
    Event,
    LlmCallFailed,
    LlmCallStarted,
    LlmResponse,
    LlmToken,
    OutputChecked,
    Parent,
    RunFinished,
    RunResumed,
    RunStarted,
    SettingsChanged,
    ToolCallFinished,
    UserMessage,
)
from ruizn.reducers import add_tokens, reduce, start
from ruizn.request import MessagesRequest, plan_request
from ruizn.resuming import ResumePlan, SettingChange, interrupted_calls, interrupted_result
from ruizn.rules import ApprovalDecision, call_cut
from ruizn.settings import RunSettings
from ruizn.shell.approvals import Approvals
from ruizn.shell.hookcalls import HookCalls
from ruizn.shell.toolcalls import PathInstructions, ToolCalls
from ruizn.shell.toolchange import ToolChanges, ToolWatch
from ruizn.state import (
    ErrorType,
    ExecutionContext,
    Status,
    ToolResult,
)
from ruizn.version import __version__

E = TypeVar("E", bound=Event)
Subscriber = Callable[[Event], None]


class Checkpointer(Protocol):
    """Saves the workspace's files (effects.checkpoints.store.GitStore)."""

    def snapshot(self) -> Snapshot: ...


class AgentRunner:
    """Drives one run (new or replayed). Its parts, each given the run (a `Recorder`) by
    its constructor: the tool calls (shell/toolcalls.py), which hold the hook calls
    (shell/hookcalls.py) and the run's tools as they change (shell/toolchange.py); and the
    approvals (shell/approvals.py)."""

    def __init__(
        self,
        *,
        provider: Provider,
        registry: ToolRegistry,
        sink: EventSink,
        subscribers: Iterable[Subscriber] = (),
        clock: Callable[[], float],
        timer: Callable[[], float],
        state: ExecutionContext | None = None,
        redact: Callable[[Event], Event] | None = None,
        approver: Approver | None = None,
        watch: ToolWatch | None = None,
        pricer: Pricer | None = None,
        budget: SharedBudget | None = None,
        instructions: PathInstructions | None = None,
        hooks: HookExecutor | None = None,
        transcript: str = "",
        checkpointer: Checkpointer | None = None,
        redact_stream: Callable[[str, str], tuple[str, str]] | None = None,
    ) -> None:
        self._provider = provider
        self._sink = sink
        self._subscribers = tuple(subscribers)
        self._clock = clock
        self._timer = timer
        self._state = state
        # Scrubs secrets (the API key...) from each event before anything sees it, so a key
        # never reaches the log, the terminal or the next request (see ruizn.redact).
        self._redact = redact if redact is not None else _unchanged
        # The same across streamed deltas: (tail held back, delta) -> (shown now, held), so a
        # secret split over two deltas is caught too (Redactor.stream_text).
        self._redact_stream = redact_stream
        # Tokens written and shown but not yet reduced: they are applied in one update
        # (reducers.add_tokens, equal to reducing them one by one) the moment anything reads
        # the state, so a long answer does not copy the state once per token. The log is
        # never behind the state.
        self._tokens = 0
        self._started_at = timer()
        self._request: tuple[int, MessagesRequest] | None = None
        self.lost: LogLost | None = None
        self._changes = ToolChanges(self, registry, watch)
        self._hooks = HookCalls(self, hooks, transcript)
        self._calls = ToolCalls(
            self,
            sink=sink,
            timer=timer,
            changes=self._changes,
            hooks=self._hooks,
            instructions=instructions,
        )
        self._approvals = Approvals(self, approver, self._changes)
        # Prices each response as it comes (its cost is logged with it); None: calls are
        # logged unpriced. `budget`: one this run shares with others, asked before each step.
        self._pricer = pricer
        self._budget = budget
        # Saves the workspace before tools that may change it (None: checkpoints are off).
        self._checkpointer = checkpointer

    @property
    def state(self) -> ExecutionContext:
        assert self._state is not None, "begin() or a replayed state first"
        if self._tokens:
            self._state = add_tokens(self._state, self._tokens)
            self._tokens = 0
        return self._state

    @property
    def needs_approval(self) -> NeedsApproval:
        """Whether a call of the run's tools (as they are now) needs approval."""
        return self._changes.needs_approval

    async def compact_hooks(self, event: str, trigger: str, **fields: Any) -> None:
        """`ruizn compact`'s PreCompact or PostCompact hooks (those matching `trigger`)."""
        await self._hooks.compacting(event, trigger, **fields)

    def begin(
        self, *, run_id: str, goal: str, settings: RunSettings, parent: Parent | None = None
    ) -> RunStarted:
        """Start a new run with `settings` as the builder filled them in (the workspace
        resolved, the tools' sources): its first event is checked, then written. The tools it
        records are the ones this runner offers."""
        event = RunStarted(
            seq=1,
            ts=self._clock(),
            run_id=run_id,
            goal=goal,
            settings=evolve(settings, tools=self._changes.registry.tool_schemas()),
            ruizn_version=__version__,
            parent=parent,
        )
        state = start(event)  # checked before it is written, like every other event
        # The log's copy has every secret ruizn knows redacted (the goal, the system prompt,
        # an MCP command); this session's state keeps what it was given, so the model gets
        # the text as typed. Replay (and a resume) rebuild the request from the log's copy.
        written = self._redact(event)
        assert isinstance(written, RunStarted)
        if written is not event:
            start(written)
        self._publish(written)
        self._state = state
        return written

    def resume(
        self,
        plan: ResumePlan,
        *,
        torn_bytes: int = 0,
        decisions: Sequence[ApprovalDecision] = (),
        message: str | None = None,
        change: SettingChange | None = None,
    ) -> None:
        """Continue a replayed run. A tool call the stop interrupted is run again only if the
        tool says that is safe (read-only); otherwise the model is told it was cut off, so
        every tool_use is answered and the next request is valid (resuming.interrupted_calls).

        `decisions` are a person's answers given with the resume (`--approve/--deny`), for
        calls in `decide.approval_candidates` (the caller checks that first): any approval
        request still missing is logged, then each decision. `message` is a person's new
        message (`ruizn continue`, planned by `resuming.plan_continue`), logged last."""
        interrupted = interrupted_calls(self.state, self._calls.runs_again)
        limits = plan.limits
        assert limits.max_steps is not None  # a plan always sets the total (ResumePlan)
        self.emit(
            RunResumed,
            max_steps=limits.max_steps,
            max_tokens=limits.max_tokens,
            workspace=plan.workspace,
            approval=plan.approval,
            max_cost=limits.max_cost,
            max_context=limits.max_context,
            torn_bytes=torn_bytes,
            reask=plan.reask,
            elapsed=plan.lost,
            confine=plan.confine,
        )
        for call in interrupted:
            self.emit(ToolCallFinished, id=call.id, result=interrupted_result(call))
        for call, result in plan.answers:  # a cancelled turn's calls: none runs
            if call.id not in {c.id for c in interrupted}:
                self.emit(ToolCallFinished, id=call.id, result=result)
        if change is not None:
            self.emit(
                SettingsChanged,
                model=change.model,
                effort=change.effort,
                context_window=change.context_window,
                compaction=change.compaction,
            )
        if decisions:
            approvals = self._approvals
            approvals.request(approvals_to_request(self.state, self._changes.needs_approval))
            for decision in decisions:
                approvals.decide(decision, always=decision.always)
        if message is not None:
            self.emit(UserMessage, text=message)

    async def drive(self) -> ExecutionContext:
        """Run until the core says finish. Ends the log with RunFinished whenever it can.

        Raises `SinkError` when the log cannot be written (the state is what the log holds),
        `LogLost` when the log was deleted or replaced (its events are recovered beside it)
        and `ReplayDiverged` when a recorded model cannot answer (the run is finished error).
        Cancellation is never swallowed: the run is finished `cancelled`, then it goes on.
        """
        self._started_at = self._timer()
        try:
            await self._loop()
        except anyio.get_cancelled_exc_class():
            self._finish_quietly(Status.CANCELLED, None)
            self._sink.close()
            raise
        except KeyboardInterrupt:
            self._finish_quietly(Status.CANCELLED, None)
            self._sink.close()
            raise
        except LogLost as lost:
            self.lost = lost
            self._finish_quietly(Status.ERROR, str(lost))
            self._sink.close()
            raise
        except SinkError:
            self._sink.close()
            raise
        except ReplayDiverged as left:  # a recorded model has no answer: end, and say where
            self._finish(Status.ERROR, str(left))
            self._sink.close()
            raise
        except Exception as exc:  # a bug in ruizn or a tool: end the run, keep the log whole
            self._finish(Status.ERROR, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            self._sink.close()
        return self.state

    async def _loop(self) -> None:
        changes, approvals = self._changes, self._approvals
        while True:
            await changes.take()
            match next_action(self.state, changes.needs_approval, can_ask=approvals.can_ask):
                case CallModel(step=step, attempt=attempt, delay=delay):
                    if attempt == 1 and self._shared_budget_spent():
                        continue  # logged: the core now finishes the run max_cost
                    await self._call_model(step, attempt, delay)
                case ClearContext(results=results, limit=limit):
                    self.emit(ContextCleared, results=results, limit=limit)
                case CompactContext(attempt=attempt, delay=delay):
                    await self.compact(attempt=attempt, delay=delay)
                case RunTools(calls=calls):
                    if checkpoint_before(self.state, calls, self._calls.read_only):
                        await self._checkpoint(final=False)
                    await self._calls.run(calls)
                case RefuseTools(calls=calls, reason=reason):
                    for call in calls:
                        refusal = ToolResult.error(ErrorType.INVALID_INPUT, reason)
                        self.emit(ToolCallFinished, id=call.id, result=refusal)
                case RequestApproval(calls=calls):
                    approvals.request(calls)
                case DecideApprovals(decisions=decisions):
                    for decision in decisions:
                        approvals.decide(decision)
                case AskApproval(call=call):
                    await approvals.ask(call)
                case RunHooks(event=event, specs=specs, call=call):
                    await self._hooks.run(event, specs, call)
                case CheckOutput(verdict=verdict):
                    self.emit(
                        OutputChecked,
                        valid=verdict.valid,
                        output=verdict.output,
                        error=verdict.error,
                        call_id=verdict.call_id,
                    )
                case AnswerDenied(answers=answers) | AnswerStale(answers=answers):
                    for call, result in answers:
                        self.emit(ToolCallFinished, id=call.id, result=result)
                case Finish(status=status, error=error):
                    await self._hooks.session_end(status)
                    if checkpoint_at_end(self.state):
                        await self._checkpoint(final=True)
                    self._finish(status, error)
                    return
                case Finished():
                    return

    async def _checkpoint(self, *, final: bool) -> None:
        """Save the workspace's files (in a thread: git walks the tree) and log it. A
        snapshot that fails is logged as such; the tools run all the same."""
        if self._checkpointer is None:
            return
        try:
            snap = await anyio.to_thread.run_sync(self._checkpointer.snapshot)
        except (CheckpointError, OSError) as exc:  # git failed, or a file could not be read
            self.emit(Checkpointed, step=self.state.step, tree="", final=final, error=str(exc))
            return
        self.emit(
            Checkpointed,
            step=self.state.step,
            tree=snap.tree,
            files=snap.files,
            bytes=snap.bytes,
            empty_dirs=snap.empty_dirs,
            left_out=snap.left_out,
            more_left_out=snap.more_left_out,
            final=final,
        )

    def _shared_budget_spent(self) -> bool:
        if self._budget is None:
            return False
        spent = self._budget.spent()
        if spent is None:
            return False
        name, limit, total = spent
        self.emit(BudgetSpent, budget=name, limit=limit, spent=total)
        return True

    async def _call_model(self, step: int, attempt: int, delay: float) -> None:
        if delay > 0:
            await anyio.sleep(delay)
        # The request of a step is built once; retries send the same body.
        if self._request is None or self._request[0] != step:
            self._request = (step, plan_request(self.state))
        request = self._request[1]
        self.emit(LlmCallStarted, step=step, attempt=attempt)
        reply = await self._stream(request)
        if reply is None:
            return
        refusal = reply_refusal(reply.content)
        if refusal is not None:
            self._failed(
                ErrorType.INVALID_RESPONSE.value,
                refusal,
                retryable=True,
                request_id=reply.request_id,
            )
            return
        pricer = self._pricer
        self.emit(
            LlmResponse,
            content=reply.content,
            stop_reason=reply.stop_reason,
            usage=reply.usage,
            request_id=reply.request_id,
            cost=None if pricer is None else pricer.cost(request.model, reply.usage),
            priced_by=None if pricer is None else pricer.name,
        )

    async def compact(
        self,
        *,
        attempt: int = 1,
        delay: float = 0.0,
        manual: bool = False,
        instructions: str | None = None,
    ) -> None:
        """One attempt of a compaction call (ruizn.compaction): the summary request, then
        context_compacted, or a failure the core retries like any call's. `manual`: `ruizn
        compact` on a stopped run, with a person's `instructions`."""
        if delay > 0:
            await anyio.sleep(delay)
        state = self.state
        trigger = "manual" if manual else "auto"
        wanted = instructions_of(state, (instructions,) if instructions else ())
        request = compaction_request(state, wanted)
        self.emit(LlmCallStarted, step=state.step + 1, attempt=attempt, compaction=trigger)
        reply = await self._stream(request)
        if reply is None:
            return
        block = block_of(state, reply.content)
        if isinstance(block, str):
            self._failed("invalid_response", block, retryable=True, request_id=reply.request_id)
            return
        pricer = self._pricer
        self.emit(
            ContextCompacted,
            block=block,
            source=form(state),
            trigger=trigger,
            replaced=len(state.messages),
            tokens_before=state.context_tokens,
            tokens_after=tokens_after(state, block),
            usage=reply.usage,
            cost=None if pricer is None else pricer.cost(request.model, reply.usage),
            priced_by=None if pricer is None else pricer.name,
            request_id=reply.request_id,
            instructions=wanted,
        )

    def _failed(
        self,
        error_type: str,
        message: str,
        *,
        retryable: bool,
        retry_after: float | None = None,
        status_code: int | None = None,
        request_id: str | None = None,
    ) -> None:
        state = self.state
        decision = after_failure(
            state,
            retryable=retryable,
            retry_after=retry_after,
            status_code=status_code,
            message=message,
        )
        self.emit(
            LlmCallFailed,
            error_type=error_type,
            message=message,
            attempt=state.attempt,
            will_retry=decision.will_retry,
            retry_in=decision.retry_in,
            status_code=status_code,
            request_id=request_id,
            retry_after=retry_after,
            compact=decision.compact,
        )

    async def _stream(self, request: MessagesRequest) -> ModelReply | None:
        """The model's reply to `request`, its text shown as it comes; None when the call
        failed (logged as such, for the core to retry or give up)."""
        reply: ModelReply | None = None
        publish, clock, split = self._publish, self._clock, self._redact_stream
        held = ""

        def token(text: str) -> None:
            # Tokens are legal in the streaming phase, which _call_model just entered; they
            # are reduced in bulk (see `state`).
            assert self._state is not None
            seq = self._state.last_seq + self._tokens + 1
            publish(self._redact(LlmToken(seq=seq, ts=clock(), text=text)))
            self._tokens += 1

        try:
            async for item in self._provider.stream(request):
                if isinstance(item, str):
                    if split is None:
                        token(item)
                        continue
                    shown, held = split(held, item)
                    if shown:
                        token(shown)
                else:
                    if held:  # the tail held back began no secret after all
                        token(held)
                        held = ""
                    reply = item
        except ProviderError as exc:
            self._failed(
                exc.error_type,
                exc.message,
                retryable=exc.retryable,
                retry_after=exc.retry_after,
                status_code=exc.status_code,
                request_id=exc.request_id,
            )
            return None
        if reply is None:
            message = "the model stream ended without a message"
            self._failed(ErrorType.INVALID_RESPONSE.value, message, retryable=True)
        return reply

    def _finish(self, status: Status, error: str | None) -> None:
        if self._state is None or self.state.status is not Status.RUNNING:
            return
        self.emit(
            RunFinished,
            status=status,
            steps=self.state.step,
            elapsed=round(self._timer() - self._started_at, 3),
            error=error,
            usage=self.state.usage,
            cost=None if call_cut(self.state) else self.state.total_cost,
        )

    def _finish_quietly(self, status: Status, error: str | None) -> None:
        """Finish on the way out of an interruption; a sink that fails now changes nothing."""
        with contextlib.suppress(SinkError):
            self._finish(status, error)

    def _publish(self, event: Event) -> None:
        # The sink first: when it returns, the line is on disk; only then is it shown.
        try:
            self._sink(event)
        except SinkError as exc:
            if exc.written:  # on disk all the same (a lost log still holds it): show it
                self._show(event)
            raise
        self._show(event)

    def _show(self, event: Event) -> None:
        for subscriber in self._subscribers:
            subscriber(event)

    def emit(self, cls: type[E], /, **fields: Any) -> Event:
        """Record one event (the runner is its parts' `Recorder`); returned as written."""
        state = self.state
        event = self._redact(cls(seq=state.last_seq + 1, ts=self._clock(), **fields))
        new_state = reduce(state, event)  # refused events are never written
        try:
            self._publish(event)
        except SinkError as exc:
            if exc.written:
                self._state = new_state
            raise
        self._state = new_state
        return event


def _unchanged(event: Event) -> Event:
    return event
