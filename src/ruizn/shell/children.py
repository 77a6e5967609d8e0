"""Subagents: the `agent` tool, whose call runs a child run and answers with its final text.

Each child is a run of its own (its id, its events.jsonl beside its parent's, its
run_started naming the parent), built by the parent's `ruizn.Agent` (the one builder: it is
handed in as `ChildBuilder`, so this module imports nothing above the shell). The parent's
log records the child's start (before the child's first line) and its end with its totals,
which the reducer adds to the parent's: one budget, and the parent replays without reading
the child. After a crash the call runs again and resumes the child it started, in the
child's own log (the child answers its own interrupted calls: never twice).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

import anyio
from attrs import evolve, frozen

from ruizn.agentdefs import Subagent
from ruizn.effects.hooks.command import HookExecutor, HookRun
from ruizn.effects.models.pricing import SharedBudget
from ruizn.effects.models.provider import ProviderConfigError
from ruizn.effects.person.approval import Answer, Approver
from ruizn.effects.runlog.store import RunNotFound, RunStore, new_run_id
from ruizn.effects.runlog.writer import RunLocked
from ruizn.effects.tools.base import BaseTool
from ruizn.events import Event, LlmResponse, Parent
from ruizn.resuming import ResumeRefused, UntrustedRun
from ruizn.settings import ConfigError, HookSpec, RunSettings
from ruizn.shell.outcome import NothingToResume, Session, final_text
from ruizn.shell.toolcalls import ChildAwaits, ChildHost
from ruizn.state import (
    ChildRun,
    ErrorType,
    ExecutionContext,
    JsonObject,
    Status,
    ToolCall,
    ToolResult,
)
from ruizn.subagents import AGENT_TOOL, child_settings, remaining_budget

__all__ = [
    "AgentTool",
    "ChildAgent",
    "ChildBuilder",
    "ChildFailed",
    "ChildLaunch",
    "ChildLauncher",
    "ChildRuns",
    "ChildSubscriber",
    "InProcess",
    "NamedApprover",
    "NamedHooks",
    "RecordedChildren",
    "TreeBudget",
    "child_feeds",
    "split_decisions",
]


class ChildOutcome(Protocol):
    @property
    def output(self) -> Any: ...
    @property
    def run_id(self) -> str: ...
    @property
    def state(self) -> ExecutionContext: ...


class ChildAgent(Protocol):
    """What the parent's builder gives for a child: `ruizn.Agent`'s run and resume."""

    def start(
        self, goal: str, *, run_id: str | None = None, parent: Parent | None = None
    ) -> contextlib.AbstractAsyncContextManager[Any]: ...

    async def resume_async(self, run: str, **options: Any) -> Any: ...

    def store(self) -> RunStore: ...


# (the child's settings, who approves its calls, the tree's budget, who watches its events,
# (its run id, its agent's name, the `agent` call that starts it))
ChildBuilder = Callable[
    [
        RunSettings,
        Approver | None,
        SharedBudget | None,
        Callable[[Event], None],
        tuple[str, str, str],
    ],
    ChildAgent,
]


class ChildFailed(RuntimeError):
    """A launcher could not run the child (a fleet's refused or failed workflow); the model
    hears the message."""


@frozen(kw_only=True)
class ChildLaunch:
    """One child to run (or, `resume`, to go on): what `ChildRuns` decided of it."""

    call: ToolCall  # the parent's `agent` call
    agent: str  # its definition's name
    settings: RunSettings  # `subagents.child_settings`
    run_id: str
    parent: Parent  # what its run_started names
    prompt: str
    resume: bool  # started before (the parent resumed): it goes on in its own log
    decided: Mapping[str, Any]  # a person's decisions for the calls it waits on
    spent: float  # what the parent's log counts so far (the tree's budget starts there)
    limit: float | None  # the parent's max_cost (the tree's, when the parent is the top)


class ChildLauncher(Protocol):
    """Runs a child to its end (or its stop) and gives its outcome (`.state`, `.run_id`,
    `.output`); raises `ChildFailed` when it cannot. `tree`: the in-process budget the
    parent's children share as they run here."""

    async def __call__(self, launch: ChildLaunch, tree: TreeBudget) -> ChildOutcome: ...


@runtime_checkable
class ChildSubscriber(Protocol):
    """A subscriber that follows a run's subagents too (the live OTLP export): a child's
    run is given the subscriber this returns."""

    def for_child(self) -> Callable[[Event], None]: ...


def child_feeds(subscribers: Sequence[object]) -> list[Callable[[Event], None]]:
    """What a child run is given of its parent's subscribers: those that follow children."""
    return [s.for_child() for s in subscribers if isinstance(s, ChildSubscriber)]


@runtime_checkable
class RecordedChildren(Protocol):
    """A model that replays a recording (`ruizn.Cassette`): a child it re-drives is driven
    by the child's own recording, with its hooks (and its answers at the prompt, or None:
    the parent's approver asks), never by its parent's."""

    def recorded_child(
        self, call_id: str, agent: str
    ) -> tuple[Any, Approver | None, HookExecutor]: ...


# Between an agent's name and its call's tool in a prompt ("reviewer > edit_file", angled).
SEP = " \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} "


class NamedApprover:
    """The parent's approver for a child's calls: the call shown under the agent's name
    (`reviewer > edit_file`, with the angle quote `SEP`), one question at a time across the tree."""

    def __init__(self, inner: Approver, agent: str, lock: anyio.Lock) -> None:
        self._inner = inner
        self._agent = agent
        self._lock = lock

    async def __call__(self, call: ToolCall, tool: BaseTool | None) -> Answer | None:
        async with self._lock:
            return await self._inner(evolve(call, name=f"{self._agent}{SEP}{call.name}"), tool)


class NamedHooks:
    """The parent's hook runner for a child's hooks: each input says which agent it is
    (`agent_id`, its run id, and `agent_type`, its name), as Claude Code's do."""

    def __init__(self, inner: HookExecutor, agent_id: str, agent_type: str) -> None:
        self._inner = inner
        self._fields = {"agent_id": agent_id, "agent_type": agent_type}

    async def run(self, spec: HookSpec, payload: JsonObject) -> HookRun:
        return await self._inner.run(spec, {**payload, **self._fields})


class TreeBudget:
    """The parent's `max_cost` shared by its children as they run side by side: spent once
    what the parent's log counts (its calls, its finished children) and what its running
    children have spent so far reach it. `outer`: the parent's own shared budget."""

    def __init__(
        self,
        limit: float | None,
        counted: Callable[[], float],
        outer: SharedBudget | None,
    ) -> None:
        self._limit = limit
        self._counted = counted
        self._outer = outer
        self._running: dict[str, float] = {}

    def watch(self, run_id: str) -> Callable[[Event], None]:
        self._running[run_id] = 0.0

        def seen(event: Event) -> None:
            if isinstance(event, LlmResponse) and event.cost is not None:
                self._running[run_id] = self._running.get(run_id, 0.0) + event.cost

        return seen

    def done(self, run_id: str) -> None:
        self._running.pop(run_id, None)

    def spent(self) -> tuple[str, float, float] | None:
        if self._outer is not None:
            outer = self._outer.spent()
            if outer is not None:
                return outer
        if self._limit is None:
            return None
        total = self._counted() + sum(self._running.values())
        return ("the parent's max_cost", self._limit, total) if total >= self._limit else None


class ChildRuns:
    """Runs the `agent` calls of one parent run (at most `max_agents` at once)."""

    def __init__(
        self,
        build: ChildBuilder,
        *,
        approver: Approver | None,
        budget: SharedBudget | None,
        settings: RunSettings,
        asking: anyio.Lock | None = None,
        decisions: Mapping[str, Mapping[str, Any]] | None = None,
        launcher: ChildLauncher | None = None,
    ) -> None:
        """`decisions`: by the `agent` call whose child awaits them, the person's decisions
        given with the parent's resume (`Resume` fields: approve, deny, reason, always).
        `launcher`: who runs the children (default: `InProcess`, here)."""
        self._decisions = decisions or {}
        self._tree: TreeBudget | None = None
        self._build = build
        self._outer = budget
        self._limiter = anyio.CapacityLimiter(settings.max_agents)
        asking = asking if asking is not None else anyio.Lock()
        self._launcher = launcher or InProcess(build, approver, asking)

    async def __call__(self, call: ToolCall, host: ChildHost) -> ToolResult:
        state = host.state
        name = str(call.input.get("subagent_type", ""))
        definition = next((d for d in state.settings.subagents if d.name == name), None)
        if definition is None:
            known = ", ".join(d.name for d in state.settings.subagents)
            return ToolResult.error(
                ErrorType.INVALID_INPUT, f"no agent named {name!r}; the agents are: {known}"
            )
        record = next((c for c in state.children if c.id == call.id), None)
        if record is not None and record.status not in (None, Status.AWAITING_APPROVAL):
            # It ended before the crash, and only its answer was lost: read, not run again.
            return await self._answer_of(definition, record, state)
        if remaining_budget(state) == 0.0:
            return ToolResult.error(
                ErrorType.RUNTIME_ERROR, "the run's budget is spent: no agent was started"
            )
        if self._tree is None:  # one for all of this run's children, side by side
            limit = state.settings.max_cost
            self._tree = TreeBudget(limit, lambda: host.state.cost, self._outer)
        async with self._limiter:
            launch = await self._prepared(call, definition, record, host)
            run_id = launch.run_id
            try:
                result = await self._launcher(launch, self._tree)
            except (
                ConfigError,
                ProviderConfigError,
                ResumeRefused,
                RunLocked,
                UntrustedRun,
                ChildFailed,
            ) as exc:
                # The child could not be built or go on: the model hears why (a definition's
                # model the price list lacks, a child's log another process holds...).
                return ToolResult.error(
                    ErrorType.RUNTIME_ERROR, f"agent {definition.name} (run {run_id}): {exc}"
                )
            child_state: ExecutionContext = result.state
            host.child_finished(call.id, run_id, child_state)
            await host.child_hooks("SubagentStop", call, definition.name, run_id)
        if child_state.status is Status.AWAITING_APPROVAL:
            raise ChildAwaits(run_id)
        return _result(definition, result.run_id, child_state, result.output)

    async def _prepared(
        self, call: ToolCall, definition: Subagent, record: ChildRun | None, host: ChildHost
    ) -> ChildLaunch:
        """The child to run: a new one (its start logged, its SubagentStart hooks run), or,
        `record`, the one this call started before a stop."""
        state = host.state  # siblings may have finished while this call waited
        if record is None:
            run_id = new_run_id()
            what = _text(call, "description")
            seq = host.child_started(call.id, run_id, definition.name, what)
            await host.child_hooks("SubagentStart", call, definition.name, run_id)
        else:  # resumed after a stop: the child it started goes on
            run_id, seq = record.run_id, state.last_seq
        parent = Parent(
            run_id=state.run_id,
            seq=seq,
            kind="agent",
            agent=definition.name,
            call=call.id,
            root=state.agent_root,  # None: this run is the top of the tree
        )
        return ChildLaunch(
            call=call,
            agent=definition.name,
            settings=child_settings(state.settings, definition, remaining_budget(state)),
            run_id=run_id,
            parent=parent,
            prompt=_text(call, "prompt"),
            resume=record is not None,
            decided=self._decisions.get(call.id, {}) if record is not None else {},
            spent=state.cost,
            limit=state.settings.max_cost,
        )

    async def _answer_of(
        self, definition: Subagent, record: ChildRun, state: ExecutionContext
    ) -> ToolResult:
        run_id = record.run_id
        settings = child_settings(state.settings, definition, None)
        store = self._build(
            settings, None, None, lambda _e: None, (run_id, definition.name, record.id)
        ).store()
        child_state = store.load(store.find(run_id)).state

        return _result(definition, run_id, child_state, final_text(child_state))


class InProcess:
    """The default launcher: the child built by the parent's builder (`ruizn.Agent._child`)
    and driven here, its calls asked through the parent's approver under the agent's name."""

    def __init__(self, build: ChildBuilder, approver: Approver | None, asking: anyio.Lock) -> None:
        self._build = build
        self._approver = approver
        self._asking = asking

    async def __call__(self, launch: ChildLaunch, tree: TreeBudget) -> ChildOutcome:
        run_id = launch.run_id
        approver = (
            None
            if self._approver is None
            else NamedApprover(self._approver, launch.agent, self._asking)
        )
        watch = tree.watch(run_id)
        child = self._build(
            launch.settings, approver, tree, watch, (run_id, launch.agent, launch.call.id)
        )
        try:
            result: ChildOutcome = await _drive(
                child,
                run_id,
                resume=launch.resume,
                prompt=launch.prompt,
                parent=launch.parent,
                decided=launch.decided,
            )
            return result
        finally:
            tree.done(run_id)


async def _drive(
    child: ChildAgent,
    run_id: str,
    *,
    resume: bool,
    prompt: str,
    parent: Parent,
    decided: Mapping[str, Any],
) -> Any:
    if resume:
        with contextlib.suppress(RunNotFound):
            # A child killed mid-run goes on in its own log (it answers its own interrupted
            # calls); one killed before its first line starts below, under the same id. One
            # stopped for a decision goes on with the person's (`resume PARENT --approve`).
            try:
                return await child.resume_async(run_id, **decided)
            except NothingToResume as done:  # someone resumed the child itself to its end
                return Session.of(done.state, run_id, None)
    async with child.start(prompt, run_id=run_id, parent=parent) as session:
        return await session.drive()


def _text(call: ToolCall, key: str) -> str:
    value = call.input.get(key, "")
    return value if isinstance(value, str) else ""


def _result(definition: Subagent, run_id: str, state: ExecutionContext, output: Any) -> ToolResult:
    text = output if isinstance(output, str) else ("" if output is None else str(output))
    if state.status is Status.SUCCESS:
        return ToolResult.ok(text or f"(agent {definition.name} answered with no text)")
    why = f": {state.error}" if state.error else ""
    head = (
        f"agent {definition.name} (run {run_id}) stopped with {state.status.value}"
        f" after {state.step} steps{why}"
    )
    body = f"{head}\nits last answer:\n{text}" if text else head
    return ToolResult.error(ErrorType.RUNTIME_ERROR, body)


def split_decisions(
    state: ExecutionContext, approve: Sequence[str], deny: Sequence[str]
) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, dict[str, tuple[str, ...]]]]:
    """A resume's `--approve/--deny` ids: the run's own, and by `agent` call, those of the
    child that awaits them ("all" goes to each that waits)."""
    every = "all"
    children = state.children_awaiting
    theirs = {call.id for child in children for call in child.awaiting}
    mine_too = bool(state.awaiting_approval) or not children

    def own(ids: Sequence[str]) -> tuple[str, ...]:
        return tuple(i for i in ids if i not in theirs and (i != every or mine_too))

    forward: dict[str, dict[str, tuple[str, ...]]] = {}
    for child in children:
        ids = {call.id for call in child.awaiting} | {every}
        picked = {
            "approve": tuple(i for i in approve if i in ids),
            "deny": tuple(i for i in deny if i in ids),
        }
        if picked["approve"] or picked["deny"]:
            forward[child.id] = picked
    return own(approve), own(deny), forward


class AgentTool(BaseTool):
    """The tool the model calls to hand a side task to a subagent. Its input uses Claude
    Code's Task tool's field names, so hooks written for that tool read it the same."""

    name = AGENT_TOOL
    # Both set per run (in __init__): they list the run's agents, as @ruizn.tool's do theirs.
    description = ""
    input_schema: ClassVar[JsonObject] = {}
    # Its call may run again after a crash: it resumes the child it started, which never
    # runs one of its own calls twice (so a resume re-runs it instead of answering it
    # "interrupted"). Not read-only: its child may change things.
    resumes = True

    def __init__(self, definitions: Sequence[Subagent], runs: ChildRuns | None) -> None:
        """`runs` None: a tool only to be listed (`ruizn tools`), whose calls run nothing."""
        super().__init__()
        self.runs = runs
        listed = "\n".join(f"- {d.name}: {' '.join(d.description.split())}" for d in definitions)
        self.description = (  # type: ignore[misc]
            "Hand a side task to an agent that works in a fresh context with its own tools"
            " and returns only its final answer (give it everything it needs in `prompt`;"
            " it cannot see this conversation). Several calls in one turn run at once."
            f" The agents:\n{listed}"
        )
        self.input_schema = {  # type: ignore[misc]
            "type": "object",
            "properties": {
                "subagent_type": {
                    "type": "string",
                    "enum": [d.name for d in definitions],
                    "description": "Which agent to start.",
                },
                "description": {
                    "type": "string",
                    "description": "A short (3-5 word) description of the task.",
                },
                "prompt": {"type": "string", "description": "The task, in full."},
            },
            "required": ["subagent_type", "description", "prompt"],
            "additionalProperties": False,
        }

    async def invoke(self, input: JsonObject) -> ToolResult | str:
        # The run's tool calls call `runs` with the call and themselves (ToolCalls._invoke); a
        # call that reaches here came another way (a test harness) and has no parent to run under.
        return ToolResult.error(ErrorType.RUNTIME_ERROR, "the agent tool runs only inside a run")
