"""The API key leaves the process only in its header: never in stdout, stderr, the log or a
request body, whether it comes with a stray newline or sits in a file a tool reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import API_KEY, Result, cli_env, run_cli
from tests.fakeapi import Stream, Text, ToolUse

OTHER_TOKEN = "ghp_0123456789abcdefSECRET"  # any *_TOKEN ruizn was given is a secret too


def assert_no_secret(result: Result, server: Any, *secrets: str) -> None:
    texts = {"stdout": result.stdout, "stderr": result.stderr}
    for path in (result.workspace / ".ruizn").rglob("*"):
        if path.is_file():
            texts[str(path)] = path.read_text(encoding="utf-8", errors="replace")
    for number, request in enumerate(server.requests, 1):
        texts[f"request {number} body"] = json.dumps(request.body, ensure_ascii=False)
        # The one place the key belongs (this SDK sends it as a bearer token).
        headers = {
            k: v for k, v in request.headers.items() if k not in ("x-api-key", "authorization")
        }
        texts[f"request {number} headers"] = json.dumps(headers)
    for secret in secrets:
        leaks = [where for where, text in texts.items() if secret in text]
        assert not leaks, f"the secret is in {leaks}"


@pytest.mark.parametrize("ending", ["\n", "\r\n", " "])
def test_a_key_with_surrounding_whitespace_is_refused_in_one_line(
    ending: str, workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("never asked"),))])
    env = cli_env(server.base_url, ANTHROPIC_API_KEY=API_KEY + ending)
    result = run_cli(["run", "--goal", "go"], workspace=workspace, env=env)
    assert result.code == 2
    assert result.stderr == (
        "ruizn: error: ANTHROPIC_API_KEY has whitespace at its start or end (a CR or LF from a"
        " CRLF file?): remove it and try again\n"
    )
    assert result.stdout == ""
    assert not result.new_logs
    assert server.requests == []
    assert_no_secret(result, server, API_KEY)


def _reads(*paths: str) -> list[Any]:
    """One turn per path (each reads one file), then a final answer."""
    turns: list[Any] = [
        Stream((ToolUse(f"toolu_{n}", "read_file", {"path": p}),), stop_reason="tool_use")
        for n, p in enumerate(paths)
    ]
    return [*turns, Stream((Text("Done."),))]


def test_a_secret_in_a_file_a_tool_reads_is_redacted_before_it_is_logged_or_sent(
    workspace: Path, server_factory: Any
) -> None:
    # `.env` may be refused outright by the file tools; `settings.ini` must be read, and
    # read without the secrets in it.
    secrets_text = f"ANTHROPIC_API_KEY={API_KEY}\nGITHUB_TOKEN={OTHER_TOKEN}\nDEBUG=1\n"
    (workspace / ".env").write_text(secrets_text, encoding="utf-8")
    (workspace / "settings.ini").write_text(secrets_text, encoding="utf-8")
    server = server_factory(_reads("settings.ini", ".env"))
    env = cli_env(server.base_url, GITHUB_TOKEN=OTHER_TOKEN)

    result = run_cli(["run", "--goal", "show me the settings"], workspace=workspace, env=env)

    assert result.code == 0, result.stderr
    assert len(server.requests) == 3
    assert_no_secret(result, server, API_KEY, OTHER_TOKEN)
    # The file was read and sent, only the secret values replaced.
    sent = server.requests[1].body["messages"][-1]["content"][0]
    assert sent["content"] == "ANTHROPIC_API_KEY=[redacted]\nGITHUB_TOKEN=[redacted]\nDEBUG=1\n"
    # And the key went where it belongs.
    assert all(r.headers["authorization"] == f"Bearer {API_KEY}" for r in server.requests)


def test_resume_refuses_a_key_with_a_newline_before_anything_is_sent(
    workspace: Path, server_factory: Any
) -> None:
    """resume checks the key as run does: one line, exit 2, nothing sent, nothing appended."""
    server = server_factory(_reads("README.md"))
    first = run_cli(
        ["run", "--goal", "go", "--max-steps", "1"],
        workspace=workspace,
        env=cli_env(server.base_url),
    )
    assert first.code == 3, first.stderr  # max_steps: resume has a model call to make
    log = first.log_path
    before = len(server.requests)
    size = log.stat().st_size

    env = cli_env(server.base_url, ANTHROPIC_API_KEY=API_KEY + "\n")
    result = run_cli(["resume", str(log)], workspace=workspace, env=env)
    assert_no_secret(Result(result.code, result.stdout, result.stderr, workspace), server, API_KEY)
    assert len(server.requests) == before  # the header was never sent
    assert result.code == 2, result.stderr
    assert "whitespace" in result.stderr
    assert log.stat().st_size == size
