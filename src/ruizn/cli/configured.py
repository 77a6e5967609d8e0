"""Config files on the command line: a run's options from the user's config.toml (and a
`--profile`), the workspace's project file, then the command line; and `ruizn config`,
which prints the effective options and where each came from."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from ruizn.cli.exits import fail
from ruizn.configlayers import (
    COMMAND_LINE,
    DEFAULT_SOURCE,
    OPTIONS,
    ConfigFileError,
    Layer,
    Raise,
    effective,
    project_layer,
    project_raises,
    user_layers,
)
from ruizn.effects.userconfig.reader import PROJECT_FILE, read_toml, user_config_path

_FROM_THE_USER = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def layers_for(
    workspace: str, profile: str | None
) -> tuple[tuple[Layer, ...], Layer | None, tuple[str, ...]]:
    """The person's config layers, lowest first; the project file's layer (if there is
    one); and the project file's refusals."""
    path = user_config_path(os.environ)
    document = read_toml(path, required=bool(os.environ.get("RUIZN_CONFIG")))
    if document is None and profile is not None:
        raise ConfigFileError(f"--profile {profile}: there is no config file {path}")
    layers = user_layers(document, str(path), profile) if document is not None else ()
    project = Path(workspace) / PROJECT_FILE
    found = read_toml(project)
    if found is None:
        return layers, None, ()
    layer, refused = project_layer(found, str(project))
    return layers, layer, refused


def configured(
    options: dict[str, Any], *, workspace: str, profile: str | None
) -> dict[str, tuple[Any, str]]:
    """`options` (click's values) with each one the command line did not give taken from the
    config files, in place; returns every option's value and source. One line per refusal
    on stderr; a bad file or value ends the command (exit 2) naming it."""
    ctx = click.get_current_context()
    params = {p.name: p for p in ctx.command.params if p.name in options and p.name in OPTIONS}
    given = {n: options[n] for n in params if ctx.get_parameter_source(n) in _FROM_THE_USER}
    defaults = {n: options[n] for n in params if n not in given}
    try:
        layers, project, refused = layers_for(workspace, profile)
    except ConfigFileError as exc:
        fail(str(exc))
    for line in refused:
        click.echo(f"ruizn: {line}", err=True)
    if project is not None:
        person = effective(layers, given, defaults)
        layers = (*layers, _tightened(ctx, params, project, person))
    merged = effective(layers, given, defaults)
    out: dict[str, tuple[Any, str]] = {}
    for name, (raw, source) in merged.items():
        if name not in params:
            continue  # an option this command does not take (`ruizn tools`: no model)
        value = (
            raw
            if source in (DEFAULT_SOURCE, COMMAND_LINE)
            else _cast(ctx, params[name], raw, source)
        )
        options[name] = value
        out[name] = (value, source)
    return out


def _tightened(
    ctx: click.Context,
    params: dict[str, click.Parameter],
    project: Layer,
    person: dict[str, tuple[Any, str]],
) -> Layer:
    """The project file's layer without the values that would loosen the person's own,
    unless the person, at a terminal, says yes to them (shown first)."""

    def typed(name: str, value: Any, where: str) -> Any:
        if where in (DEFAULT_SOURCE, COMMAND_LINE) or name not in params:
            return value
        return _cast(ctx, params[name], value, where)

    values = {n: typed(n, v, project.where) for n, v in project.values.items()}
    theirs = {n: (typed(n, v, where), where) for n, (v, where) in person.items()}
    raises = project_raises(values, theirs)
    if not raises or _yes_to(project.where, raises):
        return Layer(where=project.where, values=values)
    from ruizn.terminal import visible

    for up in raises:
        click.echo(
            visible(
                f"ruizn: ignored: {project.where} sets {up.name} {_shown(up.project)}, over"
                f" your {_shown(up.person)} ({up.person_source}): a file in the workspace may"
                " only tighten your settings; say yes at a terminal, or set it yourself"
            ),
            err=True,
        )
    dropped = {up.name for up in raises}
    return Layer(where=project.where, values={n: v for n, v in values.items() if n not in dropped})


def _yes_to(where: str, raises: tuple[Raise, ...]) -> bool:
    """Whether the person at the terminal takes the raises (shown whole); False without one."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return False
    from ruizn.terminal import revealed

    click.echo(f"ruizn: {revealed(where)} would raise your settings:", err=True)
    for up in raises:
        click.echo(
            revealed(
                f"  {up.name}: {_shown(up.person)} ({up.person_source}) -> {_shown(up.project)}"
            ),
            err=True,
        )
    click.echo("use them in this run? [y/N] ", err=True, nl=False)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _cast(ctx: click.Context, param: click.Parameter, value: Any, where: str) -> Any:
    """A file's value through the option's own type (the checks the command line gets)."""
    name = param.name
    if getattr(param, "is_flag", False) and not isinstance(value, bool):
        fail(f"{where}: {name} must be true or false, not {value!r}")
    if param.multiple and not (
        isinstance(value, list) and all(isinstance(item, str) for item in value)
    ):
        fail(f"{where}: {name} must be a list of strings")
    if isinstance(value, dict | list) and not param.multiple:
        fail(f"{where}: {name} must be a single value")
    try:
        return param.type_cast_value(ctx, value)
    except click.BadParameter as exc:
        fail(f"{where}: {name}: {exc.message}")


def _shown(value: Any) -> str:
    if isinstance(value, tuple | list):
        return ", ".join(map(str, value)) or "(none)"
    if value is None:
        return "(none)"
    text = " ".join(str(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def config_command_of(
    run_options: Callable[[Callable[..., None]], Callable[..., None]],
) -> click.Command:
    """`ruizn config`: it takes `ruizn run`'s options, so it shows what a run with them
    would get."""

    @click.command("config")
    @click.option("--json", "as_json", is_flag=True, help="As a JSON object.")
    @run_options
    def config_command(as_json: bool, goal: str | None, **options: Any) -> None:
        """The effective run options and where each came from (default, your config file,
        a profile, the workspace's .ruizn/config.toml, the command line)."""
        import json

        from ruizn.terminal import visible

        profile = options.pop("profile", None)
        workspace = options.get("workspace", ".")
        found = configured(options, workspace=workspace, profile=profile)
        if as_json:
            rows = {k: {"value": v, "from": s} for k, (v, s) in sorted(found.items())}
            click.echo(json.dumps(rows, indent=2, default=list))
            return
        width = max(map(len, found))
        for name in sorted(found):
            value, source = found[name]
            click.echo(visible(f"{name:<{width}}  {_shown(value)}  ({source})"))

    return config_command
