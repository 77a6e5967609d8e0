"""Structured output: `ruizn run --output-schema` and `Agent(output_type=)` against the local
Messages API (the real SDK over HTTP)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import ruizn
from ruizn.request import build_request
from tests.cli.conftest import API_KEY, cli_env, run_cli
from tests.fakeapi import FakeAnthropic, Stream, Text, ToolUse
from tests.fakeapi.models import model_info

MODEL = "claude-sonnet-5-5"
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}


@pytest.fixture
def schema_file(workspace: Path) -> Path:
    path = workspace.parent / "schema.json"
    path.write_text(json.dumps(SCHEMA), encoding="utf-8")
    return path


def _server(script: Any, *, structured: bool = True) -> FakeAnthropic:
    """The local API, its Models API saying whether MODEL takes output_config.format."""
    info = model_info(MODEL, MODEL)
    info["capabilities"]["structured_outputs"] = {"supported": structured}
    return FakeAnthropic(script, models=(info,)).start()


def test_a_wrong_answer_is_sent_back_and_stdout_is_exactly_the_json(
    workspace: Path, schema_file: Path
) -> None:
    server = _server(
        [
            Stream((Text('{"city": "Lyon", "population": "about 500k"}'),), model=MODEL),
            Stream((Text('{"city": "Lyon", "population": 522250}'),), model=MODEL),
        ]
    )
    try:
        result = run_cli(
            ["run", "--model", MODEL, "--output-schema", str(schema_file), "Lyon?"],
            workspace=workspace,
            base_url=server.base_url,
        )
    finally:
        server.stop()
    assert result.code == 0, result.stderr
    assert result.stdout == '{"city": "Lyon", "population": 522250}\n'
    assert json.loads(result.stdout) == {"city": "Lyon", "population": 522250}
    first, second = (r.body for r in server.requests)
    format_ = {"type": "json_schema", "schema": SCHEMA}
    assert first["output_config"] == {"format": format_}
    assert second["output_config"] == {"format": format_}
    sent_back = json.dumps(second["messages"][-1])
    assert "'about 500k' is not of type 'integer'" in sent_back
    assert "$.population" in sent_back
    assert "does not match the output schema" in result.stderr  # the transcript's place
    checked = [e for e in result.events() if e["type"] == "output_checked"]
    assert [e["valid"] for e in checked] == [False, True]
    # The log alone rebuilds the output, and the requests.
    state = ruizn.replay(result.log_path)
    assert state.output == {"city": "Lyon", "population": 522250}
    assert state.output_valid
    shown = run_cli(["show", "last"], workspace=workspace)
    assert "a valid answer · schema constrained by the API" in shown.stdout
    # A rerun (offline, from the recording) makes the same checks and the same output.
    offline = cli_env(None)
    del offline["ANTHROPIC_API_KEY"]
    again = run_cli(["rerun", result.log_path.parent.name], workspace=workspace, env=offline)
    assert again.code == 0, again.stderr
    assert again.stdout.startswith("identical: rerun ")


def test_an_answer_that_never_matches_ends_output_invalid_exit_5(
    workspace: Path, schema_file: Path
) -> None:
    server = _server(lambda body, index: Stream((Text("not json at all"),), model=MODEL))
    try:
        result = run_cli(
            [
                "run",
                "--model",
                MODEL,
                "--output-schema",
                str(schema_file),
                "--output-retries",
                "1",
                "Lyon?",
            ],
            workspace=workspace,
            base_url=server.base_url,
        )
    finally:
        server.stop()
    assert result.code == 5, result.stderr
    assert result.stdout == ""  # never success, never a partial answer on stdout
    assert len(server.requests) == 2  # the first answer and one retry
    finished = result.events()[-1]
    assert finished["status"] == "output_invalid"
    assert "after 2 tries" in finished["error"]
    assert ruizn.replay(result.log_path).status.value == "output_invalid"


def test_a_model_without_structured_outputs_answers_through_the_final_tool(
    workspace: Path, schema_file: Path
) -> None:
    answer = {"city": "Lyon", "population": 522250}
    server = _server(
        [
            Stream((Text("Here it is as text."),), model=MODEL),
            Stream((ToolUse("toolu_out", "final_output", answer),), stop_reason="tool_use"),
        ],
        structured=False,
    )
    try:
        result = run_cli(
            ["run", "--model", MODEL, "--output-schema", str(schema_file), "Lyon?"],
            workspace=workspace,
            base_url=server.base_url,
        )
    finally:
        server.stop()
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout) == answer
    first = server.requests[0].body
    assert "output_config" not in first
    assert "tool_choice" not in first  # never forced: it would fail with thinking on
    tool = first["tools"][-1]
    assert tool["name"] == "final_output"
    assert tool["input_schema"]["required"] == ["city", "population"]
    assert "call the final_output tool" in json.dumps(server.requests[1].body["messages"][-1])
    assert "through the final_output tool" in run_cli(["show", "last"], workspace=workspace).stdout


class City(BaseModel):
    city: str
    population: int


def test_the_library_returns_the_typed_value(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = _server([Stream((Text('{"city": "Lyon", "population": 522250}'),), model=MODEL)])
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    try:
        agent = ruizn.Agent(MODEL, workspace=workspace, output_type=City)
        result = agent.run("Lyon?")
    finally:
        server.stop()
    assert result.status.value == "success", result.error
    assert result.output == City(city="Lyon", population=522250)
    sent = server.requests[0].body["output_config"]["format"]["schema"]
    assert sent["required"] == ["city", "population"]
    # A replayed run sends the same request (the schema and its mode are in run_started).
    assert result.log_path is not None
    assert build_request(ruizn.replay(result.log_path))["output_config"]["format"]["schema"] == sent


def test_a_bad_schema_file_is_one_line_exit_2(workspace: Path) -> None:
    bad = workspace.parent / "bad.json"
    bad.write_text('{"type": "objekt"}', encoding="utf-8")
    result = run_cli(["run", "--output-schema", str(bad), "hi"], workspace=workspace)
    assert result.code == 2
    assert "--output-schema" in result.stderr
    assert "Traceback" not in result.stderr
