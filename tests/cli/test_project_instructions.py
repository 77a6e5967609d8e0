"""Project instructions (AGENTS.md / CLAUDE.md): the real CLI, the real SDK, the local API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ruizn
from ruizn.request import build_request
from tests.cli.conftest import run_cli
from tests.fakeapi import Stream, Text, ToolUse

RULES = "Always answer in haiku. Run `make check` before you say you are done."


def _system(body: dict[str, Any]) -> str:
    return "".join(block["text"] for block in body.get("system", []))


def test_agents_md_is_in_the_first_requests_system_prompt_and_replay_rebuilds_it(
    workspace: Path, server_factory: Any
) -> None:
    (workspace / "AGENTS.md").write_text(f"# Agents\n\n{RULES}\n", encoding="utf-8")
    server = server_factory([Stream((Text("Done."),))])
    result = run_cli(["run", "say hello"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    first = server.requests[0].body
    system = _system(first)
    assert RULES in system
    assert system.startswith("You are ruizn")  # the run's own prompt comes first
    assert '<project_instructions path="AGENTS.md">' in system
    started = result.events()[0]
    assert started["settings"]["instructions"][0]["path"] == "AGENTS.md"
    # The log alone gives the same system prompt, whatever the file says now.
    (workspace / "AGENTS.md").write_text("changed since", encoding="utf-8")
    state = ruizn.replay(result.log_path)
    assert build_request(state)["system"] == first["system"]
    shown = run_cli(["show", "last"], workspace=workspace)
    assert shown.code == 0, shown.stderr
    assert "AGENTS.md in the system prompt" in shown.stdout


def test_claude_md_when_there_is_no_agents_md_and_the_switch_turns_it_off(
    workspace: Path, server_factory: Any
) -> None:
    (workspace / "CLAUDE.md").write_text(RULES, encoding="utf-8")
    server = server_factory([Stream((Text("One."),)), Stream((Text("Two."),))])
    on = run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url)
    off = run_cli(
        ["run", "--no-project-instructions", "hi"], workspace=workspace, base_url=server.base_url
    )
    assert on.code == 0, on.stderr
    assert off.code == 0, off.stderr
    assert '<project_instructions path="CLAUDE.md">' in _system(server.requests[0].body)
    assert RULES not in _system(server.requests[1].body)
    assert off.events()[0]["settings"]["project_instructions"] is False
    assert "instructions off" in run_cli(["show", "last"], workspace=workspace).stdout


def test_a_long_file_is_cut_at_the_cap_and_show_says_so(
    workspace: Path, server_factory: Any
) -> None:
    (workspace / "AGENTS.md").write_text("x" * 50_000, encoding="utf-8")
    server = server_factory([Stream((Text("ok"),))])
    result = run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    system = _system(server.requests[0].body)
    assert "cut at 32000 of 50000 bytes" in system
    assert system.count("x") < 33_000
    assert "cut at" in run_cli(["show", "last"], workspace=workspace).stdout


def test_a_subfolders_agents_md_comes_with_the_first_file_tool_result_there(
    workspace: Path, server_factory: Any
) -> None:
    sub = workspace / "pkg" / "core"
    sub.mkdir(parents=True)
    (workspace / "pkg" / "AGENTS.md").write_text("pkg rule: no globals", encoding="utf-8")
    (sub / "a.py").write_text("A = 1\n", encoding="utf-8")
    (sub / "b.py").write_text("B = 2\n", encoding="utf-8")
    server = server_factory(
        [
            Stream(
                (ToolUse("toolu_1", "read_file", {"path": "pkg/core/a.py"}),),
                stop_reason="tool_use",
            ),
            Stream(
                (ToolUse("toolu_2", "read_file", {"path": "pkg/core/b.py"}),),
                stop_reason="tool_use",
            ),
            Stream((Text("Read both."),)),
        ]
    )
    result = run_cli(["run", "read them"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr

    def last_result(index: int) -> str:
        message = server.requests[index].body["messages"][-1]
        return json.dumps(message["content"][0]["content"])

    assert "pkg rule: no globals" in last_result(1)
    assert 'path=\\"pkg/AGENTS.md\\"' in last_result(1)
    assert "pkg rule" not in last_result(2)  # given once per run
    # It is part of the logged result: a replay sends the same request.
    state = ruizn.replay(result.log_path)
    rebuilt = build_request(state)["messages"][2]["content"][0]["content"]
    assert rebuilt == server.requests[1].body["messages"][2]["content"][0]["content"]
