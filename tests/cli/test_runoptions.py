"""A run's options reach its settings through one typed record (`RunOptions`): every option
the run commands take is a field of it, and a field the settings also have starts from the
settings' own default, so an option left out (`ruizn tools` gives few) means what it means
to a library caller."""

from __future__ import annotations

import attrs
import click
import pytest

from ruizn.cli.agents_cmd import AGENT_OPTIONS
from ruizn.cli.fleet import batch_command, submit_command
from ruizn.cli.run_cmd import run_command
from ruizn.cli.runoptions import RunOptions, settings_from_cli
from ruizn.cli.session import chat_command
from ruizn.settings import RunSettings

# What a command takes besides a run's settings: where the runs go, the goal, who vouches.
_NOT_SETTINGS = {"goal", "log_dir", "trust", "otlp", "profile", *AGENT_OPTIONS}


@pytest.mark.parametrize("command", [run_command, chat_command])
def test_every_option_of_a_run_command_is_a_field_of_the_record(command: click.Command) -> None:
    taken = {p.name for p in command.params if isinstance(p, click.Option) and p.expose_value}
    assert taken - _NOT_SETTINGS == {f.name for f in attrs.fields(RunOptions)}


@pytest.mark.parametrize("command", [batch_command, submit_command])
def test_a_fleet_command_takes_the_record_but_the_workspace(command: click.Command) -> None:
    taken = {p.name for p in command.params if isinstance(p, click.Option) and p.expose_value}
    record = {f.name for f in attrs.fields(RunOptions)} - {"workspace"}
    assert record <= taken


def test_the_record_starts_from_the_settings_defaults() -> None:
    own = {f.name: f.default for f in attrs.fields(RunSettings)}
    shared = [f for f in attrs.fields(RunOptions) if f.name in own]
    assert len(shared) > 20
    for field in shared:
        assert field.default == own[field.name], field.name


def test_no_options_make_the_default_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RUIZN_RETRY_BASE_DELAY", raising=False)
    settings, servers = settings_from_cli(RunOptions())
    assert servers == ()
    # The command line's own defaults: plug-ins load (a library caller asks for them).
    assert settings == RunSettings(plugins=True)
