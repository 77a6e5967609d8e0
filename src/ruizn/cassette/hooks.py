"""A recording's hook answers, served again: a rerun never runs a hook command."""

from __future__ import annotations

from collections.abc import Iterable

from ruizn.effects.hooks.command import HookRun
from ruizn.events import Event, HookRan
from ruizn.hooks import Outcome
from ruizn.settings import HookSpec, JsonObject


class RecordedHooks:
    """Answers each hook the re-drive asks for with the recording's next `hook_ran` for the
    same event and command, in order. One the recording does not hold is answered as a hook
    that did nothing (a notice in the log says so); the rerun's comparison shows what that
    changed."""

    def __init__(self, events: Iterable[Event]) -> None:
        self._left = [event for event in events if isinstance(event, HookRan)]

    async def run(self, spec: HookSpec, payload: JsonObject) -> HookRun:
        for index, recorded in enumerate(self._left):
            if (recorded.hook_event, recorded.command) == (spec.event, spec.command):
                del self._left[index]
                stop = recorded.reason if recorded.decision == "stop" else None
                return HookRun(
                    exit_code=recorded.exit_code,
                    outcome=Outcome(
                        decision="none" if stop is not None else recorded.decision,
                        reason=None if stop is not None else recorded.reason,
                        context=recorded.context,
                        updated_input=recorded.updated_input,
                        stop=stop,
                        error=recorded.error,
                    ),
                    duration=recorded.duration,
                )
        return HookRun(
            exit_code=None,
            outcome=Outcome(error="not in the recording: a rerun runs no hook"),
            duration=0.0,
        )
