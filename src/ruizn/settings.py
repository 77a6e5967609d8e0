"""A run's settings, as one record; every default it uses has its one home in
`ruizn.defaults` (plain constants, no attrs, so the CLI starts fast).

`RunSettings` is what a run is: its model, limits, prompt, workspace, tools and where they
came from, MCP servers, approval mode and retry policy. The same record is what a user asks
for (`ruizn.Agent(...)`, `ruizn run` options, a goals-file line, the fleet's run input) and,
filled in when the run starts (the workspace resolved, the tools' schemas and sources, the
MCP servers' records), what `run_started` carries whole and the state keeps. Nothing copies
a run's options field by field. Pure data: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from attrs import field, fields, frozen

from ruizn.agentdefs import Subagent
from ruizn.defaults import (
    APPROVAL_MODES,
    COMPACTION_FORMS,
    DEFAULT_APPROVAL,
    DEFAULT_HOOK_TIMEOUT,
    DEFAULT_MAX_AGENTS,
    DEFAULT_MAX_DEPTH,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_STEPS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_MODEL,
    DEFAULT_OUTPUT_RETRIES,
    DEFAULT_READ_TIMEOUT,
    DEFAULT_RETRY_BASE_DELAY,
    DEFAULT_SHELL_TIMEOUT,
    DEFAULT_SYSTEM,
    DEFAULT_TOOL_CONCURRENCY,
    DEFAULT_TOOL_TIMEOUT,
    EFFORT_LEVELS,
    HOOK_EVENTS,
    OUTPUT_MODES,
    THINKING_MODES,
    ApprovalMode,
    CompactionForm,
    Effort,
    HookEvent,
    OutputMode,
    ThinkingMode,
)
from ruizn.domains import pattern_of
from ruizn.toolsource import ToolSource

# The plain defaults live in ruizn.defaults (no attrs, for the CLI's start-up): their one
# home; this module uses them and does not re-export them.
__all__ = [
    "RESUMABLE",
    "SETTINGS_FIELDS",
    "ConfigError",
    "HookSpec",
    "Instructions",
    "JsonObject",
    "RunSettings",
    "Validator",
    "settings_from",
]

JsonObject = dict[str, Any]
Validator = Callable[[Any, Any, Any], None]


class ConfigError(ValueError):
    """A setting that cannot work; the message is one line naming the setting."""


def _positive_int(name: str) -> Validator:
    def check(_: object, __: object, value: Any) -> None:
        if type(value) is not int or value < 1:
            raise ConfigError(f"{name} must be a whole number >= 1, not {value!r}")

    return check


def _whole(name: str) -> Validator:
    def check(_: object, __: object, value: Any) -> None:
        if type(value) is not int or value < 0:
            raise ConfigError(f"{name} must be a whole number >= 0, not {value!r}")

    return check


def _seconds(name: str, *, minimum: float) -> Validator:
    def check(_: object, __: object, value: Any) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < minimum
        ):
            raise ConfigError(f"{name} must be a finite number >= {minimum}, not {value!r}")

    return check


def _text(name: str, *, empty_ok: bool = False) -> Validator:
    def check(_: object, __: object, value: Any) -> None:
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be text, not {type(value).__name__}")
        if not empty_ok and not value.strip():
            raise ConfigError(f"{name} must not be empty")
        # Lone surrogates are what Python makes of argv bytes that are not UTF-8; they
        # cannot be written to a UTF-8 log, so they are refused before anything is created.
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(f"{name} is not valid UTF-8") from None

    return check


def _flag(name: str) -> Validator:
    def check(_: object, __: object, value: Any) -> None:
        if type(value) is not bool:
            raise ConfigError(f"{name} must be true or false, not {value!r}")

    return check


def _budget(_: object, __: object, value: Any) -> None:
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigError(f"max_cost must be a number of US dollars > 0, not {value!r}")


def _optional_count(name: str, *, minimum: int) -> Validator:
    def check(_: object, __: object, value: Any) -> None:
        if value is not None and (type(value) is not int or value < minimum):
            raise ConfigError(f"{name} must be a whole number >= {minimum}, not {value!r}")

    return check


def _money(value: Any) -> Any:
    """A whole number of dollars is kept as the float the log and the state hold."""
    return float(value) if type(value) is int else value


def _approval(_: object, __: object, value: Any) -> None:
    if value not in APPROVAL_MODES:
        raise ConfigError(f"approval must be one of {', '.join(APPROVAL_MODES)}, not {value!r}")


def _output_schema(_: object, __: object, value: Any) -> None:
    if value is not None and not isinstance(value, dict):
        raise ConfigError(f"output_schema must be a JSON Schema object, not {type(value).__name__}")


def _output_mode(_: object, __: object, value: Any) -> None:
    if value is not None and value not in OUTPUT_MODES:
        raise ConfigError(f"output_mode must be one of {', '.join(OUTPUT_MODES)}, not {value!r}")


def _optional_text(name: str) -> Validator:
    text = _text(name)

    def check(owner: object, attribute: object, value: Any) -> None:
        if value is not None:
            text(owner, attribute, value)

    return check


def _one_of(name: str, choices: tuple[str, ...]) -> Validator:
    def check(_: object, __: object, value: Any) -> None:
        if value is not None and value not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(choices)}, not {value!r}")

    return check


def _path_text(value: Any) -> Any:
    """A path given as a Path (or any os.PathLike) is kept as its text."""
    return value.__fspath__() if hasattr(value, "__fspath__") else value


def _optional_tuple(value: Any) -> Any:
    return None if value is None else _tuple(value)


def _tuple(value: Any) -> Any:
    """Lists (JSON, a caller's list) become the tuples a frozen record holds."""
    return tuple(value) if isinstance(value, list) else value


def _domains(value: Any) -> Any:
    """The allowlist's patterns in their one spelling; a ConfigError names one that is none."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(f"shell_allow_domains must be a list of domains, not {value!r}")
    try:
        return tuple(dict.fromkeys(pattern_of(str(item)) for item in value))
    except ValueError as exc:
        raise ConfigError(f"--shell-allow-domain: {exc}") from None


def _hook_event(_: object, __: object, value: Any) -> None:
    if value not in HOOK_EVENTS:
        raise ConfigError(f"hook event must be one of {', '.join(HOOK_EVENTS)}, not {value!r}")


_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _variables(_: object, __: object, value: Any) -> None:
    if not isinstance(value, tuple) or not all(
        isinstance(name, str) and _VARIABLE.fullmatch(name) for name in value
    ):
        raise ConfigError(f"hook env must be a list of variable names, not {value!r}")


@frozen(kw_only=True)
class HookSpec:
    """One hook command, as a Claude Code settings.json `hooks` entry gives it, with where it
    came from. Recorded in run_started: the run's grant lists each command."""

    event: HookEvent = field(validator=_hook_event)
    command: str = field(validator=_text("hook command"))
    matcher: str = field(default="", validator=_text("hook matcher", empty_ok=True))
    """A regular expression on the tool name (PreToolUse, PostToolUse); "" or "*": all."""
    timeout: float = field(
        default=DEFAULT_HOOK_TIMEOUT, validator=_seconds("hook timeout", minimum=0.001)
    )
    source: str = field(default="", validator=_text("hook source", empty_ok=True))
    """Where it was configured: `--hooks FILE` (the file), `.ruizn/hooks.json` (a project's)."""
    env: tuple[str, ...] = field(default=(), converter=_tuple, validator=_variables)
    """Variables of ruizn's environment passed to the command although their names say they
    hold secrets (`*_TOKEN`, `*_KEY`, ...; every other variable is passed): the person's own
    hooks files may name them, a workspace's may not (effects/hooks/config.py)."""


@frozen(kw_only=True)
class Instructions:
    """A project's instructions file (AGENTS.md, or CLAUDE.md where there is none) at the
    workspace root, as the run read it: text for the model, never code."""

    path: str = field(validator=_text("instructions path"))
    """Relative to the workspace ("AGENTS.md")."""

    text: str = field(validator=_text("instructions text", empty_ok=True))
    """What the system prompt carries: the file's text, cut at PROJECT_INSTRUCTIONS_CAP."""

    size: int = field(validator=_whole("instructions size"))
    """The file's whole size in bytes (more than the text's when it was cut)."""

    @property
    def cut(self) -> bool:
        return self.size > len(self.text.encode("utf-8"))


@frozen(kw_only=True)
class RunSettings:
    """Everything that shapes a run, recorded whole in `run_started`.

    A resume may change only the limits (`max_steps`, `max_tokens`, `max_cost`,
    `max_context`) and, for a run accepted
    with `--trust`, the workspace and the approval mode; each change is in `run_resumed`.
    """

    model: str = field(default=DEFAULT_MODEL, validator=_text("model"))
    """Claude model id; `test` is the built-in offline model."""

    max_steps: int = field(default=DEFAULT_MAX_STEPS, validator=_positive_int("max_steps"))
    """The most model calls in the run."""

    max_tokens: int = field(default=DEFAULT_MAX_TOKENS, validator=_positive_int("max_tokens"))
    """`max_tokens` of each model call."""

    system: str = field(default=DEFAULT_SYSTEM, validator=_text("system", empty_ok=True))
    """The system prompt (empty: none)."""

    workspace: str = field(default=".", converter=_path_text, validator=_text("workspace"))
    """The folder the tools may use; the run records it resolved (an absolute path)."""

    read_timeout: float = field(
        default=DEFAULT_READ_TIMEOUT, validator=_seconds("read_timeout", minimum=0.1)
    )
    """Seconds a model stream may stay silent before the call fails (and is retried)."""

    tool_timeout: float = field(
        default=DEFAULT_TOOL_TIMEOUT, validator=_seconds("tool_timeout", minimum=0.001)
    )
    """Seconds a tool call may take before it is answered `timeout`."""

    max_retries: int = field(default=DEFAULT_MAX_RETRIES, validator=_whole("max_retries"))
    """Retries of a failed model call (429, 5xx, overloaded, broken or invalid stream)."""

    retry_base_delay: float = field(
        default=DEFAULT_RETRY_BASE_DELAY, validator=_seconds("retry_base_delay", minimum=0.0)
    )
    """The first back-off between retries; it doubles each time (a retry-after wins)."""

    max_cost: float | None = field(default=None, converter=_money, validator=_budget)
    """A budget in US dollars for the whole run, every session of it: once the cost of its
    model calls reaches it, the run stops before the next call with status `max_cost`.
    None: no budget. (A model with no known price cannot have one.)"""

    max_context: int | None = field(
        default=None, validator=_optional_count("max_context", minimum=0)
    )
    """The most input tokens a request may hold: before a call that would pass it, the oldest
    tool results are cleared (see ruizn.window). None: the model's context window less
    `max_tokens`; 0: off (the history is sent whole, however long)."""

    context_window: int | None = field(
        default=None, validator=_optional_count("context_window", minimum=1)
    )
    """The model's context window in tokens; None: from the table of known windows, filled
    when the run starts (still None for a model the table does not know)."""

    tool_concurrency: int = field(
        default=DEFAULT_TOOL_CONCURRENCY, validator=_positive_int("tool_concurrency")
    )
    """The most tool calls of one turn that run at once (1: one at a time, in order)."""

    allow_secret_files: bool = field(default=False, validator=_flag("allow_secret_files"))
    """Let the file tools read well-known secret files (.env, *.pem, id_rsa...)."""

    checkpoints: bool = field(default=True, validator=_flag("checkpoints"))
    """Save the workspace's files before each step that may change them (docs/checkpoints.md),
    for `ruizn rewind`, `diff --files`, `fork --into` and `rerun`."""

    shell: bool = field(default=False, validator=_flag("shell"))
    """Offer the `bash`, `bash_output` and `bash_kill` tools (docs/shell.md)."""

    sandbox: bool = field(default=True, validator=_flag("sandbox"))
    """Run the shell's commands in bubblewrap (the run does not start if it cannot work
    here). False (`--sandbox off`) runs them unconfined, and the run says so at start."""

    shell_network: bool = field(default=False, validator=_flag("shell_network"))
    """Let sandboxed commands use the network (off: a network namespace of their own)."""

    shell_allow_read: tuple[str, ...] = field(default=(), converter=_tuple)
    """Folders under the (hidden) home folder that sandboxed commands may read."""

    shell_allow_domains: tuple[str, ...] = field(default=(), converter=_domains)
    """Hosts sandboxed commands may reach through the run's proxy (ruizn.domains: `pypi.org`,
    `*.github.com`, an IP address), with the network otherwise off (docs/shell.md)."""

    allow_commands: tuple[str, ...] = field(default=(), converter=_tuple)
    """Patterns of bash commands approved without asking (rules.command_allowed)."""

    shell_timeout: float = field(
        default=DEFAULT_SHELL_TIMEOUT, validator=_seconds("shell_timeout", minimum=1)
    )
    """Seconds a command may run when its call gives no timeout; then its group is killed."""

    approval: ApprovalMode = field(default=DEFAULT_APPROVAL, validator=_approval)
    """Tool calls that need approval (write_file, edit_file, `needs_approval` tools): "ask" a
    person (a terminal, `Agent(approve=...)`; with neither the run stops awaiting_approval),
    approve them "always", or deny them ("never")."""

    thinking: ThinkingMode | None = field(
        default=None, validator=_one_of("thinking", THINKING_MODES)
    )
    """`adaptive` (the model decides how much to think; thinking counts against max_tokens)
    or `off`. None: the model's default, filled in when the run starts from the Models API
    (adaptive where the model takes it; left None for a model the API does not describe)."""

    show_thinking: bool = field(default=False, validator=_flag("show_thinking"))
    """Ask for summarized thinking (`display: summarized`) and print it, dimmed; otherwise
    the API omits the thinking text (`display: omitted`) and sends only its signature."""

    effort: Effort | None = field(default=None, validator=_one_of("effort", EFFORT_LEVELS))
    """`output_config.effort`: how much effort the model spends (and tokens it uses). None:
    none sent, the model's default."""

    tool_specs: tuple[str, ...] = field(default=(), converter=_tuple)
    """Extra tools asked for, as `MODULE:ATTR` specs (a module or a .py file)."""

    plugins: bool = field(default=False, validator=_flag("plugins"))
    """Load the tools of installed plug-ins (entry point group `ruizn.tools`); the CLI turns
    it on unless `--no-plugins`."""

    mcp_servers: tuple[JsonObject, ...] = field(default=(), converter=_tuple, hash=False)
    """The MCP servers (`MCPServer.describe()`: name, command or URL, header and env names;
    never a secret value)."""

    tools: tuple[JsonObject, ...] = field(default=(), converter=_tuple, hash=False)
    """Filled when the run starts: the tools offered to the model, as API schemas."""

    tool_sources: tuple[ToolSource, ...] = field(default=(), converter=_tuple)
    """Filled when the run starts: where each tool came from, so a resume loads the same."""

    project_instructions: bool = field(default=True, validator=_flag("project_instructions"))
    """Send the workspace's AGENTS.md (or CLAUDE.md) in the system prompt, and the nearest
    one above a file the model touches in a subfolder with that tool's result."""

    instructions: tuple[Instructions, ...] = field(default=(), converter=_tuple)
    """Filled when the run starts: the root instructions file as read, so a replay, a resume
    and a rerun send exactly the system prompt the run began with."""

    output_schema: JsonObject | None = field(default=None, validator=_output_schema, hash=False)
    """A JSON Schema the final answer must match (`--output-schema`, `Agent(output_type=)`):
    the run succeeds only with a valid answer (`result.output`), else ends output_invalid."""

    output_retries: int = field(default=DEFAULT_OUTPUT_RETRIES, validator=_whole("output_retries"))
    """Answers that do not match the schema sent back with the error before output_invalid."""

    output_mode: OutputMode | None = field(default=None, validator=_output_mode)
    """Filled when a run with a schema starts, from the Models API's answer: "format" (the
    API constrains the answer, output_config.format) or "tool" (a final tool,
    `final_output`, the model must call)."""

    hooks: tuple[HookSpec, ...] = field(default=(), converter=_tuple)
    """Commands run at the run's hook events, Claude Code's contract (see ruizn.hooks):
    from `--hooks FILE`, and a project's `.ruizn/hooks.json` once a person accepted it."""

    compact_at: int | None = field(default=None, validator=_optional_count("compact_at", minimum=0))
    """Compact the history before a request whose input would pass this many tokens
    (docs/compaction.md). None: three quarters of the model's context window (no automatic
    compaction when the window is not known); 0: off (`--compact off`)."""

    compact_instructions: str | None = field(
        default=None, validator=_optional_text("compact_instructions")
    )
    """What a compaction's summary must keep (`--compact-instructions`): the API's
    `compaction.instructions`, or added to ruizn's own summary prompt."""

    compaction: CompactionForm | None = field(
        default=None, validator=_one_of("compaction", COMPACTION_FORMS)
    )
    """Filled when the run starts, from the Models API: "server" (the API's compaction
    request) where the model takes it, else "client" (ruizn's own summary request)."""

    subagents: tuple[Subagent, ...] = field(default=(), converter=_tuple)
    """The agents this run may start as children through the `agent` tool (none: no such
    tool; see docs/subagents.md). Recorded, so a resume never reads definitions again."""

    max_depth: int = field(default=DEFAULT_MAX_DEPTH, validator=_whole("max_depth"))
    """How deep children may nest below this run (1: its children start none)."""

    max_agents: int = field(default=DEFAULT_MAX_AGENTS, validator=_positive_int("max_agents"))
    """The most children of this run that run at once."""

    allowed_tools: tuple[str, ...] | None = field(default=None, converter=_optional_tuple)
    """The only tools the run offers, of those it would get (None: all): a child's subset."""


# The fields a resume may set (run_resumed): everything else stays as the run started.
RESUMABLE = frozenset(
    {"max_steps", "max_tokens", "max_cost", "max_context", "workspace", "approval"}
)
SETTINGS_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(RunSettings))


def settings_from(**options: Any) -> RunSettings:
    """A RunSettings from keyword options; an unknown name is a ConfigError naming it."""
    unknown = sorted(set(options) - set(SETTINGS_FIELDS))
    if unknown:
        raise ConfigError(f"unknown setting {unknown[0]!r} (known: {', '.join(SETTINGS_FIELDS)})")
    try:
        return RunSettings(**options)
    except TypeError as exc:  # a wrong type that no validator names (a list for a string...)
        raise ConfigError(str(exc)) from None
