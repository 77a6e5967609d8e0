"""GOALS.jsonl: every bad line is one error naming it; the same file gives the same ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ruizn.fleet.driver import RunInput
from ruizn.fleet.goals import RUN_ID, GoalsError, read_goals
from ruizn.settings import RunSettings
from ruizn.terminal import visible

DEFAULTS = RunInput(run_id="", goal="", settings=RunSettings(model="m", system="s", workspace="/w"))


def goals(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "goals.jsonl"
    path.write_text(text, encoding="utf-8")
    return path


def test_options_override_the_defaults_and_ids_are_stable(tmp_path: Path) -> None:
    path = goals(tmp_path, '{"goal": "a", "max_steps": 3}\n\n{"goal": "b", "id": "mine"}\n')
    first = read_goals(path, DEFAULTS)
    assert [(s.goal, s.settings.max_steps, s.settings.model) for s in first] == [
        ("a", 3, "m"),
        ("b", 20, "m"),
    ]
    assert first[1].run_id == "mine"
    assert [s.run_id for s in read_goals(path, DEFAULTS)] == [s.run_id for s in first]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"goal": "a"}\n[1]\n', "line 2: expected a JSON object, got list"),
        ('{"goal": ""}\n', "line 1: 'goal' must be a non-empty string"),
        ('{"goal": "a", "steps": 3}\n', "line 1: unknown option 'steps'"),
        ('{"goal": "a", "max_steps": "3"}\n', "line 1: max_steps must be a whole number >= 1"),
        ('{"goal": "a", "max_steps": 0}\n', "line 1: max_steps must be a whole number >= 1"),
        ('{"goal": "a", "id": "x"}\n{"goal": "b", "id": "x"}\n', "line 2: run id 'x'"),
        ('{"goal": "a", "workspace": "nowhere"}\n', "line 1: workspace 'nowhere'"),
        ('{"goal": "a", "approval": "maybe"}\n', "line 1: approval must be one of ask, always"),
        ('{"goal": "a", "tool_concurrency": 0}\n', "line 1: tool_concurrency must be a whole"),
        ('{"goal": "a", "allow_secret_files": "yes"}\n', "line 1: allow_secret_files must be"),
        ('{"goal": "a", "read_timeout": 0}\n', "line 1: read_timeout must be a finite number"),
        ('{"goal": "a", "tool_specs": "m:t"}\n', "line 1: 'tool_specs' must be a list, not str"),
        ('{"goal": "a", "tool_specs": [1]}\n', "line 1: 'tool_specs' must list MODULE:ATTR"),
        ('{"goal": "a", "mcp_servers": {}}\n', "line 1: 'mcp_servers' must be a list, not dict"),
        (
            '{"goal": "a", "mcp_servers": ["bare"]}\n',
            "line 1: mcp_servers: --mcp 'bare': expected NAME=COMMAND or NAME=URL",
        ),
        (
            '{"goal": "a", "mcp_servers": [7]}\n',
            "line 1: mcp_servers: expected 'NAME=COMMAND', 'NAME=URL' or a server record, not 7",
        ),
        (
            '{"goal": "a", "mcp_servers": [{"name": "x", "transport": "ftp"}]}\n',
            "line 1: mcp_servers: MCP server x: unknown transport 'ftp'",
        ),
        (
            '{"goal": "a", "mcp_servers": [{"name": "x", "transport": "stdio"}]}\n',
            "line 1: mcp_servers: a recorded MCP server is incomplete",
        ),
        (
            '{"goal": "a", "mcp_servers": ["x=a", "x=https://h/mcp"]}\n',
            "line 1: mcp_servers: two servers are named 'x'",
        ),
        (
            '{"goal": "a", "subagents": {"name": "x"}}\n',
            "line 1: 'subagents' must be a list, not dict",
        ),
        (
            '{"goal": "a", "subagents": [{"name": "r", "description": "d"}]}\n',
            "line 1: subagents: required field missing @ $[0].prompt",
        ),
        (
            '{"goal": "a", "subagents": [{"name": "Bad Name", "description": "d", "prompt": "p"}]}'
            "\n",
            "line 1: subagents: a subagent's name must be 1-64 letters, digits, - or _",
        ),
        (
            '{"goal": "a", "hooks": [{"event": "Nope", "command": "x"}]}\n',
            "line 1: hooks:",
        ),
        ("\n\n", "no goals in the file"),
        (
            '{"goal": "a", "batch_max_cost": 5}\n',
            "line 1: batch_max_cost is the whole batch's budget: give --batch-max-cost USD"
            " on the command line (a line's max_cost is its run's own budget)",
        ),
    ],
)
def test_a_bad_goals_file_is_refused_naming_the_line(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(GoalsError, match="^" + str(tmp_path)) as caught:
        read_goals(goals(tmp_path, text), DEFAULTS)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


ID_RULE = "a run id (1-128 letters, digits, '.', '_' or '-', the first a letter or digit)"


@pytest.mark.parametrize(
    "run_id",
    [
        "\x1b]0;pwned\x07",  # a window title
        "ok\x1b[2J",  # clear the screen
        "ok\x9bm",  # a C1 CSI
        "ok\u202egnp.exe",  # a bidi override
        "line\nbreak",
        "a b",
        "",
        ".",
        "..",
        "../escape",
        "a/b",
        ".hidden",
        "-rf",
        "_x",
        "é",
        "x" * 129,
    ],
)
def test_a_run_id_outside_the_safe_set_is_refused_in_one_inert_line(
    tmp_path: Path, run_id: str
) -> None:
    path = goals(tmp_path, '{"goal": "fine"}\n' + json.dumps({"goal": "x", "id": run_id}) + "\n")
    with pytest.raises(GoalsError) as caught:
        read_goals(path, DEFAULTS)
    message = str(caught.value)
    assert message.startswith(f"{path} line 2: 'id' must be {ID_RULE}, not ")
    assert visible(message) == message  # json.dumps showed the id with its escapes
    assert "\n" not in message


@pytest.mark.parametrize("run_id", ["a", "Z9", "run-1.2_b", "x" * 128, "2026.01.01-x"])
def test_a_run_id_in_the_safe_set_is_taken(tmp_path: Path, run_id: str) -> None:
    path = goals(tmp_path, json.dumps({"goal": "x", "id": run_id}) + "\n")
    assert [s.run_id for s in read_goals(path, DEFAULTS)] == [run_id]


def test_made_up_run_ids_are_in_the_safe_set(tmp_path: Path) -> None:
    path = goals(tmp_path, '{"goal": "a"}\n{"goal": "\\u001b]0;x\\u0007"}\n')
    for prefix in (None, "20261204-042209-be6410"):
        specs = read_goals(path, DEFAULTS, id_prefix=prefix)
        assert all(RUN_ID.fullmatch(s.run_id) for s in specs)


def test_a_line_names_its_mcp_servers_as_mcp_does_or_as_the_run_records_them(
    tmp_path: Path,
) -> None:
    record = {
        "name": "web",
        "transport": "http",
        "url": "https://mcp.example/mcp",
        "headers": ["Authorization"],
    }
    line = {"goal": "a", "mcp_servers": ["files=npx files-server --root .", record]}
    (run,) = read_goals(goals(tmp_path, json.dumps(line) + "\n"), DEFAULTS)
    assert run.settings.mcp_servers == (
        {
            "name": "files",
            "transport": "stdio",
            "command": "npx",
            "args": ["files-server", "--root", "."],
            "env": [],
        },
        record,  # header names only: each worker gives the values from its environment
    )


def test_a_lines_subagents_are_definitions_with_general_beside_them(tmp_path: Path) -> None:
    line = {
        "goal": "a",
        "subagents": [
            {"name": "reader", "description": "Reads.", "prompt": "Read.", "tools": ["Read"]}
        ],
    }
    (run,) = read_goals(goals(tmp_path, json.dumps(line) + "\n"), DEFAULTS)
    reader, general = run.settings.subagents
    assert (reader.name, reader.tools, reader.prompt) == ("reader", ("Read",), "Read.")
    assert general.name == "general"
