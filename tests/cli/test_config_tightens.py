"""A workspace's `.ruizn/config.toml` tightens, never loosens: it may lower the person's
limits, effort and thinking, never raise them (nor replace the model the person chose)
unless the person says yes at a terminal; without one, each raise is ignored in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruizn.configlayers import project_raises
from tests.cli.conftest import cli_env, run_cli
from tests.cli.terminals import Terminal
from tests.fakeapi import Stream, Text

USER = 'model = "claude-sonnet-5-5"\nmax_cost = 0.05\nmax_steps = 7\neffort = "low"\n'
CLONED = (
    'model = "claude-opus-5-5"\nmax_cost = 500\nmax_steps = 100000\neffort = "max"\n'
    'max_tokens = 100\nsystem = "Be brief."\n'
)


def answer(body: dict[str, Any], index: int) -> Stream:
    return Stream((Text("ok"),))


def setup(workspace: Path, tmp_path: Path, base_url: str) -> dict[str, str]:
    (workspace / ".ruizn").mkdir()
    (workspace / ".ruizn" / "config.toml").write_text(CLONED)
    user = tmp_path / "user-config.toml"
    user.write_text(USER)
    return cli_env(base_url, RUIZN_CONFIG=str(user))


def test_without_a_terminal_a_raise_is_ignored_in_one_line_and_a_lower_limit_taken(
    workspace: Path, tmp_path: Path, server_factory: Any
) -> None:
    server = server_factory(answer)
    environ = setup(workspace, tmp_path, server.base_url)
    done = run_cli(["run", "hi"], workspace=workspace, env=environ)
    assert done.code == 0, done.stderr
    settings = done.events()[0]["settings"]
    assert (settings["model"], settings["max_cost"], settings["max_steps"]) == (
        "claude-sonnet-5-5",
        0.05,
        7,
    )
    assert settings["effort"] == "low"
    assert (settings["max_tokens"], settings["system"]) == (100, "Be brief.")  # lower: taken
    ignored = [line for line in done.stderr.splitlines() if "ignored" in line]
    assert sorted(line.split(" sets ")[1].split(" ")[0] for line in ignored) == [
        "effort",
        "max_cost",
        "max_steps",
        "model",
    ]
    assert any(
        line.startswith("ruizn: ignored: .ruizn/config.toml sets max_cost 500.0, over your 0.05")
        for line in ignored
    ), ignored
    assert server.requests[0].body["max_tokens"] == 100


def test_the_command_line_still_wins_and_raises_nothing(
    workspace: Path, tmp_path: Path, server_factory: Any
) -> None:
    server = server_factory(answer)
    environ = setup(workspace, tmp_path, server.base_url)
    done = run_cli(
        [
            "run",
            "--max-cost",
            "1",
            "--max-steps",
            "3",
            "--effort",
            "high",
            "--model",
            "claude-haiku-5-5",
            "hi",
        ],
        workspace=workspace,
        env=environ,
    )
    assert done.code == 0, done.stderr
    assert "ignored" not in done.stderr
    settings = done.events()[0]["settings"]
    assert (settings["max_cost"], settings["max_steps"], settings["effort"]) == (1.0, 3, "high")


def test_at_a_terminal_the_raise_is_shown_and_asked(
    workspace: Path, tmp_path: Path, server_factory: Any
) -> None:
    server = server_factory(answer)
    environ = setup(workspace, tmp_path, server.base_url)
    term = Terminal(["run", "hi"], workspace, environ)
    try:
        shown = term.expect("use them in this run? [y/N]")
        assert "max_cost: 0.05 (" in shown, shown
        assert "-> 500" in shown
        assert "max_steps: 7 (" in shown
        assert "-> 100000" in shown
        term.type(b"y\n")
        assert term.finish() == 0, term.text
    finally:
        term.close()
    log = next((workspace / ".ruizn" / "runs").glob("*/events.jsonl"))
    assert '"max_steps":100000,' in log.read_text().splitlines()[0]


def test_a_raise_is_any_looser_limit_and_none_is_no_limit() -> None:
    user = "your file"
    person = {
        "max_cost": (None, user),
        "max_context": (50_000, user),
        "effort": (None, "default"),
        "thinking": ("off", user),
        "model": ("claude-sonnet-5-5", "default"),
        "tool_timeout": (10.0, "default"),
    }
    project = {
        "max_cost": 500.0,  # a limit where there was none: lower
        "max_context": 0,  # off: higher than any number
        "effort": "high",  # the API's default: not higher
        "thinking": "adaptive",
        "model": "claude-opus-5-5",  # the person chose none
        "tool_timeout": 600.0,
    }
    raised = {r.name for r in project_raises(project, person)}
    assert raised == {"max_context", "thinking", "tool_timeout"}
