"""What the shell must do next, decided from the state alone.

Every policy of the loop is here, pure and testable: when to stop and what a stop reason
means (`next_action`), whether a failed model call is retried and after how long
(`after_failure`), what a resume may do (`plan_resume`) and which tool calls a crash
interrupted (`interrupted_calls`). The runner executes what these return and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable

from attrs import frozen

from ruizn.reducers import PAUSE_STOP, SUCCESS_STOPS, reply_problem
from ruizn.state import (
    ContentBlock,
    ErrorType,
    ExecutionContext,
    Phase,
    Status,
    ToolCall,
    ToolResult,
    ToolUseBlock,
)


@frozen(kw_only=True)
class CallModel:
    step: int  # the step this call will be (1-based)
    attempt: int = 1  # 1 for the first try, then 2, 3... for retries
    delay: float = 0.0  # seconds to wait before the call (the back-off of a retry)


@frozen(kw_only=True)
class RunTools:
    calls: tuple[ToolCall, ...]


@frozen(kw_only=True)
class RefuseTools:
    """Answer these calls with an error result instead of running them."""

    calls: tuple[ToolCall, ...]
    reason: str


@frozen(kw_only=True)
class Finish:
    status: Status
    error: str | None = None


@frozen(kw_only=True)
class Finished:
    """The run already ended; nothing to do."""

    status: Status


Action = CallModel | RunTools | RefuseTools | Finish | Finished

# A turn cut off by max_tokens may hold a tool_use whose JSON was never finished: running it
# would act on a guess. The model is told instead and can ask again (see README).
TRUNCATED_TOOL_CALL = (
    "this tool call was not run: the response hit max_tokens before the call was complete;"
    " ask again with a shorter input, or split the work"
)
CONTEXT_EXCEEDED = (
    "the conversation no longer fits the model's context window"
    " (stop_reason model_context_window_exceeded): start a new run with a narrower goal,"
    " or use a model with a larger context window"
)

# A retry-after longer than this is not waited for: the call gives up instead of hanging.
MAX_RETRY_AFTER = 60.0
# Our own back-off doubles from the base delay up to this.
MAX_BACKOFF = 30.0


def next_action(state: ExecutionContext) -> Action:
    if state.status is not Status.RUNNING:
        return Finished(status=state.status)
    match state.phase:
        case Phase.READY:
            failure = state.failure
            if failure is not None and not failure.will_retry:
                return Finish(status=Status.ERROR, error=_gave_up(failure.message, state.attempt))
            if failure is None and state.step >= state.max_steps:
                return Finish(status=Status.MAX_STEPS)
            delay = failure.retry_in if failure is not None else 0.0
            return CallModel(step=state.step + 1, attempt=state.attempt + 1, delay=delay)
        case Phase.TOOLS:
            pending = state.pending_tool_calls
            if state.stop_reason == "max_tokens":
                return RefuseTools(calls=pending, reason=TRUNCATED_TOOL_CALL)
            return RunTools(calls=pending)
        case Phase.DONE:
            return _finish_turn(state)
        case Phase.STREAMING:
            # Only a crash leaves a run here, and a resume moves it on; a live loop never
            # asks mid-stream.
            return Finish(status=Status.ERROR, error="the model call in flight was lost")
        case Phase.FINISHED:  # pragma: no cover - status is not running then
            return Finished(status=state.status)


def _finish_turn(state: ExecutionContext) -> Action:
    has_tool_use = any(isinstance(b, ToolUseBlock) for b in state.messages[-1].content)
    match state.stop_reason:
        case stop if stop in SUCCESS_STOPS:
            return Finish(status=Status.SUCCESS)
        case "max_tokens":
            return Finish(
                status=Status.ERROR,
                error=f"the answer was cut off at max_tokens ({state.max_tokens}):"
                f" resume with a larger --max-tokens to let it go on",
            )
        case "tool_use" if not has_tool_use:
            return Finish(status=Status.ERROR, error="stop_reason tool_use without a tool call")
        case "refusal":
            return Finish(status=Status.ERROR, error="the model refused to answer")
        case "model_context_window_exceeded":
            return Finish(status=Status.ERROR, error=CONTEXT_EXCEEDED)
        case other:
            return Finish(status=Status.ERROR, error=f"unexpected stop_reason {other!r}")


def _gave_up(message: str, attempts: int) -> str:
    return message if attempts <= 1 else f"{message} (after {attempts} attempts)"


@frozen(kw_only=True)
class RetryDecision:
    will_retry: bool
    retry_in: float  # the wait before the next attempt (0 when giving up)


def after_failure(
    state: ExecutionContext, *, retryable: bool, retry_after: float | None = None
) -> RetryDecision:
    """Retry attempt `state.attempt` of the call, or give up.

    Up to `max_retries` retries. The wait is the server's retry-after when it sent one (up
    to MAX_RETRY_AFTER; a longer one gives up rather than hang), otherwise the base delay
    doubled per attempt, capped at MAX_BACKOFF. No jitter: the core has no randomness, and
    one ruizn process makes one call at a time.
    """
    if not retryable or state.attempt > state.max_retries:
        return RetryDecision(will_retry=False, retry_in=0.0)
    if retry_after is not None and retry_after >= 0:
        if retry_after > MAX_RETRY_AFTER:
            return RetryDecision(will_retry=False, retry_in=0.0)
        return RetryDecision(will_retry=True, retry_in=retry_after)
    backoff = state.retry_base_delay * 2 ** (state.attempt - 1)
    return RetryDecision(will_retry=True, retry_in=min(backoff, MAX_BACKOFF))


def reply_refusal(content: tuple[ContentBlock, ...]) -> str | None:
    """Why a reply cannot become a response (it is then a failed, retryable call)."""
    problem = reply_problem(content)
    return None if problem is None else f"invalid response: {problem}"


def interrupted_calls(
    state: ExecutionContext, read_only: Callable[[str], bool]
) -> tuple[ToolCall, ...]:
    """The tool calls a stop interrupted that must be answered `interrupted` on resume.

    A call that was started and not finished may or may not have taken effect. A read-only
    tool is safe to run again (it is left pending, so it runs); any other is never run twice:
    the model is told instead.
    """
    in_flight = set(state.tools_in_flight)
    return tuple(
        call
        for call in state.pending_tool_calls
        if call.id in in_flight and not read_only(call.name)
    )


def interrupted_result(call: ToolCall) -> ToolResult:
    return ToolResult.error(
        ErrorType.INTERRUPTED,
        f"{call.name} was interrupted when the run stopped and was not run again:"
        " it may or may not have taken effect",
    )


class ResumeRefused(ValueError):
    """A resume that cannot go on; the message is one line for the user."""


@frozen(kw_only=True)
class ResumePlan:
    max_steps: int
    max_tokens: int | None  # None: keep the run's limit


def plan_resume(
    state: ExecutionContext, *, max_steps: int | None, max_tokens: int | None
) -> ResumePlan | None:
    """The limits a resume continues with, or None when there is nothing to do.

    A run stopped by its step limit gets another batch of the same size unless `max_steps`
    says otherwise; `max_steps` is the new total for the run, not the number added.
    """
    if state.status is Status.SUCCESS:
        return None
    if max_tokens is not None and max_tokens < 1:
        raise ResumeRefused("--max-tokens must be >= 1")
    if max_steps is None:
        max_steps = state.max_steps
        if state.status is Status.MAX_STEPS:
            max_steps = state.step + state.max_steps
    needs_call = state.messages[-1].role == "user" or state.phase is Phase.STREAMING
    if max_steps <= state.step and needs_call:
        raise ResumeRefused(
            f"--max-steps {max_steps} leaves no step: the run has taken {state.step} already"
        )
    if (
        state.phase in (Phase.DONE, Phase.FINISHED)
        and state.messages[-1].role == "assistant"
        and state.stop_reason == "max_tokens"
        and state.turn_open == 0
        and (max_tokens is None or max_tokens <= state.max_tokens)
    ):
        raise ResumeRefused(
            f"the answer was cut off at max_tokens ({state.max_tokens}): resume with"
            f" --max-tokens larger than {state.max_tokens} to let it go on"
        )
    return ResumePlan(max_steps=max_steps, max_tokens=max_tokens)


__all__ = [
    "CONTEXT_EXCEEDED",
    "PAUSE_STOP",
    "TRUNCATED_TOOL_CALL",
    "Action",
    "CallModel",
    "Finish",
    "Finished",
    "RefuseTools",
    "ResumePlan",
    "ResumeRefused",
    "RetryDecision",
    "RunTools",
    "after_failure",
    "interrupted_calls",
    "interrupted_result",
    "next_action",
    "plan_resume",
    "reply_refusal",
]
