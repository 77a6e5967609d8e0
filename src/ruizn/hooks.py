"""Hooks, on Claude Code's contract: which commands an event fires, what they are told, and
what their answers mean. Pure: the commands run in `ruizn.effects.hooks`; the answers are
logged (`hook_ran`) and the reducer and `decide` act on the logged decision.

The contract (so a Claude Code hook script works unmodified; ruizn.hooknames gives its
tool names and fields for ruizn's tools):

- a command gets one JSON object on stdin: `session_id` (the run id), `transcript_path`
  (the run's events.jsonl), `cwd` (the workspace), `permission_mode`, `hook_event_name`,
  and per event `tool_name`, `tool_input`, `tool_use_id` (PreToolUse, PostToolUse),
  `tool_response` (PostToolUse), `prompt` (UserPromptSubmit), `stop_hook_active` (Stop),
  `source` and `model` (SessionStart), `reason` (SessionEnd), `trigger` (`auto` or
  `manual`, also the matcher) and `custom_instructions` (PreCompact), `trigger` and
  `compact_summary` (PostCompact);
- exit 0: stdout may be JSON: `hookSpecificOutput.permissionDecision` allow|deny|ask with
  `permissionDecisionReason`, `hookSpecificOutput.updatedInput`,
  `hookSpecificOutput.additionalContext`, `decision: "block"` with `reason` (the older
  `decision: "approve"|"block"` for PreToolUse too), `continue: false` with `stopReason`;
  plain stdout of a UserPromptSubmit or SessionStart hook is context for the model;
- exit 2: blocks; its stderr is the reason (PreToolUse: the call is denied and the model
  told why; PostToolUse, Stop: the model is told; UserPromptSubmit: the run ends;
  PreCompact: no compaction; plain stdout of a PreCompact hook is added to the summary's
  instructions);
- any other exit, a timeout, a command that cannot start: a notice, nothing blocked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from attrs import frozen

from ruizn.defaults import ApprovalMode
from ruizn.hooknames import fits
from ruizn.settings import HookSpec, JsonObject, RunSettings

BLOCKING_EXIT = 2
# Stronger decisions win when several PreToolUse hooks answer one call (Claude Code's order).
_STRENGTH = {"none": 0, "allow": 1, "ask": 2, "deny": 3}
_CONTEXT_EVENTS = ("UserPromptSubmit", "SessionStart", "PreCompact")
PERMISSION_MODES: dict[ApprovalMode, str] = {
    "ask": "default",
    "always": "bypassPermissions",
    "never": "dontAsk",
}


def matching(settings: RunSettings, event: str, tool: str | None = None) -> tuple[HookSpec, ...]:
    """The run's hooks for `event` (and, for a tool event, whose matcher takes `tool` by
    ruizn's name or Claude Code's: ruizn.hooknames, `agent` is `Task`/`Agent` there)."""
    return tuple(
        spec
        for spec in settings.hooks
        if spec.event == event and (tool is None or matches(spec.matcher, tool))
    )


def matches(matcher: str, tool: str) -> bool:
    """Claude Code's matcher: "" or "*" takes every tool; otherwise a regular expression that
    must match the whole name, ruizn's or Claude Code's ("write_file|edit_file", "Edit|Write",
    "mcp__.*"). A matcher that is not a valid expression matches the name exactly."""
    return fits(matcher, tool)


def matcher_problem(matcher: str) -> str | None:
    """Why a matcher is not a regular expression, or None."""
    if matcher in ("", "*"):
        return None
    try:
        re.compile(matcher)
    except re.error as exc:
        return f"the matcher {matcher!r} is not a regular expression ({exc})"
    return None


def payload(
    event: str,
    *,
    run_id: str,
    transcript: str,
    settings: RunSettings,
    **fields: Any,
) -> JsonObject:
    """The JSON a hook gets on stdin."""
    return {
        "session_id": run_id,
        "transcript_path": transcript,
        "cwd": settings.workspace,
        "permission_mode": PERMISSION_MODES.get(settings.approval, "default"),
        "hook_event_name": event,
        **fields,
    }


@frozen(kw_only=True)
class Outcome:
    """What one hook run decided (see the module's contract)."""

    decision: str = "none"
    reason: str | None = None
    context: str | None = None
    updated_input: JsonObject | None = None
    stop: str | None = None  # `continue: false`: the run ends, with this reason
    error: str | None = None  # a notice for the person (a failed or non-blocking hook)


def outcome(event: str, exit_code: int | None, stdout: str, stderr: str) -> Outcome:
    """A hook's answer, read by Claude Code's rules."""
    if exit_code is None:
        return Outcome(error=stderr.strip() or "the hook did not finish")
    if exit_code == BLOCKING_EXIT:
        reason = stderr.strip() or f"blocked by a {event} hook"
        if event == "PreToolUse":
            return Outcome(decision="deny", reason=reason)
        if event in ("PostToolUse", "Stop", "UserPromptSubmit", "PreCompact"):
            return Outcome(decision="block", reason=reason)
        return Outcome(error=reason)  # SessionStart/SessionEnd cannot block
    if exit_code != 0:
        return Outcome(error=f"exit {exit_code}: {stderr.strip()[:500]}")
    text = stdout.strip()
    answer = _json_object(text)
    if answer is None:
        if text and event in _CONTEXT_EVENTS:
            return Outcome(context=text)
        return Outcome()
    return _answer(event, answer)


def _json_object(text: str) -> JsonObject | None:
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _answer(event: str, answer: JsonObject) -> Outcome:
    specific = answer.get("hookSpecificOutput")
    specific = specific if isinstance(specific, dict) else {}
    decision = "none"
    reason = _text(answer.get("reason"))
    legacy = answer.get("decision")
    if event == "PreToolUse":
        wanted = specific.get("permissionDecision")
        if wanted in ("allow", "deny", "ask"):
            decision = str(wanted)
            reason = _text(specific.get("permissionDecisionReason")) or reason
        elif legacy in ("approve", "block"):
            decision = "allow" if legacy == "approve" else "deny"
    elif legacy == "block" and event not in {"SessionEnd", "SessionStart"}:
        decision = "block"
    updated = specific.get("updatedInput") if event == "PreToolUse" else None
    stop = None
    if answer.get("continue") is False:
        stop = _text(answer.get("stopReason")) or f"a {event} hook stopped the run"
    if decision in ("deny", "block") and reason is None:
        reason = f"blocked by a {event} hook"
    return Outcome(
        decision=decision,
        reason=reason,
        context=_text(specific.get("additionalContext")),
        updated_input=updated if isinstance(updated, dict) else None,
        stop=stop,
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def stronger(a: str, b: str) -> str:
    """The decision that wins of two PreToolUse answers."""
    return a if _STRENGTH.get(a, 0) >= _STRENGTH.get(b, 0) else b


def hook_note(event: str, text: str) -> str:
    """Text a hook gives the model (context, or why it blocked), tagged with its source."""
    return f'<hook event="{event}">\n{text.rstrip()}\n</hook>'


def denied_text(reason: str | None) -> str:
    return f"not run: a PreToolUse hook denied this call: {reason or 'no reason given'}"


def post_notes(runs: Sequence[Any]) -> str:
    """What PostToolUse hooks add to a result for the model: their additionalContext, and
    the reason of one that blocked (Claude Code shows the model both)."""
    notes = [
        hook_note("PostToolUse", text)
        for run in runs
        for text in (run.reason if run.decision == "block" else None, run.context)
        if text
    ]
    return "\n".join(notes)
