"""The `ruizn` command: the table of its commands, the group, and `main`.

Start-up matters: only click, the options and their plain defaults are imported here. Each
command lives in a module by what it does (run_cmd, tools_cmd, log_cmd, resume_cmd, fleet,
models, configured) and is imported only when it is invoked: `ruizn --help` lists the
one-line helps of `COMMANDS` without importing any of them, and anyio, the SDK and the
tools load inside the commands that need them. Library errors become exit codes here and
only here.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, NamedTuple

import click

from ruizn.cli.common import otlp_option, quiet_flush
from ruizn.cli.exits import EXIT_CANCELLED, EXIT_OK, EXIT_USAGE, Exit, echo_error
from ruizn.cli.options import LONE_COMMAND, TopGroup, run_options
from ruizn.version import __version__

__all__ = ["COMMANDS", "CommandEntry", "cli", "command", "main"]


class CommandEntry(NamedTuple):
    """A command: where it is ("module:attribute", a click command or a function that makes
    one), its one-line help as `ruizn --help` shows it, and whether it may talk to the API
    or an MCP server (then the SDK's log lines are routed through ruizn's redacting handler
    before it runs; see sdklog)."""

    target: str
    help: str
    sdk: bool = False


_CLI = "ruizn.cli."
# Every command of `ruizn`. tests/cli/test_commands.py holds each help equal to the
# command's own first sentence, so the two cannot drift.
COMMANDS: dict[str, CommandEntry] = {
    "run": CommandEntry(
        _CLI + "run_cmd:run_command",
        "Run an agent on GOAL until the model ends its turn or --max-steps is reached.",
        sdk=True,
    ),
    "tools": CommandEntry(
        _CLI + "tools_cmd:tools_command",
        "List every available tool: its name, where it comes from, whether it only reads,"
        " and its input schema.",
        sdk=True,
    ),
    "agents": CommandEntry(
        _CLI + "agents_cmd:agents_command",
        "List the subagents a run here could start: name, where each is defined, its tools,"
        " model and description (a workspace's are marked: they run only once accepted).",
    ),
    "chat": CommandEntry(
        _CLI + "session:chat_command",
        "Open a session at the terminal: each message goes on in the same run (RUN, or a"
        " new one), with slash commands (/help).",
        sdk=True,
    ),
    "replay": CommandEntry(
        _CLI + "log_cmd:replay_command",
        "Rebuild RUN's state from its log and print its transcript (no network).",
    ),
    "resume": CommandEntry(
        _CLI + "resume_cmd:resume_command",
        "Continue RUN where it stopped, appending to the same log (and to its MCP servers).",
        sdk=True,
    ),
    "continue": CommandEntry(
        _CLI + "resume_cmd:continue_command",
        "Add MESSAGE to RUN, a run that ended, and go on in the same log.",
        sdk=True,
    ),
    "fork": CommandEntry(
        _CLI + "resume_cmd:fork_command",
        "Write a new run holding RUN's events up to SEQ, and print its id.",
        sdk=True,
    ),
    "compact": CommandEntry(
        _CLI + "compact_cmd:compact_command",
        "Compact RUN, a run that stopped: its history becomes one summary, recorded in its log.",
        sdk=True,
    ),
    "runs": CommandEntry(
        _CLI + "log_cmd:runs_command",
        "List the runs, newest first: id, status, steps, time, tokens, cost, goal.",
    ),
    "show": CommandEntry(
        _CLI + "log_cmd:show_command",
        "Summarise one run: goal, model, status, steps, tools, usage, cost (per step too) and"
        " cache ratio.",
    ),
    "rerun": CommandEntry(
        _CLI + "resume_cmd:rerun_command",
        "Drive RUN again as a new run: its model's replies come from the recording (no"
        " network, no key), its tools run for real in a scratch copy of the files, and each"
        " request is compared with the recorded one.",
        sdk=True,
    ),
    "diff": CommandEntry(
        _CLI + "log_cmd:diff_command",
        "Compare RUN_A and RUN_B event by event, ignoring what must differ (run ids, times,"
        ' durations, request ids, the workspace path): exit 0 "no difference", or exit 1'
        " with the first differing seq of each and what each run came to.",
    ),
    "rewind": CommandEntry(
        _CLI + "files_cmd:rewind_command",
        "Put the workspace's files back as they were at one of RUN's checkpoints.",
    ),
    "checkpoints": CommandEntry(
        _CLI + "files_cmd:checkpoints_group",
        "The checkpoint store: `checkpoints gc` deletes the checkpoints no run folder needs.",
    ),
    "view": CommandEntry(
        _CLI + "log_cmd:view_command",
        "Write RUN as one self-contained HTML page: its model and tool calls on a timeline,"
        " beside the transcript.",
    ),
    "export": CommandEntry(
        _CLI + "log_cmd:export_command",
        "Send RUN's spans (OpenTelemetry GenAI conventions) to a collector over OTLP/HTTP.",
    ),
    # The fleet (ruizn.fleet): DBOS and SQLAlchemy load inside these commands.
    "batch": CommandEntry(
        _CLI + "fleet:batch_command",
        "Run every goal of GOALS.jsonl, N at once, on this machine (SQLite in the user's"
        " state directory, one database per workspace, never in the workspace).",
        sdk=True,
    ),
    "worker": CommandEntry(
        _CLI + "fleet:worker_command",
        "Take runs from the fleet's database until Ctrl-C or SIGTERM.",
        sdk=True,
    ),
    "submit": CommandEntry(
        _CLI + "fleet:submit_command",
        "Queue GOALS.jsonl (or --goal TEXT) on the fleet; prints the run ids.",
    ),
    # Evals (ruizn.evals): datasets of goals run and scored.
    "eval": CommandEntry(
        _CLI + "eval_cmd:eval_command",
        "Run every case of DATASET (pydantic-evals' YAML or JSON format) and score each run:"
        " exit 0 when the pass rate meets --min-pass, 1 when not.",
        sdk=True,
    ),
    "models": CommandEntry(
        _CLI + "models:models_command",
        "The models this key can use (the Models API) and their prices (genai-prices).",
        sdk=True,
    ),
    "config": CommandEntry(
        _CLI + "main:config_command",
        "The effective run options and where each came from (default, your config file, a"
        " profile, the workspace's .ruizn/config.toml, the command line).",
    ),
}


def load(entry: CommandEntry) -> click.Command:
    """The command an entry names, imported now."""
    module, _, attribute = entry.target.partition(":")
    found = getattr(importlib.import_module(module), attribute)
    return found if isinstance(found, click.Command) else found()  # a function: it makes one


class LazyGroup(TopGroup):
    """The top group over `COMMANDS`: it lists their one-line helps, and imports a command
    only when it is asked for (invoked, or its own --help)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.commands[cmd_name] = load(COMMANDS[cmd_name])
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own layout (Group.format_commands), from the table's helps.
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        rows = [(name, _short(COMMANDS[name].help, limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _short(text: str, limit: int) -> str:
    # click's own shortening, through its public face (a command with that help).
    return click.Command(None, help=text).get_short_help_str(limit)


def config_command() -> click.Command:
    """`ruizn config`: it takes `ruizn run`'s options (configured.py cannot import them)."""
    from ruizn.cli.configured import config_command_of

    return config_command_of(run_options)


def command(name: str) -> click.Command:
    """The command `name` (imported if it was not yet)."""
    found = cli.get_command(click.Context(cli), name)
    if found is None:
        raise KeyError(name)
    return found


@click.group(
    cls=LazyGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="ruizn")
@run_options
@otlp_option
@click.pass_context
def cli(ctx: click.Context, /, goal: str | None, **options: Any) -> None:
    """ruizn: stream Claude, run the tools it asks for, log every event.

    `ruizn GOAL...` and `ruizn --goal TEXT` are `ruizn run ...` (when GOAL's first word is
    no command). An option given before a command goes on to it (`ruizn --mcp x=cmd
    tools`), or is refused if the command does not take it.
    """
    name = ctx.invoked_subcommand
    if name is not None:
        if COMMANDS[name].sdk:
            _route_sdk_logs()
        return
    if goal is None:
        if sys.stdin.isatty() and sys.stdout.isatty():  # `ruizn` alone at a terminal
            _route_sdk_logs()
            from ruizn.cli.session import open_session

            if options.pop("otlp", None) is not None:
                raise click.UsageError("--otlp goes with a goal (`ruizn run`), not a session")
            raise Exit(open_session(run=None, first=None, **options))
        click.echo(ctx.get_help())
        raise Exit(EXIT_USAGE)
    _route_sdk_logs()
    from ruizn.cli.run_cmd import run_goal

    raise Exit(run_goal(goal=goal, **options))


def _route_sdk_logs() -> None:
    """Before anything can import the MCP SDK (a run, a worker's thread); only for the
    commands that may talk to the API or a server, so the read commands never import it."""
    from ruizn.cli.sdklog import install

    install()


def _goal_hint(exc: click.UsageError) -> str:
    """A command's name alone that lacks its argument may have been meant as a goal."""
    if not isinstance(exc, click.MissingParameter) or exc.ctx is None:
        return ""
    lone = exc.ctx.meta.get(LONE_COMMAND)
    return f" (for the goal {lone!r}: ruizn run {lone})" if lone else ""


def main() -> None:
    try:
        code = cli.main(standalone_mode=False, prog_name="ruizn")
    except click.UsageError as exc:
        echo_error(exc.format_message() + _goal_hint(exc))
        code = EXIT_USAGE
    except Exit as exc:
        if exc.message:
            echo_error(exc.message)
        code = exc.code
    except (click.Abort, KeyboardInterrupt):
        code = EXIT_CANCELLED
    except BrokenPipeError:
        # The reader went away (`| head -1`): not an error of ours, for every command alike.
        code = EXIT_OK
    quiet_flush()
    sys.exit(code if isinstance(code, int) else 0)
