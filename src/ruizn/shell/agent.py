"""`ruizn.Agent`: the one place where a run is built.

    agent = ruizn.Agent(model="claude-sonnet-5-5", tools=[add], workspace=".")
    result = agent.run("What is 2 + 3?")
    result = agent.resume(result.run_id, limits=ruizn.Limits(max_steps=40))

Every run is built here, whoever asks for it (`ruizn run` and `ruizn resume`, a fleet worker,
a library call): its `RunSettings` become a provider, a tool registry (built-ins, `--tool`
specs, plug-ins, the caller's tools, MCP servers), a redactor, the store's writer and an
`AgentRunner` (shell/wiring.py: read `Wiring.open` from top to bottom to see how). What a
resume or fork reads of the run's log is shell/resume.py; whom it trusts is decided in the
core (resuming.trusted_plan); structured output's schema is shell/structured.py. The CLI and
the fleet choose the options, add what only they have (a printer, a terminal to ask, a
database store) and map the typed exceptions raised here to exit codes; nothing here prints
or exits the process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from attrs import asdict, evolve

from ruizn.agentdefs import Subagent, with_general
from ruizn.effects.mcp.config import MCPServer
from ruizn.effects.models.function import ReplyFunction
from ruizn.effects.models.pricing import Pricer, SharedBudget, default_pricer
from ruizn.effects.models.provider import Provider
from ruizn.effects.person.approval import ApproveFunction, Approver, CallbackApprover
from ruizn.effects.runlog.reader import iter_events
from ruizn.effects.runlog.sink import EventSink, MemorySink
from ruizn.effects.runlog.store import FileStore, RunStore, new_run_id
from ruizn.effects.runlog.trust import NOT_STARTED_HERE, TrustStore
from ruizn.effects.tools.base import BaseTool
from ruizn.effects.tools.loader import Toolbox
from ruizn.effects.tools.output import CommandOutput
from ruizn.effects.userconfig.dirs import state_dir
from ruizn.events import Event, Parent, RunStarted
from ruizn.limits import Limits
from ruizn.resuming import (
    UntrustedRun,
    confined_notice,
)
from ruizn.settings import ConfigError, RunSettings, settings_from
from ruizn.shell.children import (
    ChildLauncher,
    NamedHooks,
    RecordedChildren,
    child_feeds,
    split_decisions,
)
from ruizn.shell.compacting import compact_run
from ruizn.shell.outcome import NothingToResume, Resume, RunResult, Session
from ruizn.shell.resume import (
    Sessions,
    decisions_of,
    fleet_refusal,
    fork_run,
    forwarded,
    going_on,
    plan_of,
    torn_bytes,
    trust_facts,
    trusted,
)
from ruizn.shell.rewind import RewindPlan, plan_rewind, run_files
from ruizn.shell.rewind import rewind as do_rewind
from ruizn.shell.runner import Subscriber
from ruizn.shell.structured import check_output_schema, output_schema_of
from ruizn.shell.toolkit import ToolLike
from ruizn.shell.wiring import Wiring
from ruizn.terminal import Notice

if TYPE_CHECKING:
    from ruizn.effects.hooks.command import (
        HookExecutor,  # imported at run time only with servers (see mcp_toolset)
    )


class Agent:
    def __init__(
        self,
        model: str | ReplyFunction | Provider | None = None,
        *,
        tools: Iterable[ToolLike] = (),
        builtins: bool = True,
        mcp: Iterable[MCPServer] = (),
        mcp_headers: Sequence[str] = (),
        approve: ApproveFunction | None = None,
        approver: Approver | None = None,
        settings: RunSettings | None = None,
        store: RunStore | None = None,
        log: bool = True,
        log_dir: str | Path | None = None,
        subscribers: Iterable[Subscriber] = (),
        on_notice: Notice | None = None,
        environ: Mapping[str, str] | None = None,
        trust_store: TrustStore | None = None,
        pricer: Pricer | None = None,
        budget: SharedBudget | None = None,
        output_type: Any = None,
        hook_runner: HookExecutor | None = None,
        subagents: Iterable[Subagent] = (),
        on_output: CommandOutput | None = None,
        child_launcher: ChildLauncher | None = None,
        **options: Any,
    ) -> None:
        """`options` are `RunSettings`' fields (system, workspace, max_steps, max_tokens,
        max_retries, retry_base_delay, read_timeout, tool_timeout, tool_concurrency,
        allow_secret_files, approval, tool_specs, plugins, max_cost, max_context,
        context_window, project_instructions, output_schema, output_retries); `settings`
        gives them all at once.
        `output_type` (a pydantic model, a TypedDict, or a JSON Schema dict) asks for a
        validated structured answer: its JSON Schema becomes `output_schema`, and
        `result.output` is the value as that type (see docs/structured-output.md).
        `project_instructions=False` sends no AGENTS.md/CLAUDE.md (see
        docs/project-instructions.md).
        `model` is a model id, `"test"`, a function (request -> reply, see FunctionModel) or a
        Provider; None keeps the settings' model (a resume: the run's own).

        `tools` are `@ruizn.tool` functions, plain functions, `BaseTool` classes or instances;
        `builtins=False` leaves out the built-in file tools. `mcp` are MCP servers
        (`ruizn.MCPServer.stdio(...)` / `.http(...)`), started around each run and stopped
        after it, their tools offered as `mcp__NAME__TOOL`; `mcp_headers` (`NAME:KEY=VALUE`)
        give header values again when a run's recorded servers are reconnected.

        `approve` decides the tool calls that need approval in `approval="ask"` mode: a
        function, sync or async, of the `ToolCall`, returning True/False, `(approved, reason)`
        or an `Answer`; `approver` is the lower-level `Approver` (the CLI's terminal prompt).
        Without either, such a call stops the run with status awaiting_approval.

        `store` is where runs live (default: `log_dir`, else WORKSPACE/.ruizn/runs);
        `log=False` keeps a run's events in memory only. `subscribers` see every event after
        it is logged (the CLI's printer; one with a `replayed(state)` method is first told
        the state a resumed run was replayed to); `on_notice` gets one-line notices (a plug-in left
        out, an MCP server restarted). `trust_store` is the record of the runs this user's
        ruizn started (default: under the user's state directory; see `resume`).

        `pricer` prices each model call, its cost logged with it, and knows the models'
        context windows (default: the installed genai-prices); `budget` is one the runs share
        with others (a fleet's batch), asked before each model call.

        `subagents` (`ruizn.Subagent`s) give the model the `agent` tool, which runs one as a
        child run, with a built-in `general` one (see docs/subagents.md).

        `on_output` is shown a `bash` command's output while it runs (the CLI's live lines at
        a terminal); display only, never in the log. `child_launcher` runs the children
        (default: here; a fleet worker's queues each as a run of its own)."""
        base = settings if settings is not None else RunSettings()
        defined = tuple(subagents)
        if defined:
            options["subagents"] = with_general(defined)
        if isinstance(model, str):
            options["model"] = model
        elif model is not None:
            # A provider may name the model it stands for (a Cassette: the recorded one).
            named = getattr(model, "model_id", None)
            options.setdefault("model", named if isinstance(named, str) else "function")
        self._typed: Callable[[Any], Any] | None = None
        if output_type is not None:
            schema, self._typed = output_schema_of(output_type)
            options["output_schema"] = schema
        servers = tuple(mcp)
        if servers:
            options["mcp_servers"] = tuple(server.describe() for server in servers)
        self.settings = settings_from(**{**asdict(base, recurse=False), **options})
        check_output_schema(self.settings.output_schema)
        if approve is not None and approver is not None:
            raise ConfigError("give approve or approver, not both")
        self._store = store
        self._log = log
        self._log_dir = log_dir
        self._subscribers = tuple(subscribers)
        self._notice: Notice = on_notice or (lambda _text: None)
        self._trust_warned = False
        environ = os.environ if environ is None else environ
        self._trust = trust_store if trust_store is not None else TrustStore.from_env(environ)
        # How a run is built, from what this agent was given (shell/wiring.py).
        self._wiring = Wiring(
            model=model,
            tools=tuple(tools),
            builtins=builtins,
            servers=servers,
            mcp_headers=tuple(mcp_headers),
            approver=CallbackApprover(approve) if approve is not None else approver,
            environ=environ,
            notice=self._notice,
            pricer=pricer if pricer is not None else default_pricer(),
            budget=budget,
            hook_runner=hook_runner,
            child=self._child,
            on_output=on_output,
            launcher=child_launcher,
        )

    # -- the public face ----------------------------------------------------------------------

    def run(self, goal: str) -> RunResult:
        """Run to the end (blocking). Inside an event loop, use `await run_async(goal)`."""
        return anyio.run(self.run_async, goal)

    async def run_async(self, goal: str) -> RunResult:
        async with self.start(goal) as session:
            return await session.drive()

    async def stream(self, goal: str) -> AsyncIterator[Event]:
        """The run's events as they happen (the objects the log holds), in order."""
        async for event in self._streamed(lambda: self.start(goal)):
            yield event

    def resume(self, run: str | Path, *, limits: Limits | None = None, **options: Any) -> RunResult:
        """Continue a stopped run in the same log (blocking); `options` are `Resume`'s
        other fields. See `resume_async`."""
        return anyio.run(lambda: self.resume_async(run, limits=limits, **options))

    async def resume_async(
        self, run: str | Path, *, limits: Limits | None = None, **options: Any
    ) -> RunResult:
        """Continue `run` (an id, `last`, a run folder or an events.jsonl) where it stopped,
        with the same tools and MCP servers, appending to its log. `limits` are the new ones
        (`ruizn.Limits`; None keeps the run's); `options` are `Resume`'s other fields
        (decisions for the calls it waits on, `trust`...).

        Raises `UntrustedRun` for a run ruizn did not start on this machine (or whose log
        changed since) unless `trust=True`, `NothingToResume` for a run that succeeded,
        `ResumeRefused` for limits or decisions that cannot apply, `RunLocked` while another
        process writes it. Nothing is written, imported or started before those checks."""
        async with self.start_resume(run, Resume(limits=limits, **options)) as session:
            return await session.drive()

    def continue_run(
        self, run: str | Path, message: str, *, limits: Limits | None = None, **options: Any
    ) -> RunResult:
        """Add `message` to a run that ended and go on in the same log (blocking); see
        `continue_async`."""
        return anyio.run(lambda: self.continue_async(run, message, limits=limits, **options))

    async def continue_async(
        self, run: str | Path, message: str, *, limits: Limits | None = None, **options: Any
    ) -> RunResult:
        """`ruizn continue`: a resume that adds a person's message. The model sees the whole
        conversation, then `message`. `options` are `Resume`'s other fields; `limits.max_steps`
        is the budget for this message (the run's new total is its steps plus that many).

        Works on a run that ended in success, max_steps or error (an answer cut at max_tokens
        too). A run that stopped inside a model call or with tool calls unanswered (awaiting
        approval) raises `ResumeRefused`: `resume` it first. Trust, locking and errors are
        `resume_async`'s."""
        request = Resume(limits=limits, **options, message=message)
        async with self.start_resume(run, request) as session:
            return await session.drive()

    def fork(
        self, run: str | Path, *, at: int, trust: bool = False, into: str | Path | None = None
    ) -> RunResult:
        """`ruizn fork RUN --at SEQ`: a new run whose log holds `run`'s events up to `at`
        under a run_started of its own (a new id, the parent's id and `at` recorded), so the
        new log alone rebuilds the parent's state at `at`. The parent is never touched.
        Returns the fork as it stands (not driven): go on with `resume` or `continue_run`.
        `into`: a new folder (empty or not there yet) that gets the files as they were at
        `at` (from the run's checkpoints) and is the fork's workspace from then on.

        `at` must be a point between steps (`lineage.at_rest`); inside a model call or a tool
        turn raises `ForkRefused` naming the nearest points. The fork acts on nothing, but it
        is recorded as this user's run only when the parent is (or with `trust=True`, which
        accepts the parent's grant as `resume --trust` does): so a fork of a planted log is
        as untrusted as the log. `RunLocked` while another process writes the parent.
        """
        if not self._log:
            raise ConfigError("an agent with log=False keeps no runs to fork")
        return fork_run(
            self.store(),
            self._trust,
            self.settings,
            self.state_folder(),
            run,
            at=at,
            trust=trust,
            into=into,
        )

    def rewind(
        self,
        run: str | Path,
        *,
        to: int | None = None,
        step: int | None = None,
        undo: bool = False,
        force: bool = False,
    ) -> RewindPlan:
        """Put the workspace's files back as they were at `run`'s checkpoint at seq `to` (the
        last at or before it) or before step `step`'s tools ran; `undo=True` puts back the
        tree the last rewind replaced. The current tree is checkpointed first. Files changed
        since the run's last checkpoint by anything but the run raise `RewindRefused` naming
        them, unless `force`. Returns what was done (its `changes`). Files checkpoints leave
        out (ignored, secret, too big) are never touched."""
        if (to is None) == (step is None) and not undo:
            raise ConfigError("rewind needs one of to=SEQ or step=N (or undo=True)")
        files = run_files(self.store(), str(run), self.state_folder())
        plan = plan_rewind(files, to=to, step=step, undo=undo)
        do_rewind(plan, force=force)
        return plan

    def store(self) -> RunStore:
        """Where this agent's runs live."""
        if self._store is None:
            self._store = FileStore.at(Path(self.settings.workspace), self._log_dir)
        return self._store

    def toolbox(self, settings: RunSettings | None = None, root: Path | None = None) -> Toolbox:
        """The tools a new run gets before the caller's and the MCP servers': the built-ins,
        the `tool_specs` and the plug-ins, each with where it came from (`ruizn tools`).
        Raises ToolLoadError for a spec that cannot load; a plug-in that cannot is a notice."""
        settings = self.settings if settings is None else settings
        return self._wiring.toolbox(settings, self.store().root if root is None else root)

    async def mcp_tools(self) -> tuple[BaseTool, ...]:
        """The tools this agent's MCP servers offer now, as a run would get them (`ruizn
        tools --mcp`): the servers are started, listed and stopped. Each tool's `source()`
        says where it comes from and whether it only reads. Raises McpStartupError (one line,
        naming the server) when a server cannot start or list its tools."""
        return await self._wiring.mcp_tools(self.settings.workspace)

    def state_folder(self) -> Path:
        """The user's ruizn state folder (checkpoints, the trust record), never a workspace."""
        return state_dir(self._wiring.environ)

    def compact(self, run: str | Path, *, instructions: str | None = None) -> RunResult:
        """Compact a stopped run's history (blocking); see `compact_async`."""
        return anyio.run(lambda: self.compact_async(run, instructions=instructions))

    async def compact_async(
        self, run: str | Path, *, instructions: str | None = None, trust: bool = False
    ) -> RunResult:
        """`ruizn compact RUN`: summarise a stopped run's history now, before `resume` or
        `continue` (docs/compaction.md); `instructions` say what the summary must keep.
        The compaction is events in the run's log (retried like any model call); the run
        keeps its status. Raises `ResumeRefused` for a run that has not stopped, or waits
        on tool calls; `CompactionFailed` when the compaction call gives up; trust and
        locking as `resume_async`."""
        if not self._log:
            raise ConfigError("an agent with log=False keeps no runs to compact")
        opening = partial(self._wiring.open, subscribers=self._subscribers)
        return await compact_run(
            self.store(), self._trust, opening, run, instructions=instructions, trust=trust
        )

    def _child(
        self,
        settings: RunSettings,
        approver: Approver | None,
        budget: SharedBudget | None,
        watch: Subscriber,
        agent: tuple[str, str, str],
    ) -> Agent:
        """A child run's agent: this one's tools, store and trust, the parent's hooks told
        which agent calls (shell/children.py). In a re-drive, the child's own recording is
        its model, approver and hooks."""
        run_id, name, call_id = agent
        model = self._wiring.model
        model = None if isinstance(model, str) else model
        hooks = self._wiring.hooks_for(settings)
        if isinstance(model, RecordedChildren):
            model, answers, recorded = model.recorded_child(call_id, name)
            hooks = recorded if hooks is not None else None
            approver = answers if answers is not None and approver is not None else approver
        return self._sibling(
            model,
            settings=settings,
            approver=approver,
            # (the live export follows the child into the parent's trace)
            subscribers=(watch, *child_feeds(self._subscribers)),
            budget=budget,
            hook_runner=None if hooks is None else NamedHooks(hooks, run_id, name),
        )

    def _sibling(
        self,
        model: str | ReplyFunction | Provider | None,
        *,
        settings: RunSettings,
        approver: Approver | None,
        subscribers: tuple[Subscriber, ...],
        budget: SharedBudget | None,
        hook_runner: HookExecutor | None,
    ) -> Agent:
        """An agent for `settings` with this one's tools, servers, store, notices and trust."""
        wiring = self._wiring
        return Agent(
            model,
            tools=wiring.tools,
            builtins=wiring.builtins,
            mcp=wiring.servers,
            mcp_headers=wiring.mcp_headers,
            approver=approver,
            settings=settings,
            store=self.store() if self._log else None,
            log=self._log,
            subscribers=subscribers,
            on_notice=self._notice,
            environ=wiring.environ,
            trust_store=self._trust,
            pricer=wiring.pricer,
            budget=budget,
            hook_runner=hook_runner,
        )

    def notice(self, text: str) -> None:
        """One line for the person, through this agent's `on_notice` (the CLI: stderr)."""
        self._notice(text)

    def trust_problem(self, run: str | Path) -> str | None:
        """Why ruizn may not act on `run`'s log as recorded, or None: this user's ruizn
        started it here (or a person accepted it) and the log is as ruizn last left it."""
        ref = self.store().find(str(run))
        first = next(iter_events(ref.path), None)
        if not isinstance(first, RunStarted):
            return NOT_STARTED_HERE
        return self._trust.problem(first, ref.path)

    def derive(
        self,
        model: str | ReplyFunction | Provider | None,
        *,
        settings: RunSettings,
        approver: Approver | None = None,
        hook_runner: HookExecutor | None = None,
    ) -> Agent:
        """This agent with another model, settings and approver, and everything else its own
        (store, tools, subscribers, notices, environment, trust record): how a rerun builds
        the run it drives."""
        return self._sibling(
            model,
            settings=settings,
            approver=approver,
            subscribers=self._subscribers,
            budget=None,
            hook_runner=hook_runner,
        )

    @contextlib.asynccontextmanager
    async def start(
        self, goal: str, *, run_id: str | None = None, parent: Parent | None = None
    ) -> AsyncIterator[Session]:
        """A new run, built and begun (its first line written), held open around the drive:
        its MCP servers and its provider live as long as the `async with`. `parent` names the
        run it comes from (a rerun's recording)."""
        if not isinstance(goal, str) or not goal.strip():
            raise ConfigError("the goal must not be empty")
        settings = self.settings
        if not _is_folder(settings.workspace):
            raise ConfigError(f"the workspace {settings.workspace} is not a folder")
        rerun = parent is not None and parent.kind == "rerun"
        settings = self._wiring.new_run(settings, rerun=rerun)
        store = self.store() if self._log else None
        root = store.root if store is not None else Path(settings.workspace) / ".ruizn" / "runs"
        run_id = run_id or new_run_id()
        sink: EventSink = store.new_writer(run_id) if store is not None else MemorySink()
        log_path = root / run_id / "events.jsonl" if store is not None else None
        try:
            opening = self._wiring.open(
                settings, root, run_id, sink, None, subscribers=self._subscribers
            )
            async with opening as (runner, opened):
                settings = self._wiring.windowed(opened)
                first = runner.begin(run_id=run_id, goal=goal, settings=settings, parent=parent)
                trust = None if log_path is None else self._opened(first, log_path)
                yield Session(runner, run_id, log_path, trust=trust, typed=self._typed)
        finally:
            sink.close()  # the runner closed it if it ran; a run that never began has none

    @contextlib.asynccontextmanager
    async def start_resume(
        self, run: str | Path, request: Resume | None = None
    ) -> AsyncIterator[Session]:
        """A stopped run, replayed and resumed (its run_resumed written), held open around
        the drive. Everything is checked before a line is written."""
        request = Resume() if request is None else request
        if not self._log:
            raise ConfigError("an agent with log=False keeps no runs to resume")
        store = self.store()
        ref = store.find(str(run))
        fleet_refusal(ref, request)
        # The lock first: nobody may append while we read the log and decide.
        writer = store.append_writer(ref)
        try:
            sessions = Sessions()
            replayed = store.load(
                ref,
                on_event=sessions,
                torn=lambda tail: self._notice(
                    f"warning: {tail.describe(ref.path)}; cutting it before resuming"
                ),
            )
            state = replayed.state
            first = sessions.first
            assert isinstance(first, RunStarted)
            plan = plan_of(state, request)
            problem = None if request.vouched else self._trust.problem(first, ref.path)
            plan = trusted(plan, state, request, trust_facts(problem, self.settings, state))
            if plan.confine:
                self._notice(confined_notice(state.run_id))
            here = self.settings.workspace
            settings, change = await going_on(
                self._wiring, state, plan, request, here=here, notice=self._notice
            )
            root = ref.path.parent.parent
            split = split_decisions(state, request.approve, request.deny)
            opened = self._wiring.open(
                settings,
                root,
                ref.run_id,
                writer,
                state,
                subscribers=self._subscribers,
                forwarded=forwarded(split[2], request),
            )
            async with opened as (runner, _):
                decisions = decisions_of(state, plan, runner.needs_approval, request, split)
                if replayed.torn is not None:
                    # Only the unfinished last write is cut; every whole line stays.
                    store.cut(ref, replayed.torn.offset)
                # (a fleet's database vouches for its own runs)
                trust = None if request.vouched else self._opened(first, ref.path)
                for subscriber in self._subscribers:
                    # A transcript printer goes on from the replayed state (which call a
                    # result answers), so its lines are those `ruizn replay` prints.
                    told = getattr(subscriber, "replayed", None)
                    if callable(told):
                        told(state)
                runner.resume(
                    evolve(plan, lost=sessions.lost()),
                    torn_bytes=torn_bytes(replayed),
                    decisions=decisions,
                    message=request.message,
                    change=change,
                )
                yield Session(runner, ref.run_id, ref.path, trust=trust, typed=self._typed)
        finally:
            writer.close()

    def _opened(self, first: RunStarted, log: Path) -> tuple[TrustStore, RunStarted]:
        """This user's ruizn started (or goes on with) the run: it may resume it as recorded.
        One line when the trust record cannot be written (the run goes on)."""
        self._trust.opened(first, log)
        failure = getattr(self._trust, "failure", None)
        if failure is not None and not self._trust_warned:
            self._trust_warned = True
            self._notice(
                f"warning: {failure}; the run goes on, but is not recorded as this user's:"
                " resuming it will ask"
            )
        return (self._trust, first)

    async def _streamed(
        self, opening: Callable[[], contextlib.AbstractAsyncContextManager[Session]]
    ) -> AsyncIterator[Event]:
        send, receive = anyio.create_memory_object_stream[Event](max_buffer_size=1 << 16)
        self._subscribers = (*self._subscribers, send.send_nowait)
        try:
            async with opening() as session:

                async def drive() -> None:
                    try:
                        await session.drive()
                    finally:
                        send.close()

                async with anyio.create_task_group() as group:
                    group.start_soon(drive)
                    async with receive:
                        async for event in receive:
                            yield event
        finally:
            self._subscribers = self._subscribers[:-1]


def _is_folder(path: str) -> bool:
    return Path(path).is_dir()


def run(goal: str, **options: Any) -> RunResult:
    """`Agent(**options).run(goal)`, for one-off runs."""
    return Agent(**options).run(goal)


__all__: Sequence[str] = (
    "Agent",
    "NothingToResume",
    "Resume",
    "RunResult",
    "Session",
    "UntrustedRun",
    "run",
)
