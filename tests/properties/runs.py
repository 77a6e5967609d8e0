"""Generated runs of the REAL runner: `AgentRunner` with an in-process model and memory sink.

`simulate` builds the runner the CLI builds (same reducer, decisions, tool invocation and
parallel tool path), with a `FunctionModel` whose replies hypothesis draws while the loop
runs, tools whose results and scheduling it draws, and a `MemorySink`. The model may answer
anything: text, 1-5 tool calls (some to unknown tools, some to a tool that is not read-only),
thinking, failed attempts (retried or not, per the run's policy), duplicate tool ids, any stop
reason. Optionally the "process" crashes at a drawn event (the sink fails from there on, as a
dead process writes nothing more) and is resumed from the log, up to three times.

With `approvals`, the model may also call "guarded", a tool that needs approval; the run's
approval mode is drawn, and so is each session's approver (none, as without a terminal, or
one whose answers y / n REASON / a / no answer hypothesis draws). A run that stops
awaiting_approval is resumed, as `ruizn resume --approve/--deny` does, with drawn decisions.

Beside the events, a run keeps the runner's own final state, the state after each event (by
the reducer, for the laws that need every prefix), and, built without the reducer, the
transcript the run must end with (`expected_messages`).
"""

from __future__ import annotations

import os
import string
from typing import Any

import anyio
import anyio.lowlevel
from attrs import evolve, frozen
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ruizn.decide import approval_candidates
from ruizn.defaults import APPROVAL_MODES, EFFORT_LEVELS, THINKING_MODES
from ruizn.effects.models.function import FunctionModel
from ruizn.effects.models.provider import ModelReply, ProviderError
from ruizn.effects.person.approval import Answer, needs_approval_of
from ruizn.effects.runlog.sink import MemorySink, SinkError
from ruizn.effects.tools.base import BaseTool, ToolRegistry
from ruizn.events import (
    Event,
    LlmCallStarted,
    LlmResponse,
    RunStarted,
    ToolCallFinished,
    UserMessage,
)
from ruizn.limits import Limits
from ruizn.reducers import rebuild, reduce, start
from ruizn.resuming import ResumeRefused, plan_continue, plan_resume, resume_decisions
from ruizn.settings import RunSettings
from ruizn.shell.runner import AgentRunner
from ruizn.state import (
    ContentBlock,
    ErrorType,
    ExecutionContext,
    JsonObject,
    Message,
    RedactedThinkingBlock,
    Status,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from ruizn.toolsource import SourceKind, ToolSource

# The examples per test are sized so tests/properties runs in about a minute on 2 cores;
# RUIZN_HYPOTHESIS_SCALE=10 runs ten times as many (a longer hunt, e.g. before a release).
SCALE = max(1, int(os.environ.get("RUIZN_HYPOTHESIS_SCALE", "1")))


def runs_settings(examples: int) -> settings:
    """Settings for a test over generated runs: `examples` (times SCALE), no deadline."""
    return settings(
        max_examples=examples * SCALE,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# Text the model, the user and the tools may produce: any unicode (no lone surrogates: they
# cannot be written as UTF-8), with the characters that break naive line-oriented code.
AWKWARD = (
    "读取当前目录下的 README.md",
    "你好\uff0c世界",  # a fullwidth comma
    "line one\nline two",
    "\r\n",
    "\u2028",
    "\u2029",
    "\x85",
    "\x00",
    "\t",
    '"quoted"',
    "back\\slash",
    "😀",
    "\ufeff",
    "e\u0301",
    "  ",
)
texts = st.lists(
    st.one_of(
        st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
        st.sampled_from(AWKWARD),
    ),
    max_size=3,
).map("".join)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(texts, json_values, max_size=3)
tool_inputs = st.one_of(st.fixed_dictionaries({"path": texts}), json_objects)

usages = st.builds(
    Usage,
    input_tokens=st.integers(0, 200_000),
    output_tokens=st.integers(0, 64_000),
    cache_creation_input_tokens=st.integers(0, 200_000),
    cache_read_input_tokens=st.integers(0, 200_000),
)
signatures = st.text(string.ascii_letters + string.digits + "+/=", min_size=1, max_size=40)
thinking_blocks = st.one_of(
    st.builds(ThinkingBlock, thinking=texts, signature=signatures),
    st.builds(RedactedThinkingBlock, data=signatures),
)
tool_results = st.one_of(
    st.builds(ToolResult.ok, texts),
    st.builds(ToolResult.error, st.sampled_from(list(ErrorType)), texts),
)
# "look" is read-only, "change" is not (it must never run twice), "gone" is not registered.
TOOL_NAMES = ("look", "look", "change", "gone")
# "guarded" is not read-only and needs approval (every call, or those its drawn rule picks).
APPROVAL_TOOL_NAMES = ("look", "change", "guarded", "guarded", "guarded", "gone")

SUCCESS_STOPS = ("end_turn", "stop_sequence")
# Stop reasons that end a text-only turn with status error (see decide._finish_turn).
ERROR_STOPS = ("max_tokens", "refusal", "tool_use", "model_context_window_exceeded")


class _DrawnTool(BaseTool):
    """A tool whose result hypothesis draws; it yields to the loop a drawn number of times so
    parallel calls finish in any order (deterministically: asyncio runs ready tasks FIFO)."""

    description = "a generated tool"
    input_schema: JsonObject = {"type": "object"}  # noqa: RUF012 - read-only class data

    def __init__(
        self,
        name: str,
        data: st.DataObject,
        log: list[str],
        *,
        read_only: bool,
        needs_approval: bool | Any = False,
    ):
        super().__init__()
        self.name = name  # type: ignore[misc]
        self.read_only = read_only  # type: ignore[misc]
        self.needs_approval = needs_approval
        self._data = data
        self._log = log

    async def invoke(self, input: JsonObject) -> ToolResult:
        result = self._data.draw(tool_results, label=f"{self.name} result")
        for _ in range(self._data.draw(st.integers(0, 3), label="yields")):
            await anyio.lowlevel.checkpoint()
        self._log.append(self.name)
        return result


@frozen
class Run:
    events: tuple[Event, ...]
    states: tuple[ExecutionContext, ...]  # states[i] is the state after events[i] (reducer)
    final: ExecutionContext  # the runner's own state when it stopped
    expected_messages: tuple[Message, ...]  # the transcript, built without the reducer
    ran: tuple[str, ...]  # the name of each tool execution, in order (crashes included)
    sessions: int  # 1 + the number of resumes after a crash
    max_steps: int
    tools: tuple[BaseTool, ...] = ()  # the tools the run was given

    @property
    def model_calls(self) -> int:
        """Distinct steps the loop called the model for (retries are the same step)."""
        return len({e.step for e in self.events if isinstance(e, LlmCallStarted)})


class _DrawnApprover:
    """A person at the prompt whose answers hypothesis draws; None: no answer (end of input),
    and the run stops awaiting_approval."""

    def __init__(self, data: st.DataObject) -> None:
        self._data = data

    async def __call__(self, call: ToolCall, tool: BaseTool | None) -> Answer | None:
        await anyio.lowlevel.checkpoint()
        match self._data.draw(st.sampled_from(["y", "n", "a", None]), label="answer"):
            case "y":
                return Answer(approved=True)
            case "a":
                return Answer(approved=True, always=True)
            case "n":
                return Answer(approved=False, reason=self._data.draw(st.none() | texts))
            case _:
                return None


def _guarded_rule(input: JsonObject) -> bool:
    """A tool's own rule: only calls whose input names a path need approval."""
    return "path" in input


class _Model:
    """The drawn model: each call may fail (after some tokens) or reply."""

    def __init__(
        self,
        data: st.DataObject,
        *,
        tools: bool | None,
        errors: bool,
        names: tuple[str, ...] = TOOL_NAMES,
    ) -> None:
        self._data = data
        self._tools = tools
        self._errors = errors
        self._names = names
        self._next_id = 1

    def __call__(self, request: JsonObject) -> Any:
        return self._stream(request)

    async def _stream(self, request: JsonObject) -> Any:
        draw = self._data.draw
        if self._errors and draw(st.integers(0, 5), label="fail?") == 0:
            for token in draw(st.lists(texts, max_size=2), label="tokens before failing"):
                yield token
            retryable = draw(st.integers(0, 3), label="retryable") > 0
            raise ProviderError(
                draw(st.sampled_from(["Overloaded", "Connection reset"]) | texts.filter(bool)),
                error_type=draw(st.sampled_from(["overloaded_error", "connection_error"])),
                retryable=retryable,
                status_code=draw(st.sampled_from([None, 500, 529])),
            )
        reply = self._reply()
        text = [b.text for b in reply.content if isinstance(b, TextBlock)]
        for token in text if draw(st.booleans()) else draw(st.lists(texts, max_size=4)):
            yield token
        yield reply

    def _reply(self) -> ModelReply:
        draw = self._data.draw
        thinking = draw(st.lists(thinking_blocks, max_size=2))
        use_tools = draw(st.integers(0, 3)) > 0 if self._tools is None else self._tools
        calls = []
        for _ in range(draw(st.integers(1, 5)) if use_tools else 0):
            # Now and then the model repeats an id: the runner must refuse that reply.
            if self._errors and calls and draw(st.integers(0, 9)) == 0:
                tool_id = calls[-1].id
            else:
                tool_id = f"toolu_{self._next_id:04d}"
                self._next_id += 1
            name = draw(st.sampled_from(self._names), label="tool")
            calls.append(ToolUseBlock(id=tool_id, name=name, input=draw(tool_inputs)))
        body: list[ContentBlock] = [*calls]
        for text in draw(st.lists(texts, max_size=2)):
            body.insert(draw(st.integers(0, len(body))), TextBlock(text=text))
        if calls:
            stop = draw(st.sampled_from(["tool_use", "tool_use", "max_tokens"]))
        elif self._errors:
            stop = draw(st.sampled_from([*SUCCESS_STOPS, *ERROR_STOPS, "pause_turn", None]))
        else:
            stop = draw(st.sampled_from([*SUCCESS_STOPS, "pause_turn"]))
        return ModelReply(
            content=(*thinking, *body), stop_reason=stop, usage=draw(usages), request_id="req_x"
        )


def run_config(
    data: st.DataObject, *, max_steps: int, approvals: bool = False
) -> tuple[RunSettings, str]:
    # "ask" twice as often: it is the mode with the most paths (prompt, stop, resume).
    modes = st.sampled_from(["ask", *APPROVAL_MODES])
    approval = data.draw(modes, label="approval") if approvals else "ask"
    config = RunSettings(
        workspace="/w",
        approval=approval,
        max_steps=max_steps,
        max_tokens=data.draw(st.sampled_from([1024, 4096, 64_000]), label="max_tokens"),
        system=data.draw(st.one_of(st.just(""), texts), label="system"),
        max_retries=data.draw(st.integers(0, 2), label="max_retries"),
        retry_base_delay=0.0,
        thinking=data.draw(st.sampled_from([None, *THINKING_MODES]), label="thinking"),
        show_thinking=data.draw(st.booleans(), label="show_thinking"),
        effort=data.draw(st.sampled_from([None, *EFFORT_LEVELS]), label="effort"),
    )
    return config, data.draw(texts.filter(str.strip), label="goal")


def simulate(
    data: st.DataObject,
    *,
    max_steps: int,
    tools: bool | None = None,
    errors: bool = False,
    crashes: bool = False,
    approvals: bool = False,
    continues: bool = False,
) -> Run:
    """Drive the real runner to its end (resuming after each drawn crash, and after each
    stop awaiting_approval, up to three of those). With `continues`, a person then adds a
    message to the ended run, as `ruizn continue` does, up to twice."""
    config, goal = run_config(data, max_steps=max_steps, approvals=approvals)
    concurrency = data.draw(st.integers(1, 4), label="tool concurrency")
    ran: list[str] = []
    tools_ = [
        _DrawnTool("look", data, ran, read_only=True),
        _DrawnTool("change", data, ran, read_only=False),
    ]
    if approvals:
        rule = data.draw(st.sampled_from([True, True, _guarded_rule]), label="guarded rule")
        tools_.append(_DrawnTool("guarded", data, ran, read_only=False, needs_approval=rule))
    registry = ToolRegistry(tools_)
    # What a builder records: the concurrency, and what each tool said of itself.
    config = evolve(
        config,
        tool_concurrency=concurrency,
        tool_sources=tuple(
            ToolSource(
                tool=t.name, kind=SourceKind.SPEC, ref=f"tests:{t.name}", read_only=t.read_only
            )
            for t in tools_
        ),
    )
    names = APPROVAL_TOOL_NAMES if approvals else TOOL_NAMES
    model = _Model(data, tools=tools, errors=errors, names=names)
    t0 = data.draw(st.floats(1.6e9, 2.0e9), label="t0")
    events: list[Event] = []
    ticks = iter(range(10**9))

    def clock() -> float:
        return t0 + next(ticks) * 0.001

    state: ExecutionContext | None = None
    sessions = 0
    crash_budget = 3
    waits = 0
    final: ExecutionContext | None = None
    while True:
        sessions += 1
        crash_at = None
        if crashes and crash_budget and data.draw(st.booleans(), label="crash?"):
            crash_budget -= 1
            crash_at = data.draw(st.integers(1, 40), label="crash at")
        sink = MemorySink(fail_at=crash_at)
        asks = approvals and data.draw(st.booleans(), label="a person at the prompt?")
        runner = AgentRunner(
            provider=FunctionModel(model),
            registry=registry,
            sink=sink,
            clock=clock,
            timer=clock,
            state=state,
            approver=_DrawnApprover(data) if asks else None,
        )
        crashed = _session(runner, state, config, goal, sink)
        events.extend(sink.events)
        if crashed and not events:
            # The process died before run_started reached the log: there is no run to resume
            # (the CLI finds no log), so the user simply starts it again.
            sessions -= 1
            continue
        if not crashed:
            final = runner.state
            if final.status is not Status.AWAITING_APPROVAL or waits >= 3:
                break
            waits += 1  # stopped for a decision: another process resumes with some
        # The process died or stopped: all we have is the log. Replay it and resume, as the
        # CLI does.
        state = rebuild(events)
        assert state == runner.state, "the state a stop left equals the replay of its log"
        try:
            plan = plan_resume(state, Limits())
        except ResumeRefused:
            # Killed after the last step, or after an answer cut at max_tokens, before its
            # run_finished: the user does what the message says (a higher --max-steps or
            # --max-tokens). Found by these laws; the CLI behaves the same.
            plan = plan_resume(
                state,
                Limits(
                    max_steps=max(state.settings.max_steps, state.step + 1),
                    max_tokens=state.settings.max_tokens * 2,
                ),
            )
        if plan is None:
            final = state
            break
        decisions = _drawn_decisions(data, state, registry) if approvals else ()
        state = _go_on(model, registry, clock, state, events=events, plan=plan, decisions=decisions)
    assert final is not None
    while continues and data.draw(st.booleans(), label="continue?"):
        message = data.draw(texts.filter(str.strip), label="message")
        budget = data.draw(st.none() | st.integers(1, 3), label="budget")
        try:
            plan = plan_continue(final, message, Limits(max_steps=budget))
        except ResumeRefused:
            break  # calls left unanswered (awaiting approval): continue says resume first
        final = _go_on(
            model, registry, clock, final, events=events, plan=plan, message=message, drive=True
        )
        sessions += 1
    states: list[ExecutionContext] = []
    for event in events:
        states.append(start(event) if isinstance(event, RunStarted) else reduce(states[-1], event))
    return Run(
        events=tuple(events),
        states=tuple(states),
        final=final,
        expected_messages=expected_messages(events),
        ran=tuple(ran),
        sessions=sessions,
        max_steps=max_steps,
        tools=tuple(tools_),
    )


def _go_on(
    model: _Model,
    registry: ToolRegistry,
    clock: Any,
    state: ExecutionContext,
    *,
    events: list[Event],
    plan: Any,
    decisions: tuple[Any, ...] = (),
    message: str | None = None,
    drive: bool = False,
) -> ExecutionContext:
    """Resume `state` by `plan` in a new "process" (a runner of its own), as the CLI does:
    its events join `events`; with `drive`, it runs on to its end."""
    runner = AgentRunner(
        provider=FunctionModel(model),
        registry=registry,
        sink=(sink := MemorySink()),
        clock=clock,
        timer=clock,
        state=state,
    )
    runner.resume(plan, decisions=decisions, message=message)
    if drive:
        anyio.run(runner.drive)
    events.extend(sink.events)
    return runner.state


def _drawn_decisions(
    data: st.DataObject, state: ExecutionContext, registry: ToolRegistry
) -> tuple[Any, ...]:
    """`--approve` / `--deny` as a person might give them with a resume."""
    ids = [call.id for call in approval_candidates(state, needs_approval_of(registry))]
    if not ids:
        return ()
    approve = data.draw(st.lists(st.sampled_from([*ids, "all"]), max_size=3), label="approve")
    pool = [i for i in [*ids, "all"] if i not in approve]
    deny = data.draw(st.lists(st.sampled_from(pool), max_size=2), label="deny") if pool else []
    reason = data.draw(st.none() | texts, label="reason") if deny else None
    return resume_decisions(
        state, needs_approval_of(registry), approve=tuple(approve), deny=tuple(deny), reason=reason
    )


def _session(
    runner: AgentRunner,
    state: ExecutionContext | None,
    config: RunSettings,
    goal: str,
    sink: MemorySink,
) -> bool:
    """Run one process's session; True if it crashed (its sink failed)."""

    async def go() -> None:
        if state is None:
            runner.begin(run_id="20260101-000000-a1b2c3", goal=goal, settings=config)
        await runner.drive()

    try:
        anyio.run(go)
    except SinkError:
        return True
    return False


def expected_messages(events: list[Event]) -> tuple[Message, ...]:
    """The transcript the log describes, built without the reducer: the goal, then each
    response, then each turn's results in the order the model asked (a continued turn
    extends the assistant message it continues)."""
    messages: list[Message] = []
    results: dict[str, ToolResult] = {}
    turn: list[str] = []
    continuing = False
    for event in events:
        if isinstance(event, RunStarted):
            messages.append(Message(role="user", content=(TextBlock(text=event.goal),)))
        elif isinstance(event, LlmResponse):
            content = event.content
            if continuing:
                content = (*messages.pop().content, *content)
            messages.append(Message(role="assistant", content=content))
            turn = [b.id for b in content if isinstance(b, ToolUseBlock)]
            continuing = event.stop_reason == "pause_turn" and not turn
            results = {}
        elif isinstance(event, UserMessage):
            text = TextBlock(text=event.text)
            if messages[-1].role == "user":
                messages[-1] = Message(role="user", content=(*messages[-1].content, text))
            else:
                messages.append(Message(role="user", content=(text,)))
            continuing = False
        elif isinstance(event, ToolCallFinished):
            results[event.id] = event.result
            if turn and all(t in results for t in turn):
                messages.append(
                    Message(
                        role="user",
                        content=tuple(
                            ToolResultBlock(
                                tool_use_id=t,
                                content=results[t].content,
                                is_error=results[t].is_error,
                            )
                            for t in turn
                        ),
                    )
                )
                turn = []
    return tuple(messages)
