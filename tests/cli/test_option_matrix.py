"""Every command x every top-level option: an option given before a command is never dropped.

It goes on to the command when the command takes an option of that name (the command sees
exactly what `ruizn CMD OPT VALUE` gives it), and is otherwise exit 2 with one line naming
the option and where it belongs. The matrix is made from click's own command objects, so a
new command or a new option is covered without touching this file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import pytest

from ruizn.cli.main import COMMANDS, cli, main
from ruizn.cli.main import command as command_named
from ruizn.cli.options import option_named
from tests.cli.conftest import cli_env, run_cli

EXIT_USAGE = 2


def _commands() -> list[tuple[str, click.Command]]:
    return [(name, command_named(name)) for name in sorted(COMMANDS)]


def _top_options() -> list[click.Option]:
    return [
        param
        for param in cli.params
        if isinstance(param, click.Option) and param.expose_value and param.name
    ]


def _flag(option: click.Option) -> str:
    return max(option.opts, key=lambda opt: (opt.startswith("--"), len(opt)))


def _value(option: click.Option, tmp: Path) -> list[str]:
    """A command line giving `option` a value that differs from its default."""
    if option.is_flag:
        return [_flag(option)]
    return [_flag(option), _text(option, tmp)]


def _text(option: click.Parameter, tmp: Path) -> str:
    kind = option.type
    if isinstance(kind, click.Choice):
        choices = [str(choice) for choice in kind.choices if choice != option.default]
        text = choices[-1]
    elif isinstance(kind, click.types.IntParamType) or option.name in ("max_context", "compact_at"):
        text = "7"
    elif isinstance(kind, click.types.FloatParamType):
        text = "2.5"
    elif isinstance(kind, click.Path):
        text = str(tmp if kind.dir_okay else tmp / "goals.jsonl")
    else:
        text = "x=ruizn-no-such-command" if option.multiple else "some-value"
    return text


def _required(command: click.Command, tmp: Path) -> list[str]:
    """The arguments and options the command cannot go without (placeholders)."""
    words: list[str] = []
    for param in command.params:
        if isinstance(param, click.Option) and param.required:
            words += [_flag(param), _text(param, tmp)]
    for param in command.params:
        if isinstance(param, click.Argument) and param.required:
            words += [_text(param, tmp)] * max(param.nargs, 1)
    return words


MATRIX = [
    pytest.param(name, option.name, id=f"{name}-{option.name}")
    for name, _command in _commands()
    for option in _top_options()
]


def _invoke(
    args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any] | None, str]:
    """Run `ruizn ARGS` in process, each command's work replaced by a recorder of what
    click hands it."""
    seen: dict[str, Any] = {}

    def recorder(*_args: Any, **kwargs: Any) -> None:
        seen.update(kwargs)

    for _name, command in _commands():
        monkeypatch.setattr(command, "callback", recorder)
    monkeypatch.setattr(sys, "argv", ["ruizn", *args])
    for key in ("RUIZN_MODEL", "RUIZN_DB"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(SystemExit) as stopped:
        main()
    err = capsys.readouterr().err
    code = stopped.value.code
    return (code if isinstance(code, int) else 0), (seen or None), err


@pytest.mark.parametrize(("name", "option_name"), MATRIX)
def test_an_option_before_a_command_applies_or_is_refused(
    name: str,
    option_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    command = command_named(name)
    option = next(param for param in _top_options() if param.name == option_name)
    given = _value(option, tmp_path)
    code, seen, err = _invoke([*given, name, *_required(command, tmp_path)], monkeypatch, capsys)
    target = option_named(command, option_name)
    if target is None:
        assert code == EXIT_USAGE, (code, err)
        assert seen is None  # the command never ran
        assert len(err.splitlines()) == 1, err
        assert f"{_flag(option)} is not an option of `ruizn {name}`" in err
        takers = [n for n, c in _commands() if option_named(c, option_name) is not None]
        for taker in takers:
            assert taker in err
        return
    assert code == 0, err
    assert seen is not None
    # Exactly what the command gets with the option after its name...
    _, after, _ = _invoke([name, *given, *_required(command, tmp_path)], monkeypatch, capsys)
    assert after is not None
    assert seen == after
    # ...and not what it gets without it: the option reached the command.
    _, without, _ = _invoke([name, *_required(command, tmp_path)], monkeypatch, capsys)
    assert without is not None
    assert seen[option_name] != without[option_name]


def test_the_matrix_covers_the_commands_and_options_users_meet() -> None:
    names = {name for name, _ in _commands()}
    assert {"run", "tools", "runs", "show", "resume", "view", "batch"} <= names
    options = {option.name for option in _top_options()}
    assert {"model", "mcp", "tools", "no_plugins", "goal", "workspace", "otlp"} <= options


def test_both_places_add_up_for_a_repeatable_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, seen, err = _invoke(
        ["--tool", "a.py:a", "tools", "--tool", "b.py:b"], monkeypatch, capsys
    )
    assert code == 0, err
    assert seen is not None
    assert seen["tools"] == ("a.py:a", "b.py:b")


def test_an_environment_variable_is_no_typed_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # RUIZN_MODEL set in a shell's profile must not make `ruizn tools` an error.
    seen: dict[str, Any] = {}
    monkeypatch.setattr(command_named("tools"), "callback", lambda **kw: seen.update(kw))
    monkeypatch.setattr(sys, "argv", ["ruizn", "tools"])
    monkeypatch.setenv("RUIZN_MODEL", "test")
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code in (0, None), capsys.readouterr().err
    assert seen


# The issue's own examples, through the real process.


@pytest.mark.slow
def test_model_before_run_is_the_runs_model(workspace: Path) -> None:
    # Before: "ANTHROPIC_API_KEY is not set ... try --model test", the flag that was given.
    env = {k: v for k, v in cli_env(None).items() if k != "ANTHROPIC_API_KEY"}
    result = run_cli(["--model", "test", "run", "--goal", "hi"], workspace=workspace, env=env)
    assert result.code == 0, result.stderr
    assert result.events()[0]["settings"]["model"] == "test"


@pytest.mark.slow
def test_tool_before_tools_is_listed(workspace: Path) -> None:
    (workspace / "shout.py").write_text(
        "import ruizn\n\n\n@ruizn.tool(read_only=True)\ndef shout(text: str) -> str:\n"
        '    """Say it loud.\n\n    Args:\n        text: What to say.\n    """\n'
        "    return text.upper()\n",
        encoding="utf-8",
    )
    result = run_cli(["--tool", "shout.py:shout", "tools"], workspace=workspace)
    assert result.code == 0, result.stderr
    assert result.stdout.startswith("shout") or "\nshout  (" in result.stdout


@pytest.mark.slow
def test_mcp_before_tools_starts_the_server(workspace: Path) -> None:
    # Before: the built-ins listed, exit 0, the server never tried.
    proc = run_cli(["--mcp", "x=ruizn-no-such-command", "tools"], workspace=workspace)
    assert proc.code == EXIT_USAGE
    assert proc.stderr.strip() == (
        "ruizn: error: MCP server x: command not found: ruizn-no-such-command"
    )


@pytest.mark.slow
def test_model_before_tools_says_where_it_belongs(workspace: Path) -> None:
    result = run_cli(["--model", "test", "tools"], workspace=workspace)
    assert result.code == EXIT_USAGE
    assert result.stdout == ""
    assert result.stderr == (
        "ruizn: error: --model is not an option of `ruizn tools`; it belongs to ruizn run,"
        " batch, config, submit\n"
    )
