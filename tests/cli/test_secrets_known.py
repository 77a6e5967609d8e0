"""Secrets ruizn knows never reach a terminal or a log (#28): the MCP SDK's own tracebacks
(redacted from before the SDK is imported), a value handed to a stdio server with
`--mcp-env`, a token typed into a goal or a system prompt; and `--tool MODULE:ATTR` never
lets a repository's module stand in for ruizn's own imports."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from tests.cli.conftest import API_KEY, cli_env, run_cli
from tests.fakeapi import Stream, Text
from tests.mcp_servers import DEMO

TOKEN = "ghp_TOKENthatMustNeverShow0123"


def _everything(result: Any) -> str:
    log = result.log_path.read_text() if result.log_path else ""
    return result.stdout + result.stderr + log


def test_a_server_writing_a_token_to_stdout_shows_no_traceback_and_no_token(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("Fine."),))])
    # The server says a line that is not JSON-RPC, holding the value it was handed through
    # --mcp-env (so the line proves the value arrived), then serves as usual.
    command = shlex.join(
        ["sh", "-c", f'echo "not json: $GH"; exec {shlex.quote(sys.executable)} {DEMO}']
    )
    environ = cli_env(
        server.base_url, GITHUB_TOKEN=TOKEN, RUIZN_MCP_ENV_DEMO_GH=TOKEN, COLUMNS="200"
    )
    result = run_cli(
        ["run", "--goal", "hello", "--mcp", f"demo={command}", "--mcp-env", "demo:GH"],
        workspace=workspace,
        base_url=server.base_url,
        env=environ,
    )
    assert result.code == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "not json: [redacted]" in result.stderr  # the SDK's line, as one redacted notice
    assert TOKEN not in _everything(result)
    (first,) = [json.loads(line) for line in result.log_path.read_text().splitlines()[:1]]
    (record,) = first["settings"]["mcp_servers"]
    assert record["env"] == ["GH"]  # the name, never the value


def test_mcp_env_wants_its_variable_and_never_a_value(workspace: Path) -> None:
    spec = f"demo={shlex.join([sys.executable, str(DEMO)])}"
    missing = run_cli(
        ["run", "--goal", "x", "--mcp", spec, "--mcp-env", "demo:GH"], workspace=workspace
    )
    assert missing.code == 2
    assert "$RUIZN_MCP_ENV_DEMO_GH is not set" in missing.stderr
    typed = run_cli(
        ["run", "--goal", "x", "--mcp", spec, "--mcp-env", f"demo:GH={TOKEN}"],
        workspace=workspace,
    )
    assert typed.code == 2
    assert TOKEN not in typed.stderr


def test_a_token_in_a_goal_or_system_prompt_is_redacted_in_the_log_and_views(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("Fine."),))])
    environ = cli_env(server.base_url, GITHUB_TOKEN=TOKEN)
    result = run_cli(
        ["run", "--goal", f"push with {TOKEN} and {API_KEY}", "--system", f"key {TOKEN}"],
        workspace=workspace,
        base_url=server.base_url,
        env=environ,
    )
    assert result.code == 0, result.stderr
    # The model got the text as it was typed.
    body = server.requests[0].body
    assert TOKEN in json.dumps(body)
    log = result.log_path.read_text()
    assert TOKEN not in log
    assert API_KEY not in log
    first = json.loads(log.splitlines()[0])
    assert first["goal"] == "push with [redacted] and [redacted]"
    assert first["settings"]["system"] == "key [redacted]"
    for view in (["runs"], ["show", "last"], ["replay", "last"]):
        shown = run_cli(view, workspace=workspace, env=environ)
        assert shown.code == 0, shown.stderr
        assert TOKEN not in shown.stdout + shown.stderr
    # The run is still this user's: it resumes (and the log replays) as recorded.
    again = run_cli(["resume", "last"], workspace=workspace, env=environ)
    assert again.code == 0, again.stderr
    assert "--trust" not in again.stderr


def test_a_repositorys_mcp_module_is_never_imported_by_ruizn(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("Fine."),))])
    (workspace / "mcp.py").write_text(
        "from pathlib import Path\nPath(__file__).with_name('PWNED').write_text('x')\n"
    )
    spec = f"demo={shlex.join([sys.executable, str(DEMO)])}"
    result = run_cli(
        ["run", "--goal", "x", "--tool", "os.path:basename", "--mcp", spec],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    assert not (workspace / "PWNED").exists()


def test_the_key_the_model_repeats_across_deltas_is_redacted_in_the_terminal_and_log(
    workspace: Path, server_factory: Any
) -> None:
    # 4 characters a delta: the key arrives in pieces, none of which is the key.
    server = server_factory([Stream((Text(f"Your key is {API_KEY}, keep it safe."),))])
    result = run_cli(["run", "what is my key?"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    assert API_KEY not in _everything(result)
    assert "Your key is [redacted], keep it safe." in result.stdout
    tokens = "".join(e["text"] for e in result.events() if e["type"] == "llm_token")
    assert tokens == "Your key is [redacted], keep it safe."


def test_a_secret_word_in_an_mcp_command_is_never_stored_and_asked_for_on_resume(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("Fine."),))])
    command = shlex.join(["env", f"GH_TOKEN={TOKEN}", sys.executable, str(DEMO)])
    result = run_cli(
        ["run", "--goal", "hello", "--mcp", f"demo={command}"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert result.code == 0, result.stderr
    assert TOKEN not in _everything(result)
    recorded = result.events()[0]["settings"]["mcp_servers"][0]
    assert recorded["args"][0] == "GH_TOKEN=***"
    shown = run_cli(["show", "last"], workspace=workspace)
    assert TOKEN not in shown.stdout + shown.stderr
    assert "GH_TOKEN=***" in shown.stdout
    # Going on asks for the value again, as for a header (tests/effects/mcp/test_config.py:
    # the variable gives it).
    refused = run_cli(["continue", "last", "more"], workspace=workspace, base_url=server.base_url)
    assert refused.code == 2
    assert "GH_TOKEN=*** needs its value again: set $RUIZN_MCP_ENV_DEMO_GH_TOKEN" in (
        refused.stderr
    )
    assert TOKEN not in refused.stderr
