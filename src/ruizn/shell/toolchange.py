"""A run's tools changing while it goes on (an MCP server's notifications/tools/list_changed):
what a change is, what watches for one, and the runner's part that takes it between steps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from attrs import frozen

from ruizn.effects.person.approval import needs_approval_of
from ruizn.effects.tools.base import BaseTool, ToolRegistry
from ruizn.events import ToolsChanged
from ruizn.reducers import InvalidTransition
from ruizn.settings import RunSettings
from ruizn.shell.recorder import Recorder
from ruizn.state import Phase, Status
from ruizn.toolsource import ToolSource

if TYPE_CHECKING:
    from ruizn.decide import NeedsApproval


@frozen(kw_only=True)
class ToolChange:
    """Tools a run's tool source changed (an MCP server's list): `tools`, with their
    `sources` in the same order, take the place of the run's tools named in `replaces`."""

    servers: tuple[str, ...]
    tools: tuple[BaseTool, ...]
    sources: tuple[ToolSource, ...]
    replaces: frozenset[str]


class ToolWatch(Protocol):
    """Tools that may change while a run goes on (MCP servers' notifications/tools/
    list_changed). The runner asks `pending` before each action and, between steps or
    between a turn's calls, takes the change as a `tools_changed` event."""

    def pending(self) -> bool:
        """Whether a change may be waiting (cheap)."""
        ...

    async def refresh(self, settings: RunSettings) -> ToolChange | None:
        """The change, against the run's tools as `settings` record them; None when there
        is none, or it was refused (the watch says why)."""
        ...

    def refused(self, reason: str) -> None:
        """The run could not take the change (its log refused it)."""
        ...


class ToolChanges:
    """A run's tools as they are now (its registry, and which calls need approval), and how a
    change of them is taken: the runner's part for tools that change while it goes on."""

    def __init__(self, run: Recorder, registry: ToolRegistry, watch: ToolWatch | None) -> None:
        self._run = run
        self._watch = watch
        self.registry = registry
        self.needs_approval: NeedsApproval = needs_approval_of(registry)

    async def take(self) -> None:
        """Between steps, or between the calls of a turn, take a change of the run's tools:
        logged as `tools_changed` (the next request offers exactly its tools, on replay and
        resume too) and the registry swapped. A call of the turn whose tool is gone or
        changed is then answered with why (the reducer marks it, decide answers it)."""
        watch = self._watch
        if watch is None or not watch.pending():
            return
        state = self._run.state
        if state.status is not Status.RUNNING or state.phase not in (Phase.READY, Phase.TOOLS):
            return
        change = await watch.refresh(state.settings)
        if change is None:
            return
        state = self._run.state
        settings = state.settings
        tools = (
            *(t for t in settings.tools if t.get("name") not in change.replaces),
            *(tool.schema() for tool in change.tools),
        )
        sources = (
            *(s for s in settings.tool_sources if s.tool not in change.replaces),
            *change.sources,
        )
        try:
            registry = ToolRegistry(
                [*(t for t in self.registry if t.name not in change.replaces), *change.tools],
                timeout=self.registry.timeout,
            )
        except ValueError as exc:  # a name both the change and the run's other tools hold
            watch.refused(str(exc))
            return
        if tools != settings.tools or sources != settings.tool_sources:
            try:
                self._run.emit(
                    ToolsChanged, servers=change.servers, tools=tools, tool_sources=sources
                )
            except InvalidTransition as exc:  # not written: the run goes on as it was
                watch.refused(str(exc))
                return
        self.registry = registry
        self.needs_approval = needs_approval_of(registry)


__all__ = ("ToolChange", "ToolChanges", "ToolWatch")
