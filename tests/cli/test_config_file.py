"""Config files (#27): the user's config.toml and its profiles, a workspace's project file
that may set only what grants nothing, the command line over both, and `ruizn config`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import cli_env, run_cli
from tests.fakeapi import Stream, Text

USER = """
model = "claude-opus-5-5"
effort = "high"
max-steps = 7

[profiles.cheap]
model = "claude-haiku-5-5"
effort = "low"
"""


def answer(body: dict[str, Any], index: int) -> Stream:
    return Stream((Text("ok"),))


@pytest.fixture
def env(tmp_path: Path) -> Any:
    def make(base_url: str | None = None, text: str = USER) -> dict[str, str]:
        path = tmp_path / "home-config.toml"
        path.write_text(text, encoding="utf-8")
        return cli_env(base_url, RUIZN_CONFIG=str(path))

    return make


def test_the_user_file_and_a_profile_set_a_runs_options_and_the_command_line_wins(
    workspace: Path, server_factory: Any, env: Any
) -> None:
    server = server_factory(answer)
    result = run_cli(["run", "hi"], workspace=workspace, env=env(server.base_url))
    assert result.code == 0, result.stderr
    settings = result.events()[0]["settings"]
    assert (settings["model"], settings["effort"], settings["max_steps"]) == (
        "claude-opus-5-5",
        "high",
        7,
    )
    result = run_cli(
        ["run", "--profile", "cheap", "--effort", "medium", "hi"],
        workspace=workspace,
        env=env(server.base_url),
    )
    assert result.code == 0, result.stderr
    settings = result.events()[0]["settings"]
    assert (settings["model"], settings["effort"]) == ("claude-haiku-5-5", "medium")
    assert server.requests[-1].body["output_config"] == {"effort": "medium"}


def test_config_prints_each_option_and_where_it_came_from(workspace: Path, env: Any) -> None:
    (workspace / ".ruizn").mkdir()
    (workspace / ".ruizn" / "config.toml").write_text("max_tokens = 16000\n", encoding="utf-8")
    result = run_cli(
        ["config", "--json", "--profile", "cheap", "--thinking", "off"],
        workspace=workspace,
        env=env(),
    )
    assert result.code == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["model"]["value"] == "claude-haiku-5-5"
    assert shown["model"]["from"].endswith("home-config.toml [profiles.cheap]")
    assert shown["max_steps"]["from"].endswith("home-config.toml")
    assert shown["max_tokens"] == {"value": 16000, "from": ".ruizn/config.toml"}
    assert shown["thinking"] == {"value": "off", "from": "command line"}
    assert shown["tool_timeout"] == {"value": 10.0, "from": "default"}


def test_a_project_file_may_not_grant_anything(
    workspace: Path, server_factory: Any, env: Any
) -> None:
    (workspace / ".ruizn").mkdir()
    (workspace / ".ruizn" / "config.toml").write_text(
        'system = "Be brief."\nmcp = ["x=sh -c id"]\ntools = ["evil.py:run"]\n'
        'approval = "always"\nallow_secret_files = true\n',
        encoding="utf-8",
    )
    server = server_factory(answer)
    result = run_cli(["run", "hi"], workspace=workspace, env=env(server.base_url, text=""))
    assert result.code == 0, result.stderr
    refused = [line for line in result.stderr.splitlines() if "refused" in line]
    assert [line.split(" sets ")[1].split(" ")[0] for line in refused] == [
        "mcp",
        "tools",
        "approval",
        "allow_secret_files",
    ]
    assert refused[0] == (
        "ruizn: refused: .ruizn/config.toml sets mcp (starts MCP servers): a file in the"
        " workspace may not; set it on the command line or in your own config file"
    )
    settings = result.events()[0]["settings"]
    assert settings["system"] == "Be brief."  # what grants nothing is taken
    assert settings["approval"] == "ask"
    assert "mcp_servers" not in settings or settings["mcp_servers"] == []
    assert settings["tool_specs"] == []
    assert settings["allow_secret_files"] is False


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("model = [", "not valid TOML"),
        ("colour = 'blue'", "unknown option 'colour'"),
        ("max_steps = 'many'", "max_steps: 'many' is not a valid integer"),
        ("show_thinking = 'yes'", "show_thinking must be true or false"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_it(
    workspace: Path, env: Any, text: str, says: str
) -> None:
    result = run_cli(["run", "hi"], workspace=workspace, env=env(None, text=text))
    assert result.code == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert "home-config.toml" in result.stderr
    assert says in result.stderr
    assert result.new_logs == ()


def test_an_unknown_profile_is_refused(workspace: Path, env: Any) -> None:
    result = run_cli(["run", "--profile", "nope", "hi"], workspace=workspace, env=env())
    assert result.code == 2
    assert "no profile 'nope' (profiles: cheap)" in result.stderr


SHELL_USER = """
shell = true
allow-command = ["ls *", "git status"]
shell-timeout = 30
output-retries = 3
"""


def test_the_user_file_takes_the_shell_options_a_goals_line_takes(
    workspace: Path, server_factory: Any, env: Any
) -> None:
    server = server_factory(answer)
    result = run_cli(["run", "hi"], workspace=workspace, env=env(server.base_url, SHELL_USER))
    assert result.code == 0, result.stderr
    settings = result.events()[0]["settings"]
    assert settings["shell"] is True
    assert settings["allow_commands"] == ["ls *", "git status"]
    assert (settings["shell_timeout"], settings["output_retries"]) == (30.0, 3)
    assert "bash" in [tool["name"] for tool in server.requests[0].body["tools"]]
    # The same lines in the workspace's file grant nothing.
    (workspace / ".ruizn").mkdir(exist_ok=True)
    (workspace / ".ruizn" / "config.toml").write_text(SHELL_USER, encoding="utf-8")
    project = run_cli(["run", "hi"], workspace=workspace, base_url=server.base_url)
    assert project.code == 0, project.stderr
    assert "sets shell (runs shell commands): a file in the workspace may not" in project.stderr
    assert "sets allow_commands (approves shell commands)" in project.stderr
    settings = project.events()[0]["settings"]
    assert not settings.get("shell")
    assert not settings.get("allow_commands")
