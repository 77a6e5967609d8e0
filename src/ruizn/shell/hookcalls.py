"""The runner's hook calls: a run's hook commands (settings.hooks) run one after another
for an event, each answer logged as `hook_ran` (what decide reads to go on)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attrs import evolve

from ruizn.compaction import compact_fields
from ruizn.effects.hooks.command import HookExecutor
from ruizn.events import HookRan
from ruizn.hooknames import UnmappedInput, claude_input, ruizn_input, told_name
from ruizn.hooks import Outcome, matching, payload
from ruizn.settings import HookSpec
from ruizn.shell.recorder import Recorder
from ruizn.state import Phase, Status, ToolCall


class HookCalls:
    """The runner's part that runs a run's hook commands (None: a run without hooks, for
    which decide asks for none); `transcript` is the log's path they are told."""

    def __init__(self, run: Recorder, hooks: HookExecutor | None, transcript: str) -> None:
        self._run = run
        self._hooks = hooks
        self._transcript = transcript

    async def run(
        self,
        event: str,
        specs: Sequence[HookSpec],
        call: ToolCall | None = None,
        **fields: Any,
    ) -> list[HookRan]:
        """Run `specs` one after another for `event`, logging each answer (hook_ran)."""
        runner = self._hooks
        if runner is None:  # pragma: no cover - the builder gives one to a run with hooks
            raise RuntimeError("a run with hooks needs a hook runner")
        state = self._run.state
        if call is None and event in ("UserPromptSubmit", "SessionStart"):
            fields = {"prompt": state.goal} if event == "UserPromptSubmit" else fields
            if event == "SessionStart":
                fields = {"source": "startup", "model": state.settings.model}
        elif event == "Stop":
            fields = {"stop_hook_active": state.stop_blocked}
        elif event in ("PreCompact", "PostCompact"):
            fields = {**compact_fields(state, event), **fields}
        logged: list[HookRan] = []
        for spec in specs:
            # Claude Code's names and fields for a tool event; a subagent's start and stop
            # name ruizn's `agent` call as it is.
            told = None if call is None else call.name
            if call is not None and event in ("PreToolUse", "PostToolUse"):
                told = told_name(spec.matcher, call.name)
            if call is not None and told is not None:
                fields = {
                    **fields,
                    "tool_name": told,
                    "tool_input": claude_input(
                        call.name, told, call.input, state.settings.workspace
                    ),
                    "tool_use_id": call.id,
                }
            data = payload(
                event,
                run_id=state.run_id,
                transcript=self._transcript,
                settings=state.settings,
                **fields,
            )
            run = await runner.run(spec, data)
            found = _in_ruizn_fields(run.outcome, call, told, state.settings.workspace)
            decision = "stop" if found.stop is not None else found.decision
            event_record = self._run.emit(
                HookRan,
                hook_event=event,
                command=spec.command,
                exit_code=run.exit_code,
                decision=decision,
                reason=found.stop if found.stop is not None else found.reason,
                context=found.context,
                updated_input=found.updated_input,
                tool_use_id=None if call is None else call.id,
                duration=round(run.duration, 3),
                error=found.error,
            )
            assert isinstance(event_record, HookRan)
            logged.append(event_record)
            if decision == "stop":
                break
        return logged

    async def compacting(self, event: str, trigger: str, **fields: Any) -> None:
        """`ruizn compact`'s PreCompact or PostCompact hooks (those matching `trigger`)."""
        specs = matching(self._run.state.settings, event, trigger)
        if specs:
            await self.run(event, specs, trigger=trigger, **fields)

    async def session_end(self, status: Status) -> None:
        """SessionEnd hooks, told how the run ends, before its run_finished."""
        state = self._run.state
        specs = matching(state.settings, "SessionEnd")
        if specs and state.phase in (Phase.READY, Phase.TOOLS, Phase.DONE):
            await self.run("SessionEnd", specs, reason=status.value)


def _in_ruizn_fields(
    found: Outcome, call: ToolCall | None, told: str | None, workspace: str
) -> Outcome:
    """A hook's answer with its `updatedInput` in the fields of ruizn's tool (a hook told
    Claude Code's names answers in Claude Code's fields); one ruizn's tool cannot take
    denies the call rather than run it otherwise than the hook said."""
    if found.updated_input is None or call is None or told is None:
        return found
    try:
        updated = ruizn_input(call.name, told, found.updated_input, workspace)
    except UnmappedInput as exc:
        return evolve(found, decision="deny", reason=str(exc), updated_input=None)
    return evolve(found, updated_input=updated)


__all__ = ("HookCalls",)
