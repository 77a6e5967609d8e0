"""Subagents in the pure core: the reducer's checks of a child's start and end, how its
totals join the parent's, the settings a child gets (never wider than its parent's), and
definition files read as data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from attrs import evolve

from ruizn.agentdefs import (
    GENERAL,
    PERMISSION_MODES,
    DefinitionError,
    Subagent,
    child_approval,
    with_general,
)
from ruizn.effects.agents.files import AgentFileError, parse_definition, read_folder
from ruizn.events import (
    LlmCallStarted,
    LlmResponse,
    RunFinished,
    RunStarted,
    SubagentFinished,
    SubagentStarted,
    ToolCallStarted,
)
from ruizn.reducers import InvalidTransition, rebuild, reduce
from ruizn.serde import decode, encode
from ruizn.settings import RunSettings
from ruizn.state import Status, ToolCall, ToolUseBlock, Usage
from ruizn.subagents import child_settings, child_tools

HELPER = Subagent(name="helper", description="Helps.", prompt="You help.", tools=["Read"])
CALL = ToolUseBlock(id="t1", name="agent", input={"subagent_type": "helper"})
SETTINGS = RunSettings(
    model="m",
    max_steps=3,
    subagents=with_general([HELPER]),
    max_cost=1.0,
    tools=({"name": "read_file"}, {"name": "write_file"}, {"name": "agent"}),
)


def _running() -> Any:
    events: list[Any] = [
        RunStarted(seq=1, ts=0.0, run_id="p", goal="g", settings=SETTINGS),
        LlmCallStarted(seq=2, ts=0.0, step=1),
        LlmResponse(
            seq=3,
            ts=0.0,
            content=(CALL,),
            stop_reason="tool_use",
            usage=Usage(),
            cost=0.1,
            priced_by="p",
        ),
        ToolCallStarted(seq=4, ts=0.0, id="t1", name="agent", input=dict(CALL.input)),
    ]
    return rebuild(events)


def _then(state: Any, cls: type[Any], **fields: Any) -> Any:
    return reduce(state, cls(seq=state.last_seq + 1, ts=1.0, **fields))


def _started(state: Any) -> Any:
    return _then(state, SubagentStarted, id="t1", run_id="c", agent="helper")


def _finished(state: Any, **fields: Any) -> Any:
    base: dict[str, Any] = {
        "id": "t1",
        "run_id": "c",
        "status": Status.SUCCESS,
        "steps": 2,
        "usage": Usage(input_tokens=5, output_tokens=7),
        "cost": 0.25,
    }
    return _then(state, SubagentFinished, **{**base, **fields})


def test_a_childs_end_adds_its_totals_to_the_parents() -> None:
    state = _finished(_started(_running()))
    assert state.usage == Usage(input_tokens=5, output_tokens=7)
    assert state.total_cost == pytest.approx(0.35)
    (child,) = state.children
    assert (child.run_id, child.status, child.steps) == ("c", Status.SUCCESS, 2)


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda s: _then(s, SubagentStarted, id="t9", run_id="c", agent="helper"), "not running"),
        (lambda s: _started(_started(s)), "twice"),
        (lambda s: _then(s, SubagentStarted, id="t1", run_id="c", agent="nobody"), "lacks"),
        (lambda s: _then(s, SubagentStarted, id="t1", run_id="p", agent="helper"), "in use"),
        (lambda s: _then(s, SubagentStarted, id="t1", run_id="../x", agent="helper"), "not one"),
        (_finished, "started none"),
        (lambda s: _finished(_finished(_started(s))), "twice"),
        (lambda s: _finished(_started(s), run_id="x"), "another run"),
        (lambda s: _finished(_started(s), status=Status.AWAITING_APPROVAL), "awaited"),
        (lambda s: _finished(_started(s), usage=Usage(output_tokens=-5)), "negative"),
        (lambda s: _finished(_started(s), cost=-1.0), "not a price"),
    ],
)
def test_the_reducer_refuses_a_child_record_no_run_writes(make: Any, problem: str) -> None:
    with pytest.raises(InvalidTransition, match=problem):
        make(_running())


def test_a_child_that_waited_ends_again_and_only_its_new_totals_are_added() -> None:
    waiting = ToolCall(id="w1", name="write_file", input={})
    state = _finished(
        _started(_running()),
        status=Status.AWAITING_APPROVAL,
        awaiting=(waiting,),
        usage=Usage(output_tokens=3),
        cost=0.05,
    )
    assert [child.id for child in state.children_awaiting] == ["t1"]
    stopped = _then(
        state,
        RunFinished,
        status=Status.AWAITING_APPROVAL,
        steps=1,
        elapsed=0.0,
        usage=state.usage,
        cost=state.total_cost,
    )
    assert stopped.status is Status.AWAITING_APPROVAL
    again = _finished(state, usage=Usage(output_tokens=10), cost=0.3)
    assert again.usage == Usage(output_tokens=10)
    assert again.total_cost == pytest.approx(0.4)


def test_a_childs_settings_keep_the_parents_policy_and_never_widen_its_tools() -> None:
    parent = evolve(SETTINGS, approval="never", hooks=(), shell=False, max_depth=1)
    child = child_settings(parent, HELPER, 0.5)
    assert child.system == "You help."
    assert child.approval == "never"
    assert child.max_cost == 0.5
    assert child.allowed_tools == ("read_file",)  # Claude Code's "Read"
    assert child.subagents == ()  # depth 1: the child starts none
    wide = Subagent(name="w", description="d", prompt="p", tools=["bash", "write_file"])
    assert child_tools(evolve(parent, allowed_tools=("read_file",)), wide, 0) == ()
    general = child_settings(evolve(parent, max_depth=2), GENERAL, None)
    assert general.system == parent.system
    assert general.allowed_tools == ("read_file", "write_file", "agent")
    assert general.max_cost is None


def test_a_definition_file_is_read_as_claude_codes_format() -> None:
    text = (
        "---\nname: reviewer\ndescription: Reviews diffs.\ntools: Read, Grep\n"
        "disallowedTools: [Bash]\nmodel: inherit\nmaxTurns: 4\ncolor: red\n---\n\nYou review.\n"
    )
    found = parse_definition(text, "r.md")
    assert (found.name, found.tools, found.disallowed_tools) == (
        "reviewer",
        ("Read", "Grep"),
        ("Bash",),
    )
    assert (found.prompt, found.max_turns, found.source) == ("You review.", 4, "r.md")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("name: x\n", "no front matter"),
        ("---\nname: x\n", "no closing"),
        ("---\nname: [x\n---\nbody\n", "not YAML"),
        ("---\ndescription: d\n---\nbody\n", "needs `name`"),
        ("---\nname: x\ndescription: d\n---\n", "prompt"),
        ("---\nname: a b\ndescription: d\n---\nbody\n", "name"),
        ("---\nname: x\ndescription: d\nmaxTurns: 0\n---\nbody\n", "max_turns"),
        ("---\nname: x\ndescription: d\npermissionMode: yolo\n---\nb\n", "permissionMode"),
        ("---\n!!python/object/apply:os.system [echo]\n---\nbody\n", "not YAML"),
    ],
)
def test_a_bad_definition_is_one_line_naming_the_file(text: str, problem: str) -> None:
    with pytest.raises(AgentFileError, match=problem) as caught:
        parse_definition(text, "bad.md")
    assert str(caught.value).startswith("bad.md: ")


def test_a_linked_definition_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("---\nname: s\ndescription: d\n---\nsecret\n", encoding="utf-8")
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / "s.md").symlink_to(secret)
    with pytest.raises(AgentFileError, match="not a regular file"):
        read_folder(folder)


def test_a_definition_checks_its_own_fields() -> None:
    with pytest.raises(DefinitionError):
        Subagent(name="x", description="d", prompt="p", effort="huge")  # type: ignore[arg-type]


STRICTNESS = {"always": 0, "ask": 1, "never": 2}


@pytest.mark.parametrize("parent", ["always", "ask", "never"])
@pytest.mark.parametrize("mode", [None, *PERMISSION_MODES])
def test_a_definitions_permission_mode_never_widens_the_parents_approval(
    parent: Any, mode: Any
) -> None:
    definition = Subagent(name="x", description="d", prompt="p", permission_mode=mode)
    child = child_settings(evolve(SETTINGS, approval=parent), definition, None)
    assert STRICTNESS[child.approval] >= STRICTNESS[parent]
    assert child.approval == child_approval(parent, mode)
    # plan and dontAsk deny what needs a decision; the rest keep the parent's mode
    # (bypassPermissions and acceptEdits grant nothing).
    assert child.approval == ("never" if mode in ("plan", "dontAsk") else parent)


def test_a_definition_files_permission_mode_is_read_and_recorded() -> None:
    found = parse_definition(
        "---\nname: p\ndescription: d\npermissionMode: plan\n---\nLook only.\n", "p.md"
    )
    assert found.permission_mode == "plan"
    settings = evolve(SETTINGS, subagents=(found, HELPER))
    line = encode(RunStarted(seq=1, ts=0.0, run_id="r", goal="g", settings=settings))
    assert line.count("permission_mode") == 1  # left out where it is not set
    back = decode(line)
    assert isinstance(back, RunStarted)
    assert back.settings.subagents == (found, HELPER)
