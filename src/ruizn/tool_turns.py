"""The reducer's cases for a turn's tool calls: started, finished, approvals, a changed
tool list, and the hooks around them.

Pure; `ruizn.reducers.reduce` dispatches to them."""

from __future__ import annotations

from attrs import evolve

from ruizn.bounds import deeper_than, too_deep
from ruizn.compaction import on_compact_hook
from ruizn.events import (
    HookRan,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallFinished,
    ToolCallStarted,
    ToolsChanged,
)
from ruizn.hooks import hook_note, stronger
from ruizn.media import problem as media_problem
from ruizn.rules import (
    InvalidTransition,
    changed_tools,
    pre_decision,
    rule_decision,
)
from ruizn.state import (
    Approval,
    ErrorType,
    ExecutionContext,
    JsonObject,
    Message,
    Phase,
    PreToolVerdict,
    TextBlock,
    ToolResultBlock,
    TurnResults,
)
from ruizn.toolsource import SourceKind, ToolSource
from ruizn.window import added_tokens


def turn_position(state: ExecutionContext, tool_use_id: str, what: str) -> int:
    index = state.turn_index.get(tool_use_id)
    if index is None:
        raise InvalidTransition(f"{what} for {tool_use_id!r}, which the model did not ask for")
    if state.turn_results.get(index) is not None:
        raise InvalidTransition(f"{what} for {tool_use_id!r}, which is answered already")
    return index


def on_tool_call_started(state: ExecutionContext, event: ToolCallStarted) -> ExecutionContext:
    index = turn_position(state, event.id, "tool_call_started")
    call = state.turn_calls[index]
    if event.name != call.name or event.input != call.input:
        raise InvalidTransition(
            f"tool_call_started for {event.id!r} names another tool or input than the model's"
        )
    if event.id in state.tools_in_flight:
        raise InvalidTransition(f"tool_call_started twice for {event.id!r}")
    if event.id in state.turn_stale:
        raise InvalidTransition(f"tool_call_started for {event.id!r}, whose tool changed")
    if pre_decision(state, event.id) == "deny":
        raise InvalidTransition(f"tool_call_started for {event.id!r}, which a hook denied")
    approval = state.turn_approvals[index]
    if approval is not None and approval.approved is not True:
        # The one rule approval rests on: a call that asked for a decision runs only after
        # a yes. The runner reduces before it writes, so it cannot start such a call.
        raise InvalidTransition(
            f"tool_call_started for {event.id!r}, which is "
            + ("denied" if approval.approved is False else "still awaiting approval")
        )
    return evolve(state, tools_in_flight=(*state.tools_in_flight, event.id), last_seq=event.seq)


def on_tool_call_finished(state: ExecutionContext, event: ToolCallFinished) -> ExecutionContext:
    index = turn_position(state, event.id, "tool_call_finished")
    approval = state.turn_approvals[index]
    if event.id in state.turn_stale:
        # Its tool changed after the model asked: answered with why, whatever was approved.
        if event.result.error_type != ErrorType.UNKNOWN_TOOL.value:
            raise InvalidTransition(
                f"tool_call_finished for {event.id!r}, whose tool changed, is not an"
                " unknown_tool error"
            )
    elif approval is not None:
        if approval.approved is None:
            raise InvalidTransition(
                f"tool_call_finished for {event.id!r}, which is still awaiting approval"
            )
        if approval.approved is False and event.result.error_type != ErrorType.DENIED.value:
            raise InvalidTransition(
                f"tool_call_finished for the denied call {event.id!r} is not a denied result"
            )
    # Its images must fit every request from now on (the history keeps them).
    problem, media = media_problem(event.result.content, state.media)
    if problem is not None:
        raise InvalidTransition(f"tool_call_finished for {event.id!r}: {problem}")
    results = state.turn_results.answer(index, event.result)  # O(1): see TurnResults
    in_flight = state.tools_in_flight
    if event.id in in_flight:
        in_flight = tuple(i for i in in_flight if i != event.id)
    context_tokens = state.context_tokens + added_tokens(event.result.content)
    if state.turn_open > 1:
        return evolve(
            state,
            turn_results=results,
            turn_open=state.turn_open - 1,
            tools_in_flight=in_flight,
            media=media,
            context_tokens=context_tokens,
            last_seq=event.seq,
        )
    # Every call of the turn is answered: one user message, in the order the model asked.
    answer = Message(
        role="user",
        content=tuple(
            ToolResultBlock(tool_use_id=call.id, content=result.content, is_error=result.is_error)
            for call, result in zip(state.turn_calls, results, strict=True)
            if result is not None
        ),
    )
    return evolve(
        state,
        messages=state.messages + (answer,),  # noqa: RUF005 - one copy (see model_turns)
        turn_calls=(),
        turn_results=TurnResults(),
        turn_open=0,
        turn_approvals=(),
        turn_stale=(),
        turn_index={},
        tools_in_flight=in_flight,
        media=media,
        context_tokens=context_tokens,
        last_seq=event.seq,
    )


def on_approval_requested(
    state: ExecutionContext, event: ToolApprovalRequested
) -> ExecutionContext:
    index = turn_position(state, event.id, "tool_approval_requested")
    call = state.turn_calls[index]
    if event.name != call.name or event.input != call.input:
        raise InvalidTransition(
            f"tool_approval_requested for {event.id!r} names another tool or input than the model's"
        )
    if state.turn_approvals[index] is not None:
        raise InvalidTransition(f"tool_approval_requested twice for {event.id!r}")
    if event.id in state.tools_in_flight:
        raise InvalidTransition(f"tool_approval_requested for {event.id!r}, which has started")
    return evolve(
        state,
        turn_approvals=replace_at(state.turn_approvals, index, Approval()),
        last_seq=event.seq,
    )


def on_approval_decided(state: ExecutionContext, event: ToolApprovalDecided) -> ExecutionContext:
    index = turn_position(state, event.id, "tool_approval_decided")
    approval = state.turn_approvals[index]
    if approval is None:
        raise InvalidTransition(f"tool_approval_decided for {event.id!r}, which was not requested")
    if approval.approved is not None:
        raise InvalidTransition(f"tool_approval_decided twice for {event.id!r}")
    call = state.turn_calls[index]
    if event.by in ("policy", "always-rule"):
        # A decision made without a person must be the one the run's rules make: an
        # --allow-command pattern by its characters (a log from before patterns were
        # parsed stays readable; replay parses nothing; decide's decisions are stricter).
        ruled = rule_decision(state, call, parsed=False)
        if ruled is None or ruled.by != event.by or ruled.approved != event.approved:
            raise InvalidTransition(
                f"a {event.by} decision ({'approve' if event.approved else 'deny'}) for"
                f" {call.name!r} that the run's rules (approval mode"
                f" {state.settings.approval}) do not make"
            )
    elif event.by != "user":
        raise InvalidTransition(f"tool_approval_decided by {event.by!r}")
    if event.always and not (event.approved and event.by == "user"):
        raise InvalidTransition("only a person's approval can approve a tool for the whole run")
    always = state.always_approved
    if event.always and call.name not in always:
        always = (*always, call.name)
    decided = Approval(approved=event.approved, by=event.by, reason=event.reason)
    return evolve(
        state,
        turn_approvals=replace_at(state.turn_approvals, index, decided),
        always_approved=always,
        last_seq=event.seq,
    )


def on_tools_changed(state: ExecutionContext, event: ToolsChanged) -> ExecutionContext:
    """The run's tools from now on. Only the MCP tools of the servers named may change: the
    rest (built-ins, code the run imports, other servers' tools) stay exactly as they were,
    so no line of a log can add code to load on resume."""
    settings = state.settings
    recorded = {str(server.get("name")) for server in settings.mcp_servers}
    servers = set(event.servers)
    if not servers or not servers <= recorded:
        raise InvalidTransition(
            f"tools_changed for MCP servers {sorted(servers)}, not the run's {sorted(recorded)}"
        )

    def theirs(source: ToolSource) -> bool:
        return source.kind is SourceKind.MCP and source.ref.partition("/")[0] in servers

    def kept(
        tools: tuple[JsonObject, ...], sources: tuple[ToolSource, ...]
    ) -> tuple[list[JsonObject], list[ToolSource]]:
        changing = {source.tool for source in sources if theirs(source)}
        return (
            [tool for tool in tools if tool.get("name") not in changing],
            [source for source in sources if source.tool not in changing],
        )

    if kept(event.tools, event.tool_sources) != kept(settings.tools, settings.tool_sources):
        raise InvalidTransition("tools_changed changes tools other than those of its MCP servers")
    names = [tool.get("name") for tool in event.tools]
    if len(set(names)) != len(names) or not all(isinstance(name, str) for name in names):
        raise InvalidTransition("tools_changed names a tool twice, or one without a name")
    if any(theirs(s) and s.tool not in names for s in event.tool_sources):
        raise InvalidTransition("tools_changed records a source for a tool it does not offer")
    for schema in event.tools:
        if deeper_than(schema):
            raise InvalidTransition(too_deep(f"the schema of tool {schema.get('name')!r}"))
    changed = changed_tools(settings, event.tools, event.tool_sources)
    stale = [
        call.id
        for call in state.pending_tool_calls
        if call.name in changed and call.id not in state.turn_stale
    ]
    if any(call_id in state.tools_in_flight for call_id in stale):
        raise InvalidTransition("tools_changed while a call of a changed tool runs")
    return evolve(
        state,
        settings=evolve(settings, tools=event.tools, tool_sources=event.tool_sources),
        turn_stale=(*state.turn_stale, *stale),
        last_seq=event.seq,
    )


HOOK_DECISIONS = frozenset({"none", "allow", "deny", "ask", "block", "stop"})


def on_hook_ran(state: ExecutionContext, event: HookRan) -> ExecutionContext:
    """A hook's logged answer, applied: the run's hooks say which may run when; what each
    decided changes the turn, the history or the run's end as Claude Code's contract says."""
    if event.decision not in HOOK_DECISIONS:
        raise InvalidTransition(f"hook_ran with the decision {event.decision!r}")
    if not any(spec.event == event.hook_event for spec in state.settings.hooks):
        raise InvalidTransition(f"hook_ran for {event.hook_event}, which the run has no hook for")
    compact_event = event.hook_event in ("PreCompact", "PostCompact")
    if state.phase is Phase.FINISHED and not compact_event:
        raise InvalidTransition(f"hook_ran {event.hook_event} in a run that has stopped")
    after = evolve(state, last_seq=event.seq)
    if event.decision == "stop":  # `continue: false`: the run ends, whatever the event
        return evolve(after, hook_stop=event.reason or f"a {event.hook_event} hook")
    match event.hook_event:
        case "PreCompact" | "PostCompact":
            return on_compact_hook(after, event)
        case "PreToolUse":
            return pre_tool_hook(after, event)
        case "PostToolUse":
            if state.phase is not Phase.TOOLS or event.tool_use_id not in state.tools_in_flight:
                raise InvalidTransition("hook_ran PostToolUse for no call that is running")
            return after
        case "UserPromptSubmit" | "SessionStart":
            if state.phase is not Phase.READY or state.step or state.messages[-1].role != "user":
                raise InvalidTransition(f"hook_ran {event.hook_event} after the run's start")
            after = evolve(after, start_hooks_ran=state.start_hooks_ran + 1)
            if event.decision == "block":
                return evolve(after, hook_stop=f"the prompt was blocked: {event.reason}")
            if event.context is None:
                return after
            first = after.messages[-1]
            note = TextBlock(text=hook_note(event.hook_event, event.context))
            message = evolve(first, content=(*first.content, note))
            return evolve(after, messages=(*after.messages[:-1], message))
        case "Stop":
            if state.phase is not Phase.DONE:
                raise InvalidTransition("hook_ran Stop before the model ended its turn")
            after = evolve(after, stop_hooked_step=state.step)
            if event.decision != "block":
                return after
            if state.messages[-1].role != "assistant":
                return after  # the end came through a tool (final_output): nothing to answer
            back = Message(
                role="user", content=(TextBlock(text=hook_note("Stop", str(event.reason))),)
            )
            # The model is called again with the hook's reason (Claude Code's Stop block).
            return evolve(
                after, messages=(*after.messages, back), stop_blocked=True, phase=Phase.READY
            )
        case "SessionEnd":
            return after
        case "SubagentStart" | "SubagentStop":
            if state.phase is not Phase.TOOLS or event.tool_use_id not in state.tools_in_flight:
                raise InvalidTransition(f"hook_ran {event.hook_event} for no call that is running")
            return after  # told, not asked: a subagent's hooks decide nothing here
    raise InvalidTransition(f"hook_ran for the unknown event {event.hook_event!r}")


def pre_tool_hook(state: ExecutionContext, event: HookRan) -> ExecutionContext:
    if state.phase is not Phase.TOOLS or event.tool_use_id is None:
        raise InvalidTransition("hook_ran PreToolUse outside a tool turn")
    index = turn_position(state, event.tool_use_id, "hook_ran PreToolUse")
    if event.tool_use_id in state.tools_in_flight:
        raise InvalidTransition("hook_ran PreToolUse for a call that has started")
    if event.decision not in ("none", "allow", "deny", "ask"):
        raise InvalidTransition(f"a PreToolUse hook cannot decide {event.decision!r}")
    verdicts = {v.id: v for v in state.turn_pre}
    old = verdicts.get(event.tool_use_id, PreToolVerdict(id=event.tool_use_id))
    decision = stronger(old.decision, event.decision)
    reason = event.reason if decision == event.decision and event.reason else old.reason
    verdicts[old.id] = PreToolVerdict(id=old.id, ran=old.ran + 1, decision=decision, reason=reason)
    calls = state.turn_calls
    if event.updated_input is not None and decision != "deny":
        if deeper_than(event.updated_input):
            raise InvalidTransition(too_deep("a hook's updated tool input"))
        call = calls[index]
        calls = (*calls[:index], evolve(call, input=event.updated_input), *calls[index + 1 :])
    return evolve(state, turn_pre=tuple(verdicts.values()), turn_calls=calls)


def replace_at(
    items: tuple[Approval | None, ...], index: int, item: Approval
) -> tuple[Approval | None, ...]:
    return (*items[:index], item, *items[index + 1 :])
