"""The `ruizn` command.

Start-up matters: only click and the core are imported here. anyio, the SDK and the tools
are imported inside the commands that need them, so `--help`, `replay`, `runs` and `show`
never pay for them.
"""

from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

import click

from ruizn import __version__

DEFAULT_MODEL = "claude-sonnet-4-5"
DEFAULT_SYSTEM = (
    "You are ruizn, a careful assistant working in the user's workspace. Use the tools to"
    " look at files instead of guessing, and answer concisely in the language of the request."
)

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_MAX_STEPS, EXIT_CANCELLED = 0, 1, 2, 3, 130
# Keyed by Status values (a StrEnum hashes as its value): importing the state module here
# would put attrs on the path of `ruizn --help`.
EXIT_CODES = {
    "success": EXIT_OK,
    "error": EXIT_ERROR,
    "max_steps": EXIT_MAX_STEPS,
    "cancelled": EXIT_CANCELLED,
    "running": EXIT_ERROR,
}


class UsageFailure(click.UsageError):
    """A bad argument found after parsing (e.g. an empty goal)."""


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    click.echo(f"ruizn: error: {message}", err=True)
    raise SystemExit(code)


def _run_options(f: Any) -> Any:
    options = [
        click.option("--goal", help="What ruizn should do."),
        click.option(
            "--model",
            envvar="RUIZN_MODEL",
            default=DEFAULT_MODEL,
            show_default=True,
            help="Claude model id (env RUIZN_MODEL); 'test' is the built-in offline model.",
        ),
        click.option(
            "--max-steps",
            type=click.IntRange(min=1),
            default=20,
            show_default=True,
            help="Most model calls in the run.",
        ),
        click.option(
            "--max-tokens",
            type=click.IntRange(min=1),
            default=4096,
            show_default=True,
            help="max_tokens of each model call.",
        ),
        click.option("--system", default=DEFAULT_SYSTEM, help="System prompt."),
        click.option(
            "--workspace",
            type=click.Path(exists=True, file_okay=False),
            default=".",
            help="Folder the tools may read (default: the current directory).",
        ),
        click.option(
            "--log-dir",
            type=click.Path(),
            default=None,
            help="Root of the run logs (default: WORKSPACE/.ruizn/runs).",
        ),
        click.option(
            "--read-timeout",
            type=click.FloatRange(min=0.1),
            default=60.0,
            show_default=True,
            help="Seconds a model stream may stay silent before the call is retried.",
        ),
        click.option(
            "--max-retries",
            type=click.IntRange(min=0),
            default=4,
            show_default=True,
            help="Retries of a failed model call (429, 5xx, overloaded, broken stream).",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ruizn")
@_run_options
@click.pass_context
def cli(ctx: click.Context, /, goal: str | None, **options: Any) -> None:
    """ruizn: stream Claude, run the tools it asks for, log every event.

    `ruizn --goal TEXT` is `ruizn run --goal TEXT`.
    """
    if ctx.invoked_subcommand is not None:
        return
    if goal is None:
        click.echo(ctx.get_help())
        raise SystemExit(EXIT_USAGE)
    raise SystemExit(_run(goal=goal, **options))


@cli.command("run")
@_run_options
def run_command(goal: str | None, **options: Any) -> None:
    """Run an agent on GOAL until the model ends its turn or --max-steps is reached."""
    if goal is None:
        raise UsageFailure("missing option '--goal'")
    raise SystemExit(_run(goal=goal, **options))


def _run(
    *,
    goal: str,
    model: str,
    max_steps: int,
    max_tokens: int,
    system: str,
    workspace: str,
    log_dir: str | None,
    read_timeout: float,
    max_retries: int,
) -> int:
    # Imported here, not at the top: pathlib alone costs ~10 ms of `ruizn --help`.
    from pathlib import Path

    from ruizn.shell.session import new_run, run_id_now

    if not goal.strip():
        raise UsageFailure("--goal must not be empty")
    if not model.strip():
        raise UsageFailure("--model must not be empty")
    if model != "test" and not os.environ.get("ANTHROPIC_API_KEY"):
        fail("ANTHROPIC_API_KEY is not set: set it, or try --model test (offline)")
    folder = Path(workspace).resolve()
    root = Path(log_dir) if log_dir is not None else folder / ".ruizn" / "runs"
    run_id = run_id_now()
    return new_run(
        run_id=run_id,
        log_path=root / run_id / "events.jsonl",
        goal=goal,
        model=model,
        max_steps=max_steps,
        max_tokens=max_tokens,
        system=system,
        workspace=folder,
        read_timeout=read_timeout,
        max_retries=max_retries,
    )


@cli.command("replay")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print the final state as JSON.")
@click.option("--log-dir", type=click.Path(), default=None, help="Root of the runs.")
# WIRING(fleet): --db reads the run from a fleet's database.
@click.option("--db", envvar="RUIZN_DB", default=None, help="A fleet's database (env RUIZN_DB).")
def replay_command(run: str, as_json: bool, log_dir: str | None, db: str | None) -> None:
    """Rebuild RUN's state from its log and print its transcript (no network)."""
    if db is not None:  # WIRING(fleet)
        from ruizn.fleet.commands import replay_db

        raise SystemExit(replay_db(db, run, as_json=as_json))
    from ruizn.shell.logs import replay_run

    raise SystemExit(replay_run(run, log_dir=log_dir, as_json=as_json))


@cli.command("resume")
@click.argument("run")
@click.option("--max-steps", type=click.IntRange(min=1), default=None, help="A new step limit.")
@click.option("--log-dir", type=click.Path(), default=None, help="Root of the runs.")
@click.option(
    "--read-timeout", type=click.FloatRange(min=0.1), default=60.0, help="See `ruizn run`."
)
@click.option("--max-retries", type=click.IntRange(min=0), default=4, help="See `ruizn run`.")
def resume_command(
    run: str, max_steps: int | None, log_dir: str | None, read_timeout: float, max_retries: int
) -> None:
    """Continue RUN where it stopped, appending to the same log."""
    from ruizn.shell.resume import resume

    raise SystemExit(
        resume(
            run,
            log_dir=log_dir,
            max_steps=max_steps,
            read_timeout=read_timeout,
            max_retries=max_retries,
        )
    )


@cli.command("runs")
@click.option("--log-dir", type=click.Path(), default=None, help="Root of the runs.")
# WIRING(fleet): --db lists a fleet's runs.
@click.option("--db", envvar="RUIZN_DB", default=None, help="A fleet's database (env RUIZN_DB).")
def runs_command(log_dir: str | None, db: str | None) -> None:
    """List the runs in the log dir, newest first."""
    if db is not None:  # WIRING(fleet)
        from ruizn.fleet.commands import runs_db

        raise SystemExit(runs_db(db))
    from ruizn.shell.logs import list_runs

    raise SystemExit(list_runs(log_dir))


@cli.command("show")
@click.argument("run")
@click.option("--log-dir", type=click.Path(), default=None, help="Root of the runs.")
# WIRING(fleet): --db reads the run from a fleet's database.
@click.option("--db", envvar="RUIZN_DB", default=None, help="A fleet's database (env RUIZN_DB).")
def show_command(run: str, log_dir: str | None, db: str | None) -> None:
    """Summarise one run: goal, model, status, steps, tools, usage and cache ratio."""
    if db is not None:  # WIRING(fleet)
        from ruizn.fleet.commands import show_db

        raise SystemExit(show_db(db, run))
    from ruizn.shell.logs import show_run

    raise SystemExit(show_run(run, log_dir))


# WIRING(fleet): batch, worker and submit. The module imports only click; DBOS loads inside
# the commands, so `ruizn --help` and single runs never import it.
from ruizn.fleet.commands import register as _register_fleet  # noqa: E402

_register_fleet(cli)


def main() -> None:
    try:
        code = cli.main(standalone_mode=False, prog_name="ruizn")
    except click.UsageError as exc:
        click.echo(f"ruizn: error: {exc.format_message()}", err=True)
        code = EXIT_USAGE
    except click.Abort:
        code = EXIT_CANCELLED
    except KeyboardInterrupt:
        code = EXIT_CANCELLED
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    _quiet_flush()
    sys.exit(code if isinstance(code, int) else 0)


def _quiet_flush() -> None:
    """A reader that went away (`| head -1`) must not turn into a traceback at exit."""
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
