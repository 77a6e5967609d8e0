"""What the shell must do next, decided from the state alone.

The shell executes exactly what `next_action` returns and nothing else, so every policy of
the loop (when to stop, what a stop reason means) is here, pure and testable.
"""

from __future__ import annotations

from attrs import frozen

from ruizn.state import ExecutionContext, Status, ToolCall, ToolUseBlock


@frozen(kw_only=True)
class CallModel:
    step: int  # the step this call will be (1-based)


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


def next_action(state: ExecutionContext) -> Action:
    if state.status is not Status.RUNNING:
        return Finished(status=state.status)
    last = state.messages[-1]
    if last.role == "user":
        if state.step >= state.max_steps:
            return Finish(status=Status.MAX_STEPS)
        return CallModel(step=state.step + 1)
    pending = state.pending_tool_calls
    if pending:
        if state.stop_reason == "max_tokens":
            return RefuseTools(calls=pending, reason=TRUNCATED_TOOL_CALL)
        return RunTools(calls=pending)
    return _finish_turn(state, has_tool_use=any(isinstance(b, ToolUseBlock) for b in last.content))


def _finish_turn(state: ExecutionContext, *, has_tool_use: bool) -> Action:
    match state.stop_reason:
        case "end_turn" | "stop_sequence":
            return Finish(status=Status.SUCCESS)
        case "max_tokens":
            return Finish(
                status=Status.ERROR,
                error=f"the answer was cut off at max_tokens ({state.max_tokens});"
                " raise --max-tokens",
            )
        case "tool_use" if not has_tool_use:
            return Finish(status=Status.ERROR, error="stop_reason tool_use without a tool call")
        case "refusal":
            return Finish(status=Status.ERROR, error="the model refused to answer")
        case other:
            return Finish(status=Status.ERROR, error=f"unexpected stop_reason {other!r}")
