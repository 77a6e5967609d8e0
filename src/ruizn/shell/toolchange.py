"""A run's tools changing while it goes on (an MCP server's notifications/tools/list_changed):
what a change is, what watches for one, and how the runner takes it between steps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from attrs import frozen

from ruizn.effects.person.approval import needs_approval_of
from ruizn.effects.tools.base import BaseTool, ToolRegistry
from ruizn.events import Event, ToolsChanged
from ruizn.reducers import InvalidTransition
from ruizn.settings import RunSettings
from ruizn.state import ExecutionContext, Phase, Status
from ruizn.toolsource import ToolSource

if TYPE_CHECKING:
    from ruizn.decide import NeedsApproval

E = TypeVar("E", bound=Event)


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
    """The part of `AgentRunner` (shell/runner.py) that takes a change of the run's tools."""

    _registry: ToolRegistry
    _watch: ToolWatch | None
    needs_approval: NeedsApproval

    if TYPE_CHECKING:  # the runner's, which this part of it uses

        @property
        def state(self) -> ExecutionContext: ...

        def _emit(self, cls: type[E], **fields: Any) -> None: ...

    async def _take_tool_changes(self) -> None:
        """Between steps, or between the calls of a turn, take a change of the run's tools:
        logged as `tools_changed` (the next request offers exactly its tools, on replay and
        resume too) and the registry swapped. A call of the turn whose tool is gone or
        changed is then answered with why (the reducer marks it, decide answers it)."""
        watch = self._watch
        if watch is None or not watch.pending():
            return
        state = self.state
        if state.status is not Status.RUNNING or state.phase not in (Phase.READY, Phase.TOOLS):
            return
        change = await watch.refresh(state.settings)
        if change is None:
            return
        state = self.state
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
                [*(t for t in self._registry if t.name not in change.replaces), *change.tools],
                timeout=self._registry.timeout,
            )
        except ValueError as exc:  # a name both the change and the run's other tools hold
            watch.refused(str(exc))
            return
        if tools != settings.tools or sources != settings.tool_sources:
            try:
                self._emit(ToolsChanged, servers=change.servers, tools=tools, tool_sources=sources)
            except InvalidTransition as exc:  # not written: the run goes on as it was
                watch.refused(str(exc))
                return
        self._registry = registry
        self.needs_approval = needs_approval_of(registry)


__all__ = ("ToolChange", "ToolChanges", "ToolWatch")
