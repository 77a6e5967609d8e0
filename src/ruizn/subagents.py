"""What a child run is given: its settings, made from its parent's and its definition.

One policy gate for the tree: a child keeps its parent's workspace, approval mode (or a
stricter one its definition's permissionMode asks), hooks,
sandbox, secret rules, timeouts and MCP servers; its tools are those of its definition that
the parent has (never wider); its budget is what the parent has left; it may start children
of its own only while `max_depth` allows. Pure: no I/O.
"""

from __future__ import annotations

from attrs import evolve

from ruizn.agentdefs import Subagent, child_approval, tool_names
from ruizn.settings import RunSettings
from ruizn.state import ExecutionContext

__all__ = ["AGENT_TOOL", "child_settings", "child_tools", "remaining_budget"]

AGENT_TOOL = "agent"


def remaining_budget(state: ExecutionContext) -> float | None:
    """What is left of the run's `max_cost` (its calls and its finished children counted);
    None: no budget. Never below 0."""
    limit = state.settings.max_cost
    if limit is None:
        return None
    return max(0.0, round(limit - state.cost, 10))


def child_tools(parent: RunSettings, definition: Subagent, depth_left: int) -> tuple[str, ...]:
    """The tools a child may offer: its definition's that its parent has (all the parent's
    when it names none), `agent` only while depth is left."""
    offered = tuple(str(schema.get("name")) for schema in parent.tools)
    if parent.allowed_tools is not None:
        offered = tuple(name for name in offered if name in parent.allowed_tools)
    wanted = frozenset(offered) if definition.tools is None else tool_names(definition.tools)
    unwanted = tool_names(definition.disallowed_tools)
    kept = tuple(name for name in offered if name in wanted and name not in unwanted)
    return tuple(name for name in kept if name != AGENT_TOOL or depth_left >= 1)


def child_settings(parent: RunSettings, definition: Subagent, budget: float | None) -> RunSettings:
    """The settings of a child of a run with `parent` settings, as `definition`; `budget`
    what the parent has left (None: no budget)."""
    depth_left = parent.max_depth - 1
    model = parent.model if definition.model in (None, "", "inherit") else definition.model
    system = parent.system if definition.source == "built-in" else definition.prompt
    return evolve(
        parent,
        model=model,
        system=system,
        approval=child_approval(parent.approval, definition.permission_mode),
        effort=definition.effort if definition.effort is not None else parent.effort,
        max_steps=definition.max_turns if definition.max_turns is not None else parent.max_steps,
        max_cost=budget if budget is None or budget > 0 else None,
        max_depth=max(depth_left, 0),
        allowed_tools=child_tools(parent, definition, depth_left),
        subagents=parent.subagents if depth_left >= 1 else (),
        # Filled again when the child starts, from what the child is given.
        tools=(),
        tool_sources=(),
        output_schema=None,
        output_mode=None,
        instructions=(),
        context_window=None if model != parent.model else parent.context_window,
        thinking=None if model != parent.model else parent.thinking,
    )
