"""`ruizn.Agent`: the one place where a run is built.

    agent = ruizn.Agent(model="claude-sonnet-5-5", tools=[add], workspace=".")
    result = agent.run("What is 2 + 3?")
    result = agent.resume(result.run_id, limits=ruizn.Limits(max_steps=40))

Every run is built here, whoever asks for it (`ruizn run` and `ruizn resume`, a fleet worker,
a library call): its `RunSettings` become a provider, a tool registry (built-ins, `--tool`
specs, plug-ins, the caller's tools, MCP servers), a redactor, the store's writer and an
`AgentRunner` (shell/wiring.py: read `Wiring._open` from top to bottom to see how). Whom a
resume trusts is decided in the core (resuming.trusted_plan); structured output's schema is
shell/structured.py. The CLI
and the fleet choose the options, add what only they have (a printer, a terminal to ask, a
database store) and map the typed exceptions raised here to exit codes; nothing here prints
or exits the process.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from attrs import asdict, evolve

from ruizn.agentdefs import Subagent, with_general
from ruizn.effects.mcp.config import MCPServer
from ruizn.effects.models.function import ReplyFunction
from ruizn.effects.models.pricing import Pricer, SharedBudget, default_pricer, unpriced
from ruizn.effects.models.provider import Provider
from ruizn.effects.person.approval import ApproveFunction, Approver, CallbackApprover
from ruizn.effects.runlog.reader import LOG_NAME, iter_events
from ruizn.effects.runlog.sink import EventSink, MemorySink
from ruizn.effects.runlog.store import RunStore, fleet_owner, new_run_id, settled
from ruizn.effects.runlog.trust import NOT_STARTED_HERE, TrustStore
from ruizn.effects.tools.output import CommandOutput
from ruizn.effects.userconfig.dirs import state_dir
from ruizn.events import Event, LlmToken, Parent, RunFinished, RunResumed, RunStarted
from ruizn.fork import fork_prefix
from ruizn.grant import grant_of
from ruizn.limits import Limits
from ruizn.reducers import reasked, rebuild, reduce
from ruizn.reducers import start as start_state
from ruizn.resuming import (
    ResumePlan,
    ResumeRefused,
    SettingChange,
    TrustAnswer,
    TrustFacts,
    UntrustedRun,
    cancelled_answers,
    confined_notice,
    fork_refusal,
    plan_continue,
    plan_resume,
    resume_decisions,
    resumed_settings,
    trusted_plan,
)
from ruizn.settings import ConfigError, RunSettings, settings_from
from ruizn.shell.children import NamedHooks, RecordedChildren, child_feeds, split_decisions
from ruizn.shell.compacting import compact_refusal, compact_stopped
from ruizn.shell.outcome import NothingToResume, Resume, RunResult, Session
from ruizn.shell.rewind import RewindPlan, files_into, plan_rewind, run_files
from ruizn.shell.rewind import rewind as do_rewind
from ruizn.shell.runner import Subscriber
from ruizn.shell.structured import check_output_schema, output_schema_of
from ruizn.shell.toolkit import ToolLike
from ruizn.shell.wiring import Wiring, _aclose, resolved
from ruizn.terminal import Notice
from ruizn.version import __version__

if TYPE_CHECKING:
    from ruizn.effects.hooks.command import (
        HookExecutor,  # imported at run time only with servers (see mcp_toolset)
    )


class Agent(Wiring):
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
        a terminal); display only, never in the log."""
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
        # Runs the settings' hook commands (default: as commands in the workspace); a rerun
        # gives one that answers from the recording instead.
        self._hook_runner = hook_runner
        self._typed: Callable[[Any], Any] | None = None
        if output_type is not None:
            schema, self._typed = output_schema_of(output_type)
            options["output_schema"] = schema
        servers = tuple(mcp)
        if servers:
            options["mcp_servers"] = tuple(server.describe() for server in servers)
        self.settings = settings_from(**{**asdict(base, recurse=False), **options})
        check_output_schema(self.settings.output_schema)
        self._model = model
        self._tools = tuple(tools)
        self._builtins = builtins
        self._servers = servers
        self._mcp_headers = tuple(mcp_headers)
        if approve is not None and approver is not None:
            raise ConfigError("give approve or approver, not both")
        self._approver = CallbackApprover(approve) if approve is not None else approver
        self._store = store
        self._log = log
        self._log_dir = log_dir
        self._subscribers = tuple(subscribers)
        self._notice: Notice = on_notice or (lambda _text: None)
        self._trust_warned = False
        self._environ: Mapping[str, str] = os.environ if environ is None else environ
        self._trust = trust_store if trust_store is not None else TrustStore.from_env(self._environ)
        self._pricer: Pricer = pricer if pricer is not None else default_pricer()
        self._budget = budget
        self._on_output = on_output

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
        store = self.store()
        ref, _ = settled(store, str(run))
        events = fork_prefix(iter_events(ref.path), at)
        first = events[0]
        assert isinstance(first, RunStarted)
        problem = self._trust.problem(first, ref.path)
        if problem is not None and trust:
            state = rebuild(events)
            refusal = fork_refusal(state, _trust_facts(problem, self.settings, state))
            if refusal is not None:
                raise ResumeRefused(refusal)
            problem = None
        vouched = problem is None
        if into is not None:
            first = evolve(
                first, settings=files_into(self.state_folder(), ref.path, at, Path(into))
            )
        run_id = new_run_id()
        head = evolve(
            first,
            run_id=run_id,
            ts=time.time(),
            ruizn_version=__version__,
            parent=Parent(run_id=first.run_id, seq=at),
        )
        sink = store.new_writer(run_id)
        try:
            state = start_state(head)  # checked before it is written, as a runner does
            sink(head)
            for event in events[1:]:
                state = reduce(state, event)
                sink(event)
            sink.sync()
        finally:
            sink.close()
        log_path = store.root / run_id / LOG_NAME
        if vouched:
            self._trust.closed(head, log_path)
        return Session.of(state, run_id, log_path)

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

    def state_folder(self) -> Path:
        """The user's ruizn state folder (checkpoints, the trust record), never a workspace."""
        return state_dir(self._environ)

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
        store = self.store()
        ref = store.find(str(run))
        writer = store.append_writer(ref)
        try:
            state = store.load(ref).state
            first = next(iter_events(ref.path))
            assert isinstance(first, RunStarted)
            refused = compact_refusal(state)
            if refused is not None:
                raise ResumeRefused(refused)
            problem = self._trust.problem(first, ref.path)
            if problem is not None and not trust:
                raise UntrustedRun(
                    state.run_id, problem, grant_of(state.settings, state), verb="compact"
                )
            root = ref.path.parent.parent
            try:
                async with self._open(state.settings, root, ref.run_id, writer, state) as (
                    runner,
                    _,
                ):
                    state = await compact_stopped(runner, instructions)
            finally:
                # What it wrote (a compaction, hooks, a failure) is this user's: a resume
                # goes on without asking.
                self._trust.closed(first, ref.path)
            return Session.of(state, ref.run_id, ref.path)
        finally:
            writer.close()

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
        model = None if isinstance(self._model, str) else self._model
        hooks = self._hooks_for(settings)
        if isinstance(model, RecordedChildren):
            model, answers, recorded = model.recorded_child(call_id, name)
            hooks = recorded if hooks is not None else None
            approver = answers if answers is not None and approver is not None else approver
        # (the live export follows the child into the parent's trace)
        feeds = child_feeds(self._subscribers)
        return Agent(
            model,
            tools=self._tools,
            builtins=self._builtins,
            mcp=self._servers,
            mcp_headers=self._mcp_headers,
            approver=approver,
            settings=settings,
            store=self.store() if self._log else None,
            log=self._log,
            subscribers=(watch, *feeds),
            on_notice=self._notice,
            environ=self._environ,
            trust_store=self._trust,
            pricer=self._pricer,
            budget=budget,
            hook_runner=None if hooks is None else NamedHooks(hooks, run_id, name),
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
        return Agent(
            model,
            tools=self._tools,
            builtins=self._builtins,
            mcp=self._servers,
            mcp_headers=self._mcp_headers,
            approver=approver,
            settings=settings,
            store=self.store() if self._log else None,
            log=self._log,
            subscribers=self._subscribers,
            on_notice=self._notice,
            environ=self._environ,
            trust_store=self._trust,
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
        workspace = resolved(settings.workspace)
        settings = evolve(settings, workspace=str(workspace))
        self._check_budget(settings.model, settings.max_cost)
        rerun = parent is not None and parent.kind == "rerun"
        if settings.project_instructions and not settings.instructions and not rerun:
            # (A rerun sends the recorded text, and reads none where none was recorded.)
            # Read once, recorded in run_started: replay, resume and rerun send this text.
            from ruizn.effects.project.instructions import read_root

            settings = evolve(settings, instructions=read_root(workspace))
        store = self.store() if self._log else None
        root = store.root if store is not None else workspace / ".ruizn" / "runs"
        run_id = run_id or new_run_id()
        sink: EventSink = store.new_writer(run_id) if store is not None else MemorySink()
        log_path = root / run_id / "events.jsonl" if store is not None else None
        try:
            async with self._open(settings, root, run_id, sink, None) as (runner, opened):
                settings = self._windowed(opened)
                first = runner.begin(run_id=run_id, goal=goal, settings=settings, parent=parent)
                trust = None
                if log_path is not None:
                    # This user's ruizn started the run: it may resume it as recorded.
                    self._trust.opened(first, log_path)
                    self._trust_failure()
                    trust = (self._trust, first)
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
        if not request.vouched:
            owner = fleet_owner(ref.path)
            if owner is not None:
                # One truth per fleet run: a second copy resumed here would run its calls
                # again and be overwritten by the database's on the fleet's next resume.
                raise ResumeRefused(
                    f"run {ref.run_id} belongs to the fleet database {owner}: resume it there,"
                    f" with `ruizn resume --db {owner} {ref.run_id}`"
                )
        # The lock first: nobody may append while we read the log and decide.
        writer = store.append_writer(ref)
        try:
            sessions = _Sessions()
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
            if request.message is not None:
                if request.approve or request.deny:
                    raise ResumeRefused("--approve/--deny go with resume, not with a message")
                answers = cancelled_answers(state) if request.cancelled else ()
                plan: ResumePlan | None = plan_continue(
                    state, request.message, request.limits, answers
                )
            else:
                if request.model is not None or request.effort is not None:
                    raise ResumeRefused("a new model or effort goes with a message")
                plan = plan_resume(state, request.limits)
            if plan is None:
                if request.approve or request.deny:  # a decision for a run that waits for none
                    raise ResumeRefused(
                        f"run {state.run_id} finished with {state.status.value}:"
                        " no call awaits approval"
                    )
                raise NothingToResume(state)
            problem = None if request.vouched else self._trust.problem(first, ref.path)
            answer = TrustAnswer(
                approval=request.approval,
                accepted=request.trust,
                keep_approvals=request.keep_approvals,
                keep_shell=request.keep_shell,
                verb="resume" if request.message is None else "continue",
            )
            facts = _trust_facts(problem, self.settings, state)
            plan = trusted_plan(plan, state, facts, answer)
            settings = resumed_settings(state, plan)
            if plan.confine:
                self._notice(confined_notice(state.run_id))
            change = await self._settings_change(request, settings)
            if change is not None:
                settings = evolve(
                    settings,
                    model=change.model or settings.model,
                    context_window=change.context_window
                    if change.model
                    else settings.context_window,
                    compaction=change.compaction if change.model else settings.compaction,
                    effort=change.effort or settings.effort,
                )
            elif isinstance(self._model, str) and self._model != settings.model:
                raise ConfigError(
                    f"run {state.run_id} uses model {settings.model}, not {self._model}"
                )
            self._check_budget(settings.model, plan.limits.max_cost)
            if not _is_folder(settings.workspace):
                raise ResumeRefused(f"the run's workspace {settings.workspace} no longer exists")
            here = str(resolved(self.settings.workspace))
            if str(resolved(settings.workspace)) != here:
                # A copy of a project resumes into the folder the run was started in: say so.
                self._notice(
                    f"run {state.run_id} works in its own workspace {settings.workspace},"
                    f" not {here}"
                )
            if request.read_timeout is not None:  # this session's stream timeout only
                settings = evolve(settings, read_timeout=request.read_timeout)
            root = ref.path.parent.parent
            approve, deny, forward = split_decisions(state, request.approve, request.deny)
            self._forwarded = {
                call: {
                    **ids,
                    "reason": request.reason if ids["deny"] else None,
                    "always": tuple(i for i in request.always if i in ids["approve"]),
                }
                for call, ids in forward.items()
            }
            async with self._open(settings, root, ref.run_id, writer, state) as (runner, _):
                decisions = resume_decisions(
                    reasked(state) if plan.reask else state,
                    runner.needs_approval,
                    approve=approve,
                    deny=deny,
                    # (the reason of a denial handed to a child is the child's)
                    reason=request.reason
                    if deny or not any(ids["deny"] for ids in forward.values())
                    else None,
                    always=request.always,
                )
                if replayed.torn is not None:
                    # Only the unfinished last write is cut; every whole line stays.
                    store.cut(ref, replayed.torn.offset)
                trust = None
                if request.vouched:
                    trust = None  # the store vouches for its runs (a fleet's database)
                else:
                    self._trust.opened(first, ref.path)
                    self._trust_failure()
                    trust = (self._trust, first)
                for subscriber in self._subscribers:
                    # A transcript printer goes on from the replayed state (which call a
                    # result answers), so its lines are those `ruizn replay` prints.
                    told = getattr(subscriber, "replayed", None)
                    if callable(told):
                        told(state)
                runner.resume(
                    evolve(plan, lost=sessions.lost()),
                    torn_bytes=_torn(replayed),
                    decisions=decisions,
                    message=request.message,
                    change=change,
                )
                yield Session(runner, ref.run_id, ref.path, trust=trust, typed=self._typed)
        finally:
            writer.close()

    async def _settings_change(
        self, request: Resume, settings: RunSettings
    ) -> SettingChange | None:
        """The settings a message changes (a session's `/model`, `/effort`), with what the
        Models API says of the new model (checked as a new run's is: a retired model is
        refused), its context window and compaction form; None when it changes none."""
        new_model = request.model if request.model not in (None, settings.model) else None
        if new_model is None and request.effort is None:
            return None
        if new_model is None:
            return SettingChange(effort=request.effort)
        asked = evolve(settings, model=new_model, context_window=None, compaction=None)
        if request.effort is not None:
            asked = evolve(asked, effort=request.effort)
        provider = self._provider(asked)
        try:
            found = await self._fitted(provider, asked)
        finally:
            await _aclose(provider)
        window = found.context_window or self._pricer.context_window(new_model)
        return SettingChange(
            model=new_model,
            effort=request.effort,
            context_window=window,
            compaction=found.compaction,
        )

    def _trust_failure(self) -> None:
        """One line when the trust record cannot be written (the run goes on)."""
        failure = getattr(self._trust, "failure", None)
        if failure is not None and not self._trust_warned:
            self._trust_warned = True
            self._notice(
                f"warning: {failure}; the run goes on, but is not recorded as this user's:"
                " resuming it will ask"
            )

    def _windowed(self, settings: RunSettings) -> RunSettings:
        """A new run's settings with its context window: the Models API's (fitted when the
        run opened, kept or asked), else the price list's, as a model change does; the price
        list is read after the Models API, not before the first request. Recorded with the
        run: its context limit does not move when the table does."""
        if settings.context_window is not None:
            return settings
        return evolve(settings, context_window=self._pricer.context_window(settings.model))

    def _check_budget(self, model: str, max_cost: float | None) -> None:
        """A budget needs a price: a model the price list does not know is refused."""
        problem = None if max_cost is None else unpriced(model, "--max-cost", self._pricer)
        if problem is not None:
            raise ConfigError(problem)

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


def _trust_facts(problem: str | None, settings: RunSettings, state: Any) -> TrustFacts:
    """What the core's trust decision needs from the disk: the folders, resolved."""
    return TrustFacts(
        problem=problem,
        here=str(Path(settings.workspace).resolve()),
        recorded=str(Path(state.settings.workspace).resolve()),
    )


def _torn(replayed: Any) -> int:
    return 0 if replayed.torn is None else int(replayed.torn.size)


def _is_folder(path: str) -> bool:
    return Path(path).is_dir()


class _Sessions:
    """Watches a log as it is replayed (cheap: most events are tokens): its first event, and
    how long its last session ran if it ended with no run_finished (`RunResumed.elapsed`)."""

    def __init__(self) -> None:
        self.first: Event | None = None
        self._start = 0.0
        self._last = 0.0
        self._open = False

    def __call__(self, event: Event) -> None:
        self._last = event.ts
        kind = type(event)
        if kind is LlmToken:
            return
        if kind is RunStarted or kind is RunResumed:
            if self.first is None:
                self.first = event
            self._start = event.ts
            self._open = True
        elif kind is RunFinished:
            self._open = False

    def lost(self) -> float:
        return round(max(0.0, self._last - self._start), 3) if self._open else 0.0


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
