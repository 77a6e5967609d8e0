"""The plain defaults of a run's settings: constants and their literal types, nothing else.

`ruizn.settings` re-exports every name here and stays their one home for the library; this
module exists so that the CLI's options (`ruizn --help`) can show the defaults without
importing attrs and the settings record. Pure: no import but typing.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "APPROVAL_MODES",
    "DEFAULT_APPROVAL",
    "DEFAULT_HOOK_TIMEOUT",
    "DEFAULT_MAX_AGENTS",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MAX_STEPS",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MODEL",
    "DEFAULT_OUTPUT_RETRIES",
    "DEFAULT_READ_TIMEOUT",
    "DEFAULT_RETRY_BASE_DELAY",
    "DEFAULT_SHELL_TIMEOUT",
    "DEFAULT_SYSTEM",
    "DEFAULT_TOOL_CONCURRENCY",
    "DEFAULT_TOOL_TIMEOUT",
    "EFFORT_LEVELS",
    "HOOK_EVENTS",
    "OUTPUT_MODES",
    "PROJECT_INSTRUCTIONS_CAP",
    "TEST_MODEL",
    "THINKING_MODES",
    "ApprovalMode",
    "Effort",
    "HookEvent",
    "OutputMode",
    "ThinkingMode",
]

DEFAULT_MODEL = "claude-sonnet-5-5"
TEST_MODEL = "test"
DEFAULT_SYSTEM = (
    "You are ruizn, a careful assistant working in the user's workspace. Use the tools to"
    " look at files instead of guessing, and answer concisely in the language of the request."
)
DEFAULT_MAX_STEPS = 20
# Room for a thinking model's adaptive thinking (it counts against max_tokens) and its answer;
# under every current model's max output (the Models API's `max_tokens`).
DEFAULT_MAX_TOKENS = 32_000
DEFAULT_READ_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 4
DEFAULT_RETRY_BASE_DELAY = 0.5
DEFAULT_TOOL_TIMEOUT = 10.0
DEFAULT_TOOL_CONCURRENCY = 8
# The bash tool's timeout for a command that gives none (a call may ask for up to 600 s).
DEFAULT_SHELL_TIMEOUT = 120.0
# How a run treats tool calls that need approval: ask a person (or stop and wait for one),
# approve every call, or deny every call. Defined here, not in state, so the CLI's start-up
# (`--help`) does not pay for importing the state records.
ApprovalMode = Literal["ask", "always", "never"]
APPROVAL_MODES: tuple[ApprovalMode, ...] = ("ask", "always", "never")
DEFAULT_APPROVAL: ApprovalMode = "ask"
# The most bytes (UTF-8) of one project instructions file (AGENTS.md, CLAUDE.md) sent to the
# model; a longer file is cut there, and `ruizn show` says so.
PROJECT_INSTRUCTIONS_CAP = 32_000
# How many times an answer that does not match the output schema is sent back (with the
# validation error) before the run ends output_invalid.
DEFAULT_OUTPUT_RETRIES = 2
# How a structured answer is asked for: the API's constrained decoding (output_config.format)
# where the model supports it, else a final tool the model must call with the answer.
OutputMode = Literal["format", "tool"]
OUTPUT_MODES: tuple[OutputMode, ...] = ("format", "tool")
# --thinking: adaptive (the model decides when and how much to think) or off. None: the
# model's own default, filled in when the run starts (adaptive where the model takes it).
ThinkingMode = Literal["adaptive", "off"]
THINKING_MODES: tuple[ThinkingMode, ...] = ("adaptive", "off")
# --effort: `output_config.effort`; None sends none (the model's default, high).
Effort = Literal["low", "medium", "high", "xhigh", "max"]
EFFORT_LEVELS: tuple[Effort, ...] = ("low", "medium", "high", "xhigh", "max")
# The hook events ruizn fires, named and shaped as Claude Code's (see ruizn.hooks).
HookEvent = Literal[
    "PreToolUse",
    "PostToolUse",
    "UserPromptSubmit",
    "Stop",
    "SessionStart",
    "SessionEnd",
    "PreCompact",
    "PostCompact",
    "SubagentStart",
    "SubagentStop",
]
HOOK_EVENTS: tuple[HookEvent, ...] = (
    "PreToolUse",
    "PostToolUse",
    "UserPromptSubmit",
    "Stop",
    "SessionStart",
    "SessionEnd",
    "PreCompact",
    "PostCompact",
    # Around a subagent (the parent's hooks; the matcher takes the agent's name).
    "SubagentStart",
    "SubagentStop",
)
# Compaction (docs/compaction.md): by default a request is compacted before it would pass
# this share of the model's context window (in quarters: 3/4), leaving room for the answer
# and the turn's tool results. `server`: the API's compaction request (a model whose Models
# API entry says it takes one); `client`: ruizn asks the model for a summary itself.
COMPACT_AT_QUARTERS = 3
CompactionForm = Literal["server", "client"]
COMPACTION_FORMS: tuple[CompactionForm, ...] = ("server", "client")
# A hook command's timeout in seconds where its config gives none (Claude Code's default).
DEFAULT_HOOK_TIMEOUT = 60.0

# Subagents (docs/subagents.md): how deep children may nest below a run (1: children start
# none), and how many of one run's children run at once.
DEFAULT_MAX_DEPTH = 1
DEFAULT_MAX_AGENTS = 4
