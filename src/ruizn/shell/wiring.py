"""How `ruizn.Agent` wires a run: the provider for its model, its tools (built-ins, `--tool`
specs, plug-ins, the caller's, MCP servers'), the shell's sandbox, its hooks and the
`AgentRunner` that drives it. `Agent` (shell/agent.py) decides which run and how it goes on;
this part builds what the run needs, and closes it after.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attrs import evolve

from ruizn.bounds import deeper_than, too_deep
from ruizn.defaults import TEST_MODEL
from ruizn.effects.checkpoints.store import GitStore
from ruizn.effects.mcp.config import MCPServer
from ruizn.effects.models.function import FunctionModel, ReplyFunction
from ruizn.effects.models.pricing import Pricer, SharedBudget, unpriced
from ruizn.effects.models.provider import ModelCatalog, Provider, ProviderConfigError
from ruizn.effects.person.approval import Approver
from ruizn.effects.runlog.reader import LOG_NAME
from ruizn.effects.runlog.sink import EventSink
from ruizn.effects.tools.base import BaseTool, ToolRegistry
from ruizn.effects.tools.bash import ShellJobs, shell_config, shell_tools
from ruizn.effects.tools.bwrap import find_bwrap, probe, shell_environment
from ruizn.effects.tools.loader import Toolbox
from ruizn.effects.tools.output import CommandOutput
from ruizn.effects.tools.workspace import workspace_jail
from ruizn.effects.userconfig.dirs import state_dir
from ruizn.modelfacts import ModelRefused, deprecation_line, fitted, not_found_line, usable
from ruizn.modelfacts import check as check_model
from ruizn.redact import Redactor, secrets_from_env
from ruizn.redact import api_key_problem as key_whitespace_problem
from ruizn.resuming import SettingChange
from ruizn.settings import ConfigError, RunSettings
from ruizn.shell.outcome import Resume
from ruizn.shell.runner import AgentRunner, Subscriber
from ruizn.shell.structured import output_mode
from ruizn.shell.toolkit import (
    ChangedTool,
    ToolLike,
    mcp_source,
    mcp_toolset,
    source_of,
    tool_from,
    with_flags,
)
from ruizn.state import ExecutionContext
from ruizn.terminal import Notice
from ruizn.toolsource import SourceKind, ToolSource

if TYPE_CHECKING:
    from ruizn.effects.hooks.command import (
        HookExecutor,  # imported at run time only with servers (see mcp_toolset)
    )
    from ruizn.shell.children import ChildBuilder, ChildLauncher


class Wiring:
    """Builds a run's provider, tools, MCP servers and runner from what an agent was given:
    `ruizn.Agent`'s part that knows how, holding what it was given (no run's state)."""

    def __init__(
        self,
        *,
        model: str | ReplyFunction | Provider | None,
        tools: tuple[ToolLike, ...],
        builtins: bool,
        servers: tuple[MCPServer, ...],
        mcp_headers: tuple[str, ...],
        approver: Approver | None,
        environ: Mapping[str, str],
        notice: Notice,
        pricer: Pricer,
        budget: SharedBudget | None,
        hook_runner: HookExecutor | None,
        child: ChildBuilder,
        on_output: CommandOutput | None = None,
        launcher: ChildLauncher | None = None,
    ) -> None:
        self.model = model
        self.tools = tools
        self.builtins = builtins
        self.servers = servers
        self.mcp_headers = mcp_headers
        self.approver = approver
        self.environ = environ
        self.notice = notice
        self.pricer = pricer
        self.budget = budget
        # Runs the settings' hook commands (default: as commands in the workspace); a rerun
        # gives one that answers from the recording instead.
        self._hook_runner = hook_runner
        # Builds a child run's agent (`ruizn.Agent._child`): see shell/children.py.
        self._child = child
        # Who runs a child (None: in this process; a fleet worker queues it).
        self._launcher = launcher
        # Where a running command's output is shown as it comes (the CLI at a terminal).
        self._on_output = on_output

    @contextlib.asynccontextmanager
    async def open(
        self,
        settings: RunSettings,
        root: Path,
        run_id: str,
        sink: EventSink,
        state: ExecutionContext | None,
        *,
        subscribers: tuple[Subscriber, ...],
        forwarded: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> AsyncIterator[tuple[AgentRunner, RunSettings]]:
        """The provider, the tools and the runner for `settings`; for a new run (`state` is
        None) the settings come back filled in (tools, sources, servers). `forwarded`: a
        resume's decisions for the calls its subagents wait on, by `agent` call."""
        provider = self.provider(settings)
        jobs = None
        try:
            if state is None:
                settings = await self.fitted(provider, settings)
                if settings.output_schema is not None and not settings.output_mode:
                    # Asked once, recorded in run_started: a replay or rerun never asks again.
                    settings = evolve(settings, output_mode=await output_mode(provider, settings))
            jobs = self._shell_jobs(settings, root)
            shell = (
                *(shell_tools(jobs, self._on_output) if jobs is not None else ()),
                *self._agent_tools(settings, forwarded),
            )
            registry, sources = self._local_tools(settings, root, state, shell)
            servers = self._mcp_servers(settings)
            async with mcp_toolset(
                servers,
                Path(settings.workspace),
                root / ".mcp" / run_id,
                lambda text: self.notice(f"mcp: {text}"),
                self.environ,
            ) as (mcp_tools, mcp_records, watch):
                registry = ToolRegistry(
                    [*registry, *mcp_tools]
                    if settings.allowed_tools is None or state is not None
                    # A child keeps only its parent's tools that its definition names.
                    else [t for t in (*registry, *mcp_tools) if t.name in settings.allowed_tools],
                    timeout=settings.tool_timeout,
                )
                for schema in registry.tool_schemas():
                    if state is None and deeper_than(schema):
                        raise ConfigError(too_deep(f"the schema of tool {schema['name']!r}"))
                if state is None:
                    self._idle_hooks(settings, registry.names)
                    sources = (*sources, *(mcp_source(tool) for tool in mcp_tools))
                    sources = tuple(s for s in sources if registry.get(s.tool) is not None)
                    settings = evolve(
                        settings,
                        tool_sources=with_flags(sources, registry),
                        mcp_servers=mcp_records,
                    )
                else:
                    registry = ToolRegistry(
                        self._unchanged(settings, registry, mcp_tools),
                        timeout=settings.tool_timeout,
                    )
                # The environment's secrets, and the values given for the MCP servers
                # (--mcp-header, --mcp-env), wherever they would reach the log.
                redactor = Redactor(
                    secrets=(
                        *secrets_from_env(self.environ),
                        *(value for server in servers for value in server.secret_values()),
                    )
                )
                runner = AgentRunner(
                    provider=provider,
                    registry=registry,
                    sink=sink,
                    subscribers=subscribers,
                    clock=time.time,
                    timer=time.monotonic,
                    state=state,
                    redact=redactor.redact_event if redactor else None,
                    approver=self.approver,
                    watch=watch,
                    pricer=self.pricer,
                    budget=self.budget,
                    instructions=_subfolder_instructions(settings),
                    hooks=self.hooks_for(settings),
                    transcript=str(root / run_id / LOG_NAME),
                    checkpointer=self._checkpointer(settings, root / run_id),
                    redact_stream=redactor.stream_text if redactor else None,
                )
                yield runner, settings
        finally:
            if jobs is not None:
                jobs.close()  # every process the run started ends with it
            await _aclose(provider)

    async def setting_change(self, request: Resume, settings: RunSettings) -> SettingChange | None:
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
        provider = self.provider(asked)
        try:
            found = await self.fitted(provider, asked)
        finally:
            await _aclose(provider)
        window = found.context_window or self.pricer.context_window(new_model)
        return SettingChange(
            model=new_model,
            effort=request.effort,
            context_window=window,
            compaction=found.compaction,
        )

    def new_run(self, settings: RunSettings, *, rerun: bool) -> RunSettings:
        """A new run's settings filled in before anything is built: its workspace resolved,
        its budget checked and its project instructions read (its context window is set once
        the Models API's facts are in: `windowed`)."""
        workspace = resolved(settings.workspace)
        settings = evolve(settings, workspace=str(workspace))
        self.check_budget(settings.model, settings.max_cost)
        if settings.project_instructions and not settings.instructions and not rerun:
            # (A rerun sends the recorded text, and reads none where none was recorded.)
            # Read once, recorded in run_started: replay, resume and rerun send this text.
            from ruizn.effects.project.instructions import read_root

            settings = evolve(settings, instructions=read_root(workspace))
        return settings

    def windowed(self, settings: RunSettings) -> RunSettings:
        """A new run's settings with its context window: the Models API's (fitted when the
        run opened, kept or asked), else the price list's, as a model change does; the price
        list is read after the Models API, not before the first request. Recorded with the
        run: its context limit does not move when the table does."""
        if settings.context_window is not None:
            return settings
        return evolve(settings, context_window=self.pricer.context_window(settings.model))

    def check_budget(self, model: str, max_cost: float | None) -> None:
        """A budget needs a price: a model the price list does not know is refused."""
        problem = None if max_cost is None else unpriced(model, "--max-cost", self.pricer)
        if problem is not None:
            raise ConfigError(problem)

    def _checkpointer(self, settings: RunSettings, run: Path | None = None) -> GitStore | None:
        """The store of the workspace's checkpoints, in the user's state folder (None: the
        run keeps none); `run` is the run's folder (gc keeps its trees while it exists)."""
        if not settings.checkpoints:
            return None
        return GitStore.for_workspace(state_dir(self.environ), Path(settings.workspace), run=run)

    async def fitted(self, provider: Provider, settings: RunSettings) -> RunSettings:
        """A new run's settings checked against what the Models API says of its model, before
        its first request: a retired model or a thinking/effort choice it refuses is a
        ModelRefused; a deprecated one a warning (once: a run starts once). A model the API
        does not describe passes as it is."""
        catalog = getattr(provider, "catalog", None)
        if not isinstance(catalog, ModelCatalog):
            return settings
        facts = await catalog.describe(settings.model)
        if facts is None:
            await _known_or_refused(catalog, settings.model)
            return settings
        listing = await catalog.models() if facts.lifecycle == "retired" else ()
        check_model(settings, facts, listing)
        warning = deprecation_line(facts)
        if warning is not None:
            self.notice(warning)
        return fitted(settings, facts)

    def _shell_jobs(self, settings: RunSettings, root: Path) -> ShellJobs | None:
        """The run's process table when it offers the shell, after checking that bubblewrap
        confines commands here (fail closed: SandboxUnavailable, before any request)."""
        if not settings.shell:
            return None
        workspace = Path(settings.workspace).resolve()
        logs = root.resolve()
        mcp_env = [str(k) for record in settings.mcp_servers for k in record.get("env", ())]
        environ = shell_environment(self.environ, drop=mcp_env)
        bwrap = find_bwrap(self.environ)
        config = shell_config(
            workspace=workspace,
            # Hidden unless hiding them would hide the workspace too (--log-dir . or above).
            hidden=(logs,) if logs != workspace and logs not in workspace.parents else (),
            allow_read=tuple(Path(p).expanduser().resolve() for p in settings.shell_allow_read),
            network=settings.shell_network,
            sandbox=settings.sandbox,
            bwrap=bwrap,
            environ=environ,
            timeout=settings.shell_timeout,
            allow_domains=settings.shell_allow_domains,
        )
        if config.confinement is not None:
            probe(bwrap, config.confinement, environ)
        else:
            self.notice(
                "warning: --sandbox off: bash commands run unconfined, with your user's access"
                " to every file and the network"
            )
        return ShellJobs(config)

    def _idle_hooks(self, settings: RunSettings, tools: tuple[str, ...]) -> None:
        """A warning for each tool hook whose matcher matches no tool of the run: a safety
        hook that looks installed and never fires is worse than none."""
        from ruizn.hooknames import idle_matchers

        tool_events = ("PreToolUse", "PostToolUse")
        pairs = tuple((h.event, h.matcher) for h in settings.hooks if h.event in tool_events)
        for line in idle_matchers(pairs, tools):
            self.notice(line)

    def _agent_tools(
        self, settings: RunSettings, forwarded: Mapping[str, Mapping[str, Any]] | None
    ) -> tuple[BaseTool, ...]:
        """The `agent` tool, for a run with subagents that may still start children."""
        from ruizn.subagents import AGENT_TOOL

        allowed = settings.allowed_tools
        if not settings.subagents or settings.max_depth < 1:
            return ()
        if allowed is not None and AGENT_TOOL not in allowed:
            return ()
        from ruizn.shell.children import AgentTool, ChildRuns

        runs = ChildRuns(
            self._child,
            approver=self.approver,
            budget=self.budget,
            settings=settings,
            decisions=forwarded,
            launcher=self._launcher,
        )
        return (AgentTool(settings.subagents, runs),)

    def hooks_for(self, settings: RunSettings) -> HookExecutor | None:
        if not settings.hooks:
            return None
        if self._hook_runner is not None:
            return self._hook_runner
        from ruizn.effects.hooks.command import CommandHooks

        return CommandHooks(Path(settings.workspace), self.environ)

    def provider(self, settings: RunSettings) -> Provider:
        model = self.model
        if model is None or isinstance(model, str):
            if settings.model == TEST_MODEL:
                from ruizn.effects.models.offline import TestModelProvider

                return TestModelProvider(Path(settings.workspace))
            problem = self._key_problem()
            if problem is not None:
                raise ProviderConfigError(problem)
            from ruizn.effects.models.anthropic import AnthropicProvider
            from ruizn.effects.models.keptfacts import FactsFile

            return AnthropicProvider(
                read_timeout=settings.read_timeout,
                kept_facts=FactsFile(state_dir(self.environ)),
            )
        if hasattr(model, "stream") and not inspect.isfunction(model):
            return model  # type: ignore[return-value]
        return FunctionModel(model)

    def _key_problem(self) -> str | None:
        if not self.environ.get("ANTHROPIC_API_KEY"):
            return "ANTHROPIC_API_KEY is not set: set it, or try --model test (offline)"
        # A key read from a CRLF file keeps its \r; the HTTP client would put the key itself
        # into its error text. Refuse it before anything is sent or logged.
        return key_whitespace_problem(self.environ)

    def _local_tools(
        self,
        settings: RunSettings,
        root: Path,
        state: ExecutionContext | None,
        shell: tuple[BaseTool, ...] = (),
    ) -> tuple[ToolRegistry, tuple[ToolSource, ...]]:
        """A new run's tools: the built-ins, its specs and plug-ins, then the caller's. A
        resumed run's: the ones it started with, loaded again from where they came from."""
        from ruizn.effects.tools.function import tool as as_tool
        from ruizn.effects.tools.loader import collect_tools, load_sources

        sandbox = workspace_jail(
            Path(settings.workspace), root, allow_secret_files=settings.allow_secret_files
        )
        if state is not None:
            recorded = tuple(s for s in settings.tool_sources if s.kind is not SourceKind.MCP)
            given = {made.name: made for made in (tool_from(t, as_tool) for t in self.tools)}
            given |= {made.name: made for made in shell}
            if not settings.tool_sources:  # a run from before sources were recorded
                return collect_tools(sandbox, plugins=False).registry(), ()
            loadable = tuple(s for s in recorded if s.tool not in given)
            loaded = load_sources(loadable, sandbox, timeout=settings.tool_timeout)
            by_name = {tool.name: tool for tool in loaded} | given
            return ToolRegistry(by_name[s.tool] for s in recorded), recorded
        toolbox = self.toolbox(settings, root)
        tools = [*(loaded.tool for loaded in toolbox.tools), *shell]
        sources = list(toolbox.sources)
        sources += [ToolSource(tool=t.name, kind=SourceKind.BUILTIN, ref=t.name) for t in shell]
        for item in self.tools:
            made = tool_from(item, as_tool)
            tools.append(made)
            sources.append(source_of(made))
        return ToolRegistry(tools), tuple(sources)

    def toolbox(self, settings: RunSettings, root: Path) -> Toolbox:
        """The built-ins, specs and plug-ins a new run gets (`Agent.toolbox`)."""
        from ruizn.effects.tools.loader import collect_tools

        sandbox = workspace_jail(
            Path(settings.workspace).resolve(), root, allow_secret_files=settings.allow_secret_files
        )
        toolbox = collect_tools(
            sandbox,
            settings.tool_specs,
            plugins=settings.plugins,
            builtins=None if self.builtins else (),
            timeout=settings.tool_timeout,
        )
        for warning in toolbox.warnings:
            self.notice(f"warning: {warning}")
        return toolbox

    async def mcp_tools(self, workspace: str) -> tuple[BaseTool, ...]:
        """The tools the MCP servers offer now (`Agent.mcp_tools`)."""
        async with mcp_toolset(
            self.servers,
            resolved(workspace),
            None,
            lambda text: self.notice(f"mcp: {text}"),
            self.environ,
        ) as (tools, _, _):
            return tools

    def _unchanged(
        self, settings: RunSettings, registry: ToolRegistry, mcp_tools: tuple[BaseTool, ...]
    ) -> list[BaseTool]:
        """A resumed run's registry, with each MCP tool the servers now list otherwise than
        the run recorded replaced by one that refuses its calls (a notice says which)."""
        from ruizn.effects.mcp.toolset import mcp_tool_changes

        changed = mcp_tool_changes(
            recorded_sources=settings.tool_sources,
            recorded_tools=settings.tools,
            current_sources=[mcp_source(tool) for tool in mcp_tools],
            current_tools=[tool.schema() for tool in mcp_tools],
        )
        if not changed:
            return list(registry)
        recorded = {str(schema.get("name")): schema for schema in settings.tools}
        kept = [tool for tool in registry if tool.name not in changed]
        for name, reason in changed.items():
            self.notice(f"mcp: {reason}: its calls are refused, not run")
            kept.append(ChangedTool.of(name, recorded.get(name, {"name": name}), reason))
        return kept

    def _mcp_servers(self, settings: RunSettings) -> tuple[MCPServer, ...]:
        if self.servers:
            return self.servers
        if not settings.mcp_servers:
            return ()
        from ruizn.effects.mcp.config import servers_from_records

        return servers_from_records(settings.mcp_servers, self.mcp_headers, environ=self.environ)


async def _known_or_refused(catalog: ModelCatalog, model: str) -> None:
    """A model the Models API answered 404 for is refused before any request, naming the
    key's closest models, when the API lists models and this one is not among them (an
    endpoint without the Models API lists none, and the model passes as it is)."""
    if getattr(catalog, "not_found", None) != model:
        return
    listing = usable(await catalog.models())
    if listing and model not in listing:
        raise ModelRefused(not_found_line(model, listing))


def _subfolder_instructions(settings: RunSettings) -> Any:
    if not settings.project_instructions:
        return None
    from ruizn.effects.project.instructions import SubfolderInstructions

    return SubfolderInstructions(Path(settings.workspace))


def resolved(path: str) -> Path:
    return Path(path).resolve()


async def _aclose(provider: Provider) -> None:
    close = getattr(provider, "aclose", None)
    if close is not None:
        await close()


__all__: Sequence[str] = ("Wiring", "resolved")
