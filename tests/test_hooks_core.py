"""Hooks in the pure core: Claude Code's answers read as its docs say, and the reducer and
decide acting on the logged decision."""

from __future__ import annotations

import pytest

from ruizn.decide import AnswerDenied, Finish, RequestApproval, RunHooks, RunTools, next_action
from ruizn.events import (
    HookRan,
    LlmCallStarted,
    LlmResponse,
    RunStarted,
    ToolApprovalRequested,
    ToolCallStarted,
)
from ruizn.hooknames import UnmappedInput, claude_input, idle_matchers, ruizn_input, told_name
from ruizn.hooks import matches, outcome
from ruizn.reducers import InvalidTransition, reduce, start
from ruizn.settings import HookSpec, RunSettings
from ruizn.state import ExecutionContext, Status, ToolUseBlock


def test_answers_are_read_as_claude_codes() -> None:
    deny = (
        '{"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": "no"}}'
    )
    assert outcome("PreToolUse", 0, deny, "").decision == "deny"
    assert outcome("PreToolUse", 0, deny, "").reason == "no"
    assert outcome("PreToolUse", 2, "", "blocked!").reason == "blocked!"
    assert outcome("PreToolUse", 1, "", "oops").decision == "none"  # exit 1 never blocks
    assert outcome("PreToolUse", 0, '{"decision": "approve"}', "").decision == "allow"
    updated = '{"hookSpecificOutput": {"permissionDecision": "allow", "updatedInput": {"a": 1}}}'
    assert outcome("PreToolUse", 0, updated, "").updated_input == {"a": 1}
    assert outcome("UserPromptSubmit", 0, "plain context\n", "").context == "plain context"
    assert outcome("PostToolUse", 0, "plain text", "").context is None  # only JSON counts
    assert outcome("Stop", 0, '{"continue": false, "stopReason": "halt"}', "").stop == "halt"
    assert outcome("SessionEnd", 2, "", "x").decision == "none"  # it cannot block
    assert outcome("PreToolUse", None, "", "killed").error == "killed"


def test_matchers_are_whole_name_regular_expressions() -> None:
    assert matches("write_file|edit_file", "edit_file")
    assert not matches("write", "write_file")
    assert matches("*", "anything")
    assert matches("", "anything")
    assert matches("mcp__.*", "mcp__git__log")


def _turn() -> ExecutionContext:
    hook = HookSpec(event="PreToolUse", command="check", matcher="write_file")
    settings = RunSettings(model="m", hooks=(hook,), approval="always")
    state = start(RunStarted(seq=1, ts=0.0, run_id="r", goal="g", settings=settings))
    state = reduce(state, LlmCallStarted(seq=2, ts=0.0, step=1))
    call = ToolUseBlock(id="t1", name="write_file", input={"path": "src/a"})
    return reduce(state, LlmResponse(seq=3, ts=0.0, content=(call,), stop_reason="tool_use"))


def test_a_denied_call_is_answered_and_can_never_start() -> None:
    state = _turn()
    action = next_action(state)
    assert isinstance(action, RunHooks)
    assert action.event == "PreToolUse"
    denied = reduce(
        state,
        HookRan(
            seq=4,
            ts=0.0,
            hook_event="PreToolUse",
            command="check",
            exit_code=0,
            decision="deny",
            reason="no",
            tool_use_id="t1",
        ),
    )
    answer = next_action(denied)
    assert isinstance(answer, AnswerDenied)
    assert "no" in str(answer.answers[0][1].content)
    with pytest.raises(InvalidTransition, match="hook denied"):
        reduce(
            denied,
            ToolCallStarted(seq=5, ts=0.0, id="t1", name="write_file", input={"path": "src/a"}),
        )


def test_an_updated_input_is_the_input_the_call_runs_with() -> None:
    state = reduce(
        _turn(),
        HookRan(
            seq=4,
            ts=0.0,
            hook_event="PreToolUse",
            command="check",
            exit_code=0,
            decision="allow",
            updated_input={"path": "build/a"},
            tool_use_id="t1",
        ),
    )
    action = next_action(state)
    assert isinstance(action, RunTools)
    assert action.calls[0].input == {"path": "build/a"}


def test_a_log_cannot_hold_a_hook_the_run_does_not_have() -> None:
    with pytest.raises(InvalidTransition, match="no hook"):
        reduce(
            _turn(),
            HookRan(seq=4, ts=0.0, hook_event="Stop", command="x", exit_code=0),
        )


def test_ask_puts_the_call_to_a_person_even_with_approval_always() -> None:
    state = reduce(
        _turn(),
        HookRan(
            seq=4,
            ts=0.0,
            hook_event="PreToolUse",
            command="check",
            exit_code=0,
            decision="ask",
            tool_use_id="t1",
        ),
    )
    request = next_action(state)
    assert isinstance(request, RequestApproval)
    state = reduce(
        state,
        ToolApprovalRequested(seq=5, ts=0.0, id="t1", name="write_file", input={"path": "src/a"}),
    )
    assert next_action(state) == Finish(status=Status.AWAITING_APPROVAL)  # nobody to ask


def test_claude_codes_tool_names_match_ruizns_tools_and_ruizns_names_still_do() -> None:
    assert matches("Bash", "bash")
    assert matches("Edit|MultiEdit|Write", "edit_file")
    assert matches("Edit|MultiEdit|Write", "write_file")
    assert not matches("Edit|MultiEdit|Write", "read_file")
    assert matches("Task|Agent", "agent")
    assert matches("mcp__git__.*", "mcp__git__log")
    assert matches("write_file", "write_file")
    assert not matches("Bash", "bash_output")


def test_a_hook_reads_the_fields_of_the_name_it_matched() -> None:
    call = {"path": "src/a.py", "old_text": "x", "new_text": "y"}
    assert told_name("Edit|Write", "edit_file") == "Edit"
    assert told_name("*", "write_file") == "Write"  # a catch-all gets Claude Code's view
    assert told_name("edit_file", "edit_file") == "edit_file"  # ruizn's name: ruizn's view
    assert claude_input("edit_file", "Edit", call, "/ws") == {
        "file_path": "/ws/src/a.py",
        "old_string": "x",
        "new_string": "y",
    }
    assert claude_input("edit_file", "edit_file", call, "/ws") == call
    multi = claude_input("edit_file", "MultiEdit", call, "/ws")
    assert multi == {"file_path": "/ws/src/a.py", "edits": [{"old_string": "x", "new_string": "y"}]}
    assert ruizn_input("edit_file", "MultiEdit", multi, "/ws") == call
    assert ruizn_input("edit_file", "Edit", {"file_path": "/ws/b.py"}, "/ws") == {"path": "b.py"}
    assert ruizn_input("read_file", "Read", {"file_path": "/etc/x"}, "/ws") == {"path": "/etc/x"}
    with pytest.raises(UnmappedInput):
        ruizn_input("edit_file", "MultiEdit", {"edits": [{}, {}]}, "/ws")


def test_a_matcher_that_matches_no_tool_of_the_run_is_named_with_the_tools() -> None:
    lines = idle_matchers((("PreToolUse", "Bash"), ("PreToolUse", "Edit")), ("edit_file",))
    assert lines == (
        "warning: the PreToolUse hook matcher 'Bash' matches no tool of this run"
        " (its tools: edit_file)",
    )
