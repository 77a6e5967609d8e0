"""The options every command shares, declared once: where runs are, and the options that
make a run's settings (`ruizn run`, `batch` and `submit` take the same list)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ruizn.defaults import (
    APPROVAL_MODES,
    DEFAULT_APPROVAL,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_STEPS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL,
    DEFAULT_OUTPUT_RETRIES,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_SHELL_TIMEOUT,
    DEFAULT_SYSTEM,
    DEFAULT_TOOL_CONCURRENCY,
    DEFAULT_TOOL_TIMEOUT,
    EFFORT_LEVELS,
    TEST_MODEL,
    THINKING_MODES,
)


class UsageFailure(click.UsageError):
    """A bad argument found after parsing (e.g. an empty goal)."""


class ContextLimit(click.ParamType):  # type: ignore[type-arg]
    """--max-context: a number of tokens, or `off` (0)."""

    name = "TOKENS|off"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif str(value).strip().lower() == "off":
            return 0
        else:
            try:
                number = int(str(value).replace("_", "").replace(",", ""))
            except ValueError:
                self.fail(f"{value!r} is not a number of tokens or 'off'", param, ctx)
        if number < 0:
            self.fail(f"{value!r} is below 0 (0 or 'off' turns the limit off)", param, ctx)
        return number


def _on_off(ctx: click.Context, param: click.Parameter, value: str) -> bool:
    return value == "on"


def max_cost_option(help_text: str) -> Callable[[Any], Any]:
    return click.option(
        "--max-cost",
        type=click.FloatRange(min=0, min_open=True, max=1e12),
        default=None,
        metavar="USD",
        help=help_text,
    )


def max_context_option(help_text: str) -> Callable[[Any], Any]:
    return click.option("--max-context", type=ContextLimit(), default=None, help=help_text)


# One folder type for every command's --workspace and --log-dir: a click.Path looks up its
# translated name (gettext, locale) when it is made, and 13 commands take both options.
_FOLDER = click.Path(file_okay=False)


def where_options(f: Any) -> Any:
    """--workspace and --log-dir: where runs are. Every command that reads or writes runs
    takes both, and looks where `ruizn run` with the same options writes."""
    f = click.option(
        "--log-dir",
        type=_FOLDER,
        default=None,
        help="Root of the run logs (default: WORKSPACE/.ruizn/runs).",
    )(f)
    return click.option(
        "--workspace",
        type=_FOLDER,
        default=".",
        help="The workspace folder (default: the current directory).",
    )(f)


def mcp_header_option(f: Any) -> Any:
    # A function, not a shared decorator object: click's decorators are made for one use.
    return click.option(
        "--mcp-header",
        "mcp_headers",
        multiple=True,
        metavar="NAME:KEY[=VALUE]",
        help="A header for MCP server NAME; without =VALUE it is read from"
        " $RUIZN_MCP_HEADER_<NAME>_<KEY>. Repeatable.",
    )(f)


def settings_options(f: Any) -> Any:
    """The options that make a run's settings (RunSettings), shared by `run`, `batch` and
    `submit`: one list, so the fleet takes every option a single run does."""
    options: list[Callable[[Any], Any]] = [
        click.option(
            "-m",
            "--model",
            envvar="RUIZN_MODEL",
            default=DEFAULT_MODEL,
            show_default=True,
            help=f"Claude model id (env RUIZN_MODEL); '{TEST_MODEL}' is the offline model.",
        ),
        click.option(
            "--max-steps",
            type=click.IntRange(min=1),
            default=DEFAULT_MAX_STEPS,
            show_default=True,
            help="Most model calls in the run.",
        ),
        click.option(
            "--max-tokens",
            type=click.IntRange(min=1),
            default=DEFAULT_MAX_TOKENS,
            show_default=True,
            help="max_tokens of each model call.",
        ),
        max_cost_option(
            "A budget in US dollars for the run (all its sessions): it stops before the next"
            " model call once its calls cost this much, exit 3. With batch/submit, each"
            " run's own (--batch-max-cost: the whole batch's)."
        ),
        max_context_option(
            "The most input tokens a request may hold; the oldest tool results are cleared"
            " to stay under it (default: the model's context window less --max-tokens;"
            " 'off': never clear)."
        ),
        click.option(
            "--compact-at",
            type=ContextLimit(),
            default=None,
            help="Compact the conversation into a summary before a request whose input would"
            " pass this many tokens (default: 3/4 of the model's context window;"
            " docs/compaction.md).",
        ),
        click.option(
            "--compact",
            type=click.Choice(("on", "off")),
            default="on",
            show_default=True,
            help="off: never compact (a full window then ends the run).",
        ),
        click.option(
            "--compact-instructions",
            default=None,
            metavar="TEXT",
            help="What every compaction's summary must keep (added to the summary prompt).",
        ),
        click.option("--system", default=DEFAULT_SYSTEM, help="System prompt."),
        click.option(
            "--read-timeout",
            type=float,
            default=DEFAULT_READ_TIMEOUT,
            show_default=True,
            help="Seconds a model stream may stay silent before the call is retried.",
        ),
        click.option(
            "--max-retries",
            type=click.IntRange(min=0),
            default=DEFAULT_MAX_RETRIES,
            show_default=True,
            help="Retries of a failed model call (429, 5xx, overloaded, broken stream).",
        ),
        click.option(
            "--thinking",
            type=click.Choice(THINKING_MODES),
            default=None,
            help="adaptive: the model decides when and how much to think (it counts against"
            " --max-tokens); off: no thinking. Default: the model's own (adaptive where the"
            " Models API says the model takes it).",
        ),
        click.option(
            "--show-thinking",
            is_flag=True,
            help="Ask for the model's summarized thinking and print it, dimmed (default: the"
            " API omits it; show and replay have what was sent).",
        ),
        click.option(
            "--effort",
            type=click.Choice(EFFORT_LEVELS),
            default=None,
            help="How much effort the model spends (output_config.effort); default: the"
            " model's own. ruizn has no temperature/top_p/top_k: steer with --system and this.",
        ),
        click.option(
            "--tool-timeout",
            type=click.FloatRange(min=0.001, max=1e9),
            default=DEFAULT_TOOL_TIMEOUT,
            show_default=True,
            metavar="SECONDS",
            help="Seconds a tool call (built-in, --tool, MCP) may take before it is answered"
            " `timeout`; a tool's own @ruizn.tool(timeout=...) wins.",
        ),
        click.option(
            "--tool-concurrency",
            type=click.IntRange(min=1),
            default=DEFAULT_TOOL_CONCURRENCY,
            show_default=True,
            help="Most tool calls of one turn run at once (1: one at a time, in order).",
        ),
        click.option(
            "--mcp",
            "mcp",
            multiple=True,
            metavar="NAME=COMMAND|URL",
            help="An MCP server: NAME='COMMAND ARGS...' (stdio) or NAME=https://... (Streamable"
            " HTTP). Its tools are mcp__NAME__TOOL. Repeatable.",
        ),
        mcp_header_option,
        click.option(
            "--mcp-env",
            "mcp_envs",
            multiple=True,
            metavar="NAME:KEY",
            help="Environment variable KEY for stdio MCP server NAME, its value read from"
            " $RUIZN_MCP_ENV_<NAME>_<KEY> (never recorded or shown). Repeatable.",
        ),
        click.option(
            "--allow-secret-files",
            is_flag=True,
            help="Let the file tools read .env, *.pem, id_rsa and other secret files.",
        ),
        click.option(
            "--shell",
            is_flag=True,
            help="Offer the model a bash tool (with bash_output, bash_kill), sandboxed in"
            " bubblewrap: see docs/shell.md. Each command is asked at --approval ask.",
        ),
        click.option(
            "--sandbox",
            type=click.Choice(("on", "off")),
            default="on",
            show_default=True,
            callback=_on_off,
            help="off: run --shell commands unconfined (said at start). on: in bubblewrap; a"
            " run whose sandbox cannot start here ends before its first request (exit 2).",
        ),
        click.option(
            "--shell-network",
            type=click.Choice(("on", "off")),
            default="off",
            show_default=True,
            callback=_on_off,
            help="Let sandboxed commands use the network.",
        ),
        click.option(
            "--shell-allow-read",
            multiple=True,
            metavar="PATH",
            help="A folder in your (otherwise hidden) home that commands may read. Repeatable.",
        ),
        click.option(
            "--shell-allow-domain",
            "shell_allow_domains",
            multiple=True,
            metavar="DOMAIN",
            help="Let sandboxed commands reach DOMAIN (`*.example.com`: any name below it; an"
            " IP address only if listed) through a proxy, the network otherwise off"
            " (docs/shell.md). Repeatable.",
        ),
        click.option(
            "--allow-command",
            "allow_commands",
            multiple=True,
            metavar="PATTERN",
            help="Approve bash commands matching PATTERN without asking: the whole command,"
            " '*' any text and '?' one character, never ; & | ` ( ) < > or a line break"
            " (docs/shell.md). Repeatable.",
        ),
        click.option(
            "--shell-timeout",
            type=click.FloatRange(min=1),
            default=DEFAULT_SHELL_TIMEOUT,
            show_default=True,
            help="Seconds a bash command may run when its call gives no timeout (a call may"
            " ask for up to 600); then its whole process group is killed.",
        ),
        click.option(
            "--approval",
            type=click.Choice(APPROVAL_MODES),
            default=DEFAULT_APPROVAL,
            show_default=True,
            help="Tool calls that need approval (write_file, edit_file, MCP tools): ask at the"
            " terminal (with no terminal the run stops, exit 4, for `resume --approve`),"
            " approve them always, or never.",
        ),
        click.option(
            "--output-schema",
            # Read (and a missing file said in one line) when the run's settings are made.
            type=click.Path(dir_okay=False),
            default=None,
            metavar="FILE.json",
            help="A JSON Schema the final answer must match: stdout is then that JSON alone"
            " (the transcript goes to stderr); a run whose answer never matches ends"
            " output_invalid, exit 5.",
        ),
        click.option(
            "--output-retries",
            type=click.IntRange(min=0),
            default=DEFAULT_OUTPUT_RETRIES,
            show_default=True,
            help="Answers that miss --output-schema sent back with the validation error.",
        ),
        click.option(
            "--hooks",
            "hooks_files",
            multiple=True,
            type=click.Path(dir_okay=False),
            metavar="FILE.json",
            help="Hook commands, in the shape of Claude Code's settings.json `hooks` key"
            " (PreToolUse, PostToolUse, UserPromptSubmit, Stop, SessionStart, SessionEnd,"
            " SubagentStart, SubagentStop)."
            " Repeatable.",
        ),
        click.option(
            "--no-checkpoints",
            is_flag=True,
            help="Do not save the workspace's files before the steps that may change them"
            " (`ruizn rewind`, `diff --files` and `fork --into` need them).",
        ),
        click.option(
            "--no-project-instructions",
            is_flag=True,
            help="Send no AGENTS.md/CLAUDE.md (the workspace root's in the system prompt, a"
            " subfolder's with the first file tool result there).",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return profile_option(tool_options(f))


def profile_option(f: Any) -> Any:
    return click.option(
        "--profile",
        default=None,
        metavar="NAME",
        help="Take the options of [profiles.NAME] in your config file (~/.config/ruizn/"
        "config.toml, or $RUIZN_CONFIG); the command line still wins.",
    )(f)


def run_options(f: Any) -> Any:
    f = settings_options(where_options(f))
    f = click.option(
        "--trust",
        is_flag=True,
        help="Accept the workspace's .ruizn/hooks.json hooks and its subagent definitions"
        " (.ruizn/agents/, .claude/agents/) without asking (they come from the workspace:"
        " read them first).",
    )(f)
    return click.option("--goal", help="What ruizn should do (or give it as an argument).")(f)


def new_approval_option(f: Any) -> Any:
    """--approval for a run that goes on (resume, continue): a change, or the run's own."""
    return click.option(
        "--approval",
        type=click.Choice(APPROVAL_MODES),
        default=None,
        help="A new approval mode for the rest of the run (default: the run's own).",
    )(f)


def db_option(f: Any) -> Any:
    return click.option(
        "--db", envvar="RUIZN_DB", default=None, help="A fleet's database (env RUIZN_DB)."
    )(f)


def tool_options(f: Any) -> Any:
    """--tool / --no-plugins, shared by `run` and `tools`."""
    f = click.option("--no-plugins", is_flag=True, help="Load no plug-in tools.")(f)
    return click.option(
        "--tool",
        "tools",
        multiple=True,
        metavar="MODULE:ATTR",
        help="Add the tools MODULE:ATTR names (a module or a .py file; repeatable).",
    )(f)


def checked_text(name: str, value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageFailure(f"{name} is not valid UTF-8") from None
    return value


class TopGroup(click.Group):
    """`ruizn` itself: its options are the implicit run's (`ruizn --goal G`). Given before a
    command, each one goes on to that command when it takes an option of the same name
    (`ruizn --mcp x=cmd tools` is `ruizn tools --mcp x=cmd`), and is otherwise a one-line
    usage error naming the commands it belongs to: an option is never silently dropped."""

    def make_parser(self, ctx: click.Context) -> Any:
        # Keep what was typed, before types and callbacks changed it ("off" -> False): an
        # option goes on to a command as its own words, so the command converts it as its
        # own option.
        parser = super().make_parser(ctx)
        parse = parser.parse_args

        def typed(args: list[str]) -> Any:
            opts, rest, order = parse(args)
            ctx.meta[_TYPED] = dict(opts)
            return opts, rest, order

        parser.parse_args = typed  # type: ignore[method-assign]  # click has no hook for it
        return parser

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        args = self._goal_words(ctx, args)
        name, command, rest = super().resolve_command(ctx, args)
        if command is None or name is None:
            return name, command, rest
        typed: dict[str, Any] = ctx.meta.get(_TYPED, {})
        carried: list[str] = []
        for param in self.params:
            if not isinstance(param, click.Option) or not param.expose_value or not param.name:
                continue
            # Only what was typed: an environment variable (RUIZN_MODEL) is read by the
            # command that takes it, and ignored, as ever, by the others.
            if ctx.get_parameter_source(param.name) is not click.core.ParameterSource.COMMANDLINE:
                continue
            target = option_named(command, param.name)
            if target is None:
                raise UsageFailure(_belongs(self, param, name))
            carried += _as_tokens(target, typed.get(param.name, ctx.params[param.name]))
        return name, command, [*carried, *rest]

    def _goal_words(self, ctx: click.Context, args: list[str]) -> list[str]:
        """`ruizn GOAL...` is `ruizn run GOAL...` when the first word is not a command; a
        word close to a command's name is a usage error (a typo must not start a run)."""
        if not args:
            return args
        first = args[0]
        if self.get_command(ctx, first) is not None:
            if len(args) == 1:
                ctx.meta[LONE_COMMAND] = first  # a usage error then hints at `ruizn run`
            return args
        if first.startswith("-"):
            return args
        if len(args) == 1 and first.strip() and len(first.split()) == 1:
            import difflib

            near = difflib.get_close_matches(first, self.list_commands(ctx), n=1, cutoff=0.75)
            if near:
                raise UsageFailure(
                    f"no such command {first!r} (did you mean {near[0]}?);"
                    f" for the goal {first!r}: ruizn run {first}"
                )
        return ["run", *args]


_TYPED = "ruizn.typed_options"
LONE_COMMAND = "ruizn.lone_command"


def option_named(command: click.Command, name: str) -> click.Option | None:
    for param in command.params:
        if isinstance(param, click.Option) and param.name == name and param.expose_value:
            return param
    return None


def _flag(option: click.Option, *, secondary: bool = False) -> str:
    names = option.secondary_opts if secondary else option.opts
    return max(names, key=lambda opt: (opt.startswith("--"), len(opt)))


def _belongs(group: click.Group, param: click.Option, name: str) -> str:
    flag = _flag(param)
    ctx = click.Context(group)
    found = ((other, group.get_command(ctx, other)) for other in group.list_commands(ctx))
    takers = sorted(
        (
            other
            for other, command in found
            if command is not None
            and not command.hidden
            and option_named(command, param.name or "") is not None
        ),
        key=lambda other: (other != "run", other),
    )
    if not takers:
        return f"{flag} is not an option of `ruizn {name}`; it belongs to the run: ruizn {flag} ..."
    return f"{flag} is not an option of `ruizn {name}`; it belongs to ruizn {', '.join(takers)}"


def _as_tokens(option: click.Option, value: Any) -> list[str]:
    """The command line that gives `option` the words typed for it (a flag: True/False)."""
    flag = _flag(option)
    if isinstance(value, bool):
        if value:
            return [flag]
        return [_flag(option, secondary=True)] if option.secondary_opts else []
    values = value if isinstance(value, list | tuple) and option.multiple else [value]
    tokens: list[str] = []
    for item in values:
        parts = item if isinstance(item, list | tuple) else (item,)
        tokens += [flag, *(str(part) for part in parts)]
    return tokens
