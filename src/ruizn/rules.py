"""The rules a run follows, stated once: below both the reducer (which refuses an event that
breaks them) and `decide` (which chooses the next action by them).

- how a run must stop: when a finished turn ends it and with what status (`turn_stop`), and
  when a limit does (`limit_stop`: steps, the budget, the context);
- which replies may enter the history (`reply_problem`);
- what the run's own approval rules decide without a person (`rule_decision`);
- where a run stands after a turn or a resume (`phase_after_turn`, `phase_after_resume`).

Pure functions of the state; no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from attrs import frozen

from ruizn.bounds import deeper_than, text_deeper_than, too_deep
from ruizn.commands import matching_pattern
from ruizn.settings import JsonObject, RunSettings
from ruizn.state import (
    CompactionBlock,
    ContentBlock,
    DecidedBy,
    ExecutionContext,
    Phase,
    RedactedThinkingBlock,
    Status,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResultBlock,
    ToolUseBlock,
)
from ruizn.toolsource import ToolSource
from ruizn.window import compact_threshold, context_limit, plan_clearing


def changed_tools(
    before: RunSettings, tools: tuple[JsonObject, ...], sources: tuple[ToolSource, ...]
) -> frozenset[str]:
    """The tools of `before` that `tools` and `sources` no longer offer as they were: gone,
    or with another input schema, origin or read-only flag (a new description is the same
    tool). A call the model made of one before the change must not run as the new one."""

    def offered(
        tools: tuple[JsonObject, ...], sources: tuple[ToolSource, ...]
    ) -> dict[object, tuple[object, ...]]:
        origin = {s.tool: (s.kind, s.ref, s.read_only) for s in sources}
        return {
            t.get("name"): (t.get("input_schema"), origin.get(str(t.get("name")))) for t in tools
        }

    old, new = offered(before.tools, before.tool_sources), offered(tools, sources)
    return frozenset(str(name) for name, what in old.items() if new.get(name) != what)


# The stop reasons that end a turn with nothing more to do (the run then succeeds).
SUCCESS_STOPS = frozenset({"end_turn", "stop_sequence"})
# The model paused a long turn and must be called again with its partial answer.
PAUSE_STOP = "pause_turn"
CONTEXT_EXCEEDED = (
    "the conversation no longer fits the model's context window"
    " (stop_reason model_context_window_exceeded): start a new run with a narrower goal,"
    " or use a model with a larger context window"
)
NEVER_APPROVED = "the run's approval mode is never: no call that needs approval may run"


@frozen(kw_only=True)
class Finish:
    """How a run must finish: its status, and the error it reports (if any). Also the
    action `decide.next_action` gives when the run ends (decide re-exports it)."""

    status: Status
    error: str | None = None


def turn_stop(state: ExecutionContext) -> Finish:
    """How a run whose last turn needs nothing more (phase DONE) finishes, by stop reason."""
    has_tool_use = any(isinstance(b, ToolUseBlock) for b in state.messages[-1].content)
    match state.stop_reason:
        case stop if stop in SUCCESS_STOPS:
            return Finish(status=Status.SUCCESS)
        case "max_tokens" if _still_thinking(state.messages[-1].content):
            return Finish(
                status=Status.ERROR,
                error=f"max_tokens ({state.settings.max_tokens}) ran out while the model was"
                " thinking, before its answer: resume with a larger --max-tokens, or run with"
                " a lower --effort",
            )
        case "max_tokens":
            return Finish(
                status=Status.ERROR,
                error=f"the answer was cut off at max_tokens ({state.settings.max_tokens}):"
                f" resume the run with --max-tokens {state.settings.max_tokens * 2} to let it"
                " go on",
            )
        case "tool_use" if not has_tool_use:
            return Finish(status=Status.ERROR, error="stop_reason tool_use without a tool call")
        case "refusal":
            return Finish(status=Status.ERROR, error="the model refused to answer")
        case "model_context_window_exceeded":
            return Finish(status=Status.ERROR, error=compacted_too_big(state) or CONTEXT_EXCEEDED)
        case other:
            return Finish(status=Status.ERROR, error=f"unexpected stop_reason {other!r}")


def _still_thinking(content: tuple[ContentBlock, ...]) -> bool:
    """The reply's last block with anything in it is thinking: the answer never began."""
    for block in reversed(content):
        if isinstance(block, ThinkingBlock | RedactedThinkingBlock):
            return True
        if not isinstance(block, TextBlock) or block.text.strip():
            return False
    return False


def call_cut(state: ExecutionContext) -> bool:
    """A model call is in flight (the run ends mid-call, cancelled or failed): its input was
    sent, and is billed, but the API never said its usage, so the run's cost is unknown."""
    return state.phase is Phase.STREAMING


def limit_stop(state: ExecutionContext) -> Finish | None:
    """The limit that forbids the next model call, if one does (phase READY): the step
    limit; the run's budget, spent (approvals and tools cost nothing: only model calls
    count); a budget shared with other runs, spent; a history that does not fit the context
    limit even with every older tool result cleared."""
    settings = state.settings
    stop = spent_stop(state)
    if stop is not None:
        return stop
    limit = context_limit(settings)
    if limit is not None and state.context_tokens > limit and not plan_clearing(state).fits:
        return Finish(status=Status.ERROR, error=context_error(state, limit))
    return None


def spent_stop(state: ExecutionContext) -> Finish | None:
    """The limits no compaction can help: the steps, the run's budget, a shared budget."""
    settings = state.settings
    if state.step >= settings.max_steps:
        return Finish(status=Status.MAX_STEPS)
    if settings.max_cost is not None and state.cost >= settings.max_cost:
        return Finish(status=Status.MAX_COST)
    if state.budget_spent is not None:
        return Finish(status=Status.MAX_COST)
    return None


def compacted_too_big(state: ExecutionContext) -> str | None:
    """Why a history that was compacted this very step still does not fit (None: it was
    not compacted this step, or compaction is off): a fresh summary is too long, and only
    a lower --compact-at (sooner, smaller summaries) or a narrower goal helps."""
    at = compact_threshold(state.settings)
    if at is None or state.compacted_step != state.step or state.compactions == 0:
        return None
    return (
        f"the conversation does not fit the model's context window even right after it was"
        f" compacted (about {state.context_tokens:,} tokens): compact sooner with a lower"
        f" --compact-at (now {at:,}), ask for a shorter summary with --compact-instructions,"
        " or start a new run with a narrower goal"
    )


def context_error(state: ExecutionContext, limit: int) -> str:
    """Why the history cannot be sent, and the fix that applies to this run: a limit the
    user set (--max-context) is raised on resume, up to what the model takes; past the
    model's own window, only a narrower goal or a larger window helps. (No run id in it: the
    error is logged, and a rerun or a fork of the run must come to the same words.)"""
    wanted = context_fix(state)
    if wanted is None:
        return compacted_too_big(state) or CONTEXT_EXCEEDED
    return (
        f"the conversation (about {state.context_tokens:,} tokens) does not fit this run's"
        f" --max-context {limit:,} even with every older tool result cleared: resume the run"
        f" with --max-context {wanted} to go on"
    )


def context_fix(state: ExecutionContext) -> int | None:
    """The --max-context a resume needs when the user's own limit is what the history does
    not fit: the history and a quarter more for the steps to come, in thousands, within
    the model's window; None when the limit is the model's (or the history is past it)."""
    settings = state.settings
    if not settings.max_context:
        return None
    wanted = -(-state.context_tokens * 5 // 4 // 1000) * 1000
    if settings.context_window is not None:
        model = max(settings.context_window - settings.max_tokens, 1)
        if state.context_tokens > model:
            return None
        wanted = min(wanted, model)
    return wanted


def resume_fix(state: ExecutionContext) -> str | None:
    """The options of `ruizn resume RUN` that let a run a limit ended in error go on: a
    larger --max-tokens for an answer cut at max_tokens, a larger --max-context for a history
    past the user's limit; None for any other end."""
    if state.status is not Status.ERROR or state.error is None:
        return None
    if (
        state.stop_reason == "max_tokens"
        and state.messages
        and state.error == turn_stop(state).error
    ):
        return f"--max-tokens {state.settings.max_tokens * 2}"
    wanted = context_fix(state)
    limit = context_limit(state.settings)
    if wanted is not None and limit is not None and state.error == context_error(state, limit):
        return f"--max-context {wanted}"
    return None


def reply_problem(content: tuple[ContentBlock, ...]) -> str | None:
    """Why an assistant turn cannot enter the history (the API would refuse it back), or None.

    The reducer refuses a log holding such a turn; the runner makes such a reply a failed,
    retried model call instead of a response.
    """
    seen: set[str] = set()
    for block in content:
        if isinstance(block, ToolUseBlock):
            if not block.id:
                return f"a tool_use block ({block.name!r}) has no id"
            if block.id in seen:
                return f"two tool_use blocks share the id {block.id!r}"
            if not block.name:
                return f"tool_use {block.id!r} has no name"
            if deeper_than(block.input):
                return too_deep(f"tool_use {block.id!r} input")
            seen.add(block.id)
        elif isinstance(block, ToolResultBlock):
            return "an assistant turn holds a tool_result block"
        elif isinstance(block, CompactionBlock):
            # ruizn never asks for the API's automatic compaction; only a compaction call
            # (context_compacted) puts a summary in the history, first.
            return "an answer holds a compaction block"
    return None


@frozen(kw_only=True)
class ApprovalDecision:
    id: str
    approved: bool
    by: DecidedBy
    reason: str | None = None
    always: bool = False  # a person's yes that also approves the tool for the rest of the run


def rule_decision(
    state: ExecutionContext, call: ToolCall, *, parsed: bool = True
) -> ApprovalDecision | None:
    """The decision the run's rules make about an awaiting call, or None: a person decides.

    `always` approves and `never` denies every call ("policy"), except that a call a
    PreToolUse hook answered `ask` is put to a person in `always` mode too; in `ask` mode a
    tool a person approved for the rest of the run is approved ("always-rule").
    `parsed=False`: an `--allow-command` pattern by its characters alone (command_allowed).
    """
    mode = state.settings.approval
    if mode == "always":
        if pre_decision(state, call.id) == "ask":
            return None  # a PreToolUse hook asked for a person, whatever the mode
        return ApprovalDecision(id=call.id, approved=True, by="policy")
    if mode == "never":
        return ApprovalDecision(id=call.id, approved=False, by="policy", reason=NEVER_APPROVED)
    if call.name in state.always_approved:
        return ApprovalDecision(id=call.id, approved=True, by="always-rule")
    command = call.input.get("command") if call.name == SHELL_TOOL else None
    if isinstance(command, str):
        pattern = command_allowed(command, state.settings.allow_commands, parsed=parsed)
        if pattern is not None:
            return ApprovalDecision(
                id=call.id,
                approved=True,
                by="policy",
                reason=f"the command matches --allow-command {pattern!r}",
            )
    return None


SHELL_TOOL = "bash"


def command_allowed(command: str, patterns: tuple[str, ...], *, parsed: bool = True) -> str | None:
    """The first of `patterns` that approves the whole of `command`, or None.

    A pattern is matched against the whole command, character for character, except that `*`
    stands for any run of characters and `?` for any one character, neither ever standing
    for `;&|`()<>` or a line break; and what a wildcard stands for must be plain words (no
    expansion, substitution, redirection, glob, ...: parsed, see `ruizn.commands`), so
    `pytest *` approves `pytest -q tests/x.py`, not `pytest -q | sh`, not `pytest ${x@P}`,
    not `pytest`, and not ` pytest -q` (a leading space). `parsed=False`: by the characters
    alone (what a log's recorded decision is checked against).
    """
    return matching_pattern(command, patterns, parsed=parsed)


def phase_after_turn(state: ExecutionContext) -> Phase:
    """Once an assistant turn is in: tools to answer, a call to continue a paused turn, or
    the end."""
    if state.turn_open:
        return Phase.TOOLS
    if state.continuing:
        return Phase.READY
    return Phase.DONE


def phase_after_resume(state: ExecutionContext) -> Phase:
    """A resumed run calls the model when the history ends with the user; otherwise it goes
    on with the last turn as a new response would."""
    if state.messages[-1].role == "user":
        return Phase.READY
    return phase_after_turn(state)


def phase_after_call(state: ExecutionContext) -> Phase:
    """After a model call failed or a compaction ended: ready for the next call, or still
    finished (`ruizn compact` compacts a run that has stopped)."""
    return Phase.READY if state.status is Status.RUNNING else Phase.FINISHED


def phase_after_result(state: ExecutionContext) -> Phase:
    """A result leaves the turn open until its last call is answered; then the model is
    called with every result (merged into one user message), unless the turn's structured
    answer (tool mode) ended the run."""
    if state.turn_open:
        return Phase.TOOLS
    if state.settings.output_schema is not None and (state.output_valid or output_exhausted(state)):
        return Phase.DONE
    return Phase.READY


# The tool a model without constrained decoding gives its structured answer to (tool mode).
OUTPUT_TOOL = "final_output"
# When the schema is not an object, the tool's input wraps the answer in this key.
OUTPUT_KEY = "output"


@frozen(kw_only=True)
class OutputVerdict:
    """The final answer checked against the run's output schema (see `check_output`)."""

    valid: bool
    output: Any = None
    error: str | None = None
    call_id: str | None = None


def output_call(state: ExecutionContext) -> ToolCall | None:
    """The unanswered `final_output` call of the last turn (tool mode), if there is one."""
    if state.settings.output_mode != "tool":
        return None
    return next((c for c in state.pending_tool_calls if c.name == OUTPUT_TOOL), None)


def wraps_output(schema: JsonObject) -> bool:
    """Whether the output tool's input wraps the answer (a schema that is not an object)."""
    return schema.get("type") != "object"


def check_output(state: ExecutionContext) -> OutputVerdict:
    """The last answer against `settings.output_schema`: the `final_output` call's input
    (tool mode), or the text of the last assistant message parsed as JSON. The validator is
    jsonschema's, for the schema's own draft; its best-matching error is what the model is
    told. Deterministic, so the reducer checks a logged verdict by making it again."""
    schema = state.settings.output_schema
    assert schema is not None, "a run without an output schema has no output to check"
    call = output_call(state)
    if call is not None:
        value: Any = call.input
        if wraps_output(schema):
            if OUTPUT_KEY not in call.input:
                return OutputVerdict(
                    valid=False,
                    error=f"the {OUTPUT_TOOL} input must hold the answer as {OUTPUT_KEY!r}",
                    call_id=call.id,
                )
            value = call.input[OUTPUT_KEY]
        error = schema_error(schema, value)
        return OutputVerdict(
            valid=error is None,
            output=value if error is None else None,
            error=error,
            call_id=call.id,
        )
    text = "".join(b.text for b in state.messages[-1].content if isinstance(b, TextBlock))
    if state.messages[-1].role != "assistant" or not text.strip():
        hint = f": call the {OUTPUT_TOOL} tool" if state.settings.output_mode == "tool" else ""
        return OutputVerdict(valid=False, error=f"the answer holds no JSON{hint}")
    if text_deeper_than(text):
        return OutputVerdict(valid=False, error=too_deep("the answer"))
    try:
        value = json.loads(text)
    except ValueError as exc:
        return OutputVerdict(valid=False, error=f"the answer is not JSON ({exc})")
    error = schema_error(schema, value)
    return OutputVerdict(valid=error is None, output=value if error is None else None, error=error)


def schema_error(schema: JsonObject, value: Any) -> str | None:
    """Why `value` does not match `schema` (jsonschema's best match), or None. Checked as
    data (schemacheck.py): nothing fetched, no backtracking, no endless recursion."""
    from ruizn.schemacheck import schema_error as checked

    return checked(schema, value)


def schema_problem(schema: object) -> str | None:
    """Why `schema` is not a JSON Schema a run can check answers against, or None."""
    from jsonschema import Draft202012Validator, exceptions, validators

    from ruizn.schemacheck import schema_problem_of

    if not isinstance(schema, dict):
        return f"an output schema must be a JSON object, not {type(schema).__name__}"
    if deeper_than(schema):
        return too_deep("the output schema")
    try:
        validators.validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except exceptions.SchemaError as exc:
        return f"not a valid JSON Schema: {exc.message}"
    return schema_problem_of(schema)


def output_feedback(error: str, mode: str | None) -> str:
    """What an answer that did not match the schema is answered with."""
    how = (
        f"call the {OUTPUT_TOOL} tool again with an input that matches its schema"
        if mode == "tool"
        else "answer again with only the JSON, matching the schema"
    )
    return f"Your answer does not match the required output schema: {error}. Please {how}."


def output_exhausted(state: ExecutionContext) -> bool:
    """A run whose answers missed the schema more often than it may retry."""
    return state.output_checks > state.settings.output_retries


def phase_after_output(state: ExecutionContext) -> Phase:
    """After an output check: the turn's other calls first; then the end (a valid answer,
    or no retries left), or the model again with the error."""
    if state.turn_open:
        return Phase.TOOLS
    if state.output_valid or output_exhausted(state):
        return Phase.DONE
    return Phase.READY


def pre_decision(state: ExecutionContext, call_id: str) -> str:
    """What the PreToolUse hooks decided about a call of the turn so far (none: nothing)."""
    for verdict in state.turn_pre:
        if verdict.id == call_id:
            return verdict.decision
    return "none"


def phase_after_hook(state: ExecutionContext) -> Phase:
    """Where a hook leaves the run: as it was, or READY when a Stop hook that blocked sent
    the model back (the reducer says so)."""
    return state.phase


class InvalidTransition(ValueError):
    """The event cannot follow the state it was applied to."""
