"""Subagents at the command line: definitions from folders, a workspace's only once
accepted, `ruizn agents` and `ruizn tools`, and a run's tree in `show` and `runs`."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

from tests.cli.conftest import (
    cli_env,
    read_events,
    run_cli,
    slow_answer,
    start_cli,
    wait_for_event,
)
from tests.cli.terminals import PROMPT, Terminal
from tests.fakeapi import Stream, Text
from tests.fakeapi.replies import Reply, ToolUse, by_system, tool_results, turns

PLANTED = "---\nname: x\ndescription: Planted.\ntools: Read, Bash\n---\nYou are x.\n"
MINE = "---\nname: reviewer\ndescription: Reviews.\ntools: [Read]\nmaxTurns: 3\n---\nYou review.\n"


def _tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in body.get("tools", [])]


def _plant(workspace: Path) -> None:
    folder = workspace / ".ruizn" / "agents"
    folder.mkdir(parents=True)
    (folder / "x.md").write_text(PLANTED, encoding="utf-8")


def test_a_planted_definition_is_not_run_until_accepted(
    workspace: Path, server_factory: Any
) -> None:
    _plant(workspace)
    server = server_factory(lambda body, index: Stream((Text("Done."),)))
    plain = run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url)
    assert plain.code == 0, plain.stderr
    assert "do not run without a person's yes" in plain.stderr
    assert "agent" not in _tool_names(server.requests[-1].body)

    trusted = run_cli(["run", "--trust", "hi"], workspace=workspace, base_url=server.base_url)
    assert trusted.code == 0, trusted.stderr
    agent = next(t for t in server.requests[-1].body["tools"] if t["name"] == "agent")
    assert agent["input_schema"]["properties"]["subagent_type"]["enum"] == ["x", "general"]

    listed = run_cli(["agents"], workspace=workspace)
    assert "x  (.ruizn/agents/x.md; Read, Bash;" in listed.stdout
    assert "[workspace: runs only once accepted]" in listed.stdout


def test_a_run_with_agents_dir_runs_a_child_that_show_and_runs_mark(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "reviewer.md").write_text(MINE, encoding="utf-8")

    def lead(body: dict[str, Any], index: int) -> Reply:
        if turns(body) == 0:
            call = {"subagent_type": "reviewer", "description": "review", "prompt": "Look."}
            return Stream((ToolUse("toolu_r", "agent", call),), stop_reason="tool_use")
        return Stream((Text(f"Reviewer: {tool_results(body)[0]['content']}"),))

    server = server_factory(
        by_system({"You review": lambda b, i: Stream((Text("Fine."),)), "": lead})
    )
    tools = run_cli(["tools", "--agents", str(mine), "--json"], workspace=workspace)
    assert "agent" in [t["name"] for t in json.loads(tools.stdout)]

    result = run_cli(
        ["run", "--agents", str(mine), "go"], workspace=workspace, base_url=server.base_url
    )
    assert result.code == 0, result.stderr
    assert "Reviewer: Fine." in result.stdout
    child_body = next(r.body for r in server.requests if "You review" in json.dumps(r.body))
    assert _tool_names(child_body) == ["read_file"]

    logs = {path: path.read_text().splitlines() for path in result.new_logs}
    parent = next(p for p, lines in logs.items() if '"parent"' not in lines[0])
    events = [json.loads(line) for line in logs[parent]]
    started = next(e for e in events if e["type"] == "subagent_started")
    shown = run_cli(["show", parent.parent.name], workspace=workspace)
    assert f"reviewer  {started['run_id']}  success" in shown.stdout
    runs = run_cli(["runs"], workspace=workspace)
    child_line = next(line for line in runs.stdout.splitlines() if started["run_id"] in line)
    assert "↳" in child_line


def test_kill_9_inside_a_child_then_resume_goes_on_in_the_childs_own_log(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "reviewer.md").write_text(MINE, encoding="utf-8")
    answer_now = {"child": False}

    def lead(body: dict[str, Any], index: int) -> Reply:
        if turns(body) == 0:
            call = {"subagent_type": "reviewer", "description": "review", "prompt": "Look."}
            return Stream((ToolUse("toolu_r", "agent", call),), stop_reason="tool_use")
        return Stream((Text(f"Parent done: {tool_results(body)[0]['content']}"),))

    def reviewer(body: dict[str, Any], index: int) -> Reply:
        if turns(body) == 0:
            read = ToolUse("toolu_read", "read_file", {"path": "README.md"})
            return Stream((read,), stop_reason="tool_use")
        return Stream((Text("Child done."),)) if answer_now["child"] else slow_answer(0.05)

    server = server_factory(by_system({"You review": reviewer, "": lead}))
    runs = workspace / ".ruizn" / "runs"
    proc = start_cli(
        ["run", "--agents", str(mine), "go"], workspace=workspace, base_url=server.base_url
    )
    try:
        parent_log = wait_for_event(runs, "subagent_started", proc)
        child_id = read_events(parent_log)[-1]["run_id"]
        # The child's second model call is streaming: kill -9 the whole process there.
        child_log = wait_for_event(runs, "llm_token", proc, count=3)
        assert child_log.parent.name == child_id
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=20)
    answer_now["child"] = True
    before = len(server.requests)

    result = run_cli(
        ["resume", parent_log.parent.name], workspace=workspace, base_url=server.base_url
    )
    assert result.code == 0, result.stderr
    assert "Parent done: Child done." in result.stdout
    parent_events = read_events(parent_log)
    assert [e["type"] for e in parent_events].count("subagent_started") == 1
    ended = [e for e in parent_events if e["type"] == "subagent_finished"]
    assert [(e["run_id"], e["status"]) for e in ended] == [(child_id, "success")]
    child_events = read_events(child_log)
    kinds = [e["type"] for e in child_events]
    assert kinds.count("run_started") == 1
    assert kinds.count("run_resumed") == 1
    assert kinds.count("tool_call_started") == 1  # its read ran once, before the kill
    # After the kill: the child's cut call made again, then the parent's last: nothing more.
    systems = [json.dumps(r.body.get("system")) for r in server.requests[before:]]
    assert ["You review" in s for s in systems] == [True, False]
    assert run_cli(["replay", str(child_log)], workspace=workspace).code == 0


def test_with_no_terminal_a_childs_write_stops_the_tree_exit_4_and_resume_approves_it(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    writer = "---\nname: writer\ndescription: Writes.\ntools: Write\n---\nYou write.\n"
    (mine / "writer.md").write_text(writer, encoding="utf-8")

    def lead(body: dict[str, Any], index: int) -> Reply:
        if turns(body) == 0:
            call = {"subagent_type": "writer", "description": "notes", "prompt": "Write."}
            return Stream((ToolUse("toolu_a", "agent", call),), stop_reason="tool_use")
        return Stream((Text(f"Parent: {tool_results(body)[0]['content']}"),))

    def child(body: dict[str, Any], index: int) -> Reply:
        if turns(body) == 0:
            write = ToolUse("toolu_w", "write_file", {"path": "notes.md", "content": "hi\n"})
            return Stream((write,), stop_reason="tool_use")
        return Stream((Text("Written."),))

    server = server_factory(by_system({"You write": child, "": lead}))
    stopped = run_cli(
        ["run", "--agents", str(mine), "go"], workspace=workspace, base_url=server.base_url
    )
    assert stopped.code == 4, stopped.stderr
    assert "toolu_w  writer > write_file" in stopped.stderr
    parent = next(p for p in stopped.new_logs if '"parent"' not in p.read_text().splitlines()[0])
    assert f"ruizn resume {parent.parent.name} --approve" in stopped.stderr
    assert not (workspace / "notes.md").exists()
    shown = run_cli(["show", parent.parent.name], workspace=workspace)
    assert "toolu_w  writer > write_file" in shown.stdout

    done = run_cli(
        ["resume", parent.parent.name, "--approve", "toolu_w"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert done.code == 0, done.stderr
    assert "Parent: Written." in done.stdout
    assert (workspace / "notes.md").read_text(encoding="utf-8") == "hi\n"


def test_a_childs_write_is_asked_at_the_terminal_under_its_agents_name(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    writer = "---\nname: writer\ndescription: Writes.\ntools: Write\n---\nYou write.\n"
    (mine / "writer.md").write_text(writer, encoding="utf-8")

    def lead(body: dict[str, Any], index: int) -> Reply:
        if turns(body) == 0:
            call = {"subagent_type": "writer", "description": "notes", "prompt": "Write."}
            return Stream((ToolUse("toolu_a", "agent", call),), stop_reason="tool_use")
        return Stream((Text("Parent done."),))

    def child(body: dict[str, Any], index: int) -> Reply:
        if turns(body) == 0:
            write = ToolUse("toolu_w", "write_file", {"path": "notes.md", "content": "hi\n"})
            return Stream((write,), stop_reason="tool_use")
        return Stream((Text("Written."),))

    server = server_factory(by_system({"You write": child, "": lead}))
    term = Terminal(
        ["run", "--agents", str(mine), "--goal", "go"],
        workspace,
        cli_env(server.base_url, COLUMNS="200"),
    )
    try:
        shown = term.expect(PROMPT)
        # The child's call, named by its agent, with the preview of what it would write.
        assert (
            "[approval] writer \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} write_file" in shown
        )
        assert "+hi" in shown
        assert not (workspace / "notes.md").exists()
        term.type(b"y\n")
        assert term.finish() == 0, term.text
    finally:
        term.close()
    assert (workspace / "notes.md").read_text(encoding="utf-8") == "hi\n"
