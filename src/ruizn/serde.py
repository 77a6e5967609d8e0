"""The log's codec: one cattrs converter, one JSON object per line.

A line is `{"v": SCHEMA_VERSION, "type": TAG, ...fields}`. `decode` refuses, with a
`DecodeError` naming the problem, anything it cannot read exactly: bad JSON, an unknown type,
a missing or mistyped field, or a schema version newer than this reader.
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import cattrs
import orjson
from attrs import evolve
from cattrs.gen import make_dict_unstructure_fn, override
from cattrs.v import format_exception

from ruizn.agentdefs import DefinitionError, Subagent
from ruizn.bounds import MAX_LINE_DEPTH, deeper_than, few_brackets, text_deeper_than, too_deep
from ruizn.events import (
    EVENT_TYPES,
    SCHEMA_VERSION,
    Checkpointed,
    ContextCompacted,
    Event,
    HookRan,
    LlmCallFailed,
    LlmCallStarted,
    LlmResponse,
    LlmToken,
    OutputChecked,
    Parent,
    RunFinished,
    RunResumed,
    RunStarted,
    SettingsChanged,
    SubagentFinished,
    SubagentStarted,
)
from ruizn.media import tally_of_run
from ruizn.settings import ConfigError, HookSpec, RunSettings
from ruizn.state import (
    CompactionBlock,
    ContentBlock,
    ExecutionContext,
    ImageBlock,
    Phase,
    RedactedThinkingBlock,
    ResultBlock,
    ResultContent,
    Status,
    TextBlock,
    ThinkingBlock,
    ToolResult,
    ToolResultBlock,
    ToolUseBlock,
    TurnResults,
    Usage,
)
from ruizn.toolsource import SourceKind

# The oldest log version this reader takes (see events.SCHEMA_VERSION).
MIN_SCHEMA_VERSION = 2


class DecodeError(ValueError):
    """A log line that is not a ruizn event this version can read."""


_BLOCK_TYPES: dict[str, type[Any]] = {
    "text": TextBlock,
    "tool_use": ToolUseBlock,
    "tool_result": ToolResultBlock,
    "thinking": ThinkingBlock,
    "redacted_thinking": RedactedThinkingBlock,
    "compaction": CompactionBlock,
}

_RESULT_BLOCK_TYPES: dict[str, type[Any]] = {"text": TextBlock, "image": ImageBlock}

_EVENT_BY_TAG: dict[str, type[Any]] = {cls.TAG: cls for cls in EVENT_TYPES}
assert len(_EVENT_BY_TAG) == len(EVENT_TYPES), "two events share a tag"


# Fields added to schema 3 after its first logs (costs, budgets, the context limit), left out
# of a line while they hold their default: a run that does not use them writes the lines it
# wrote before they existed, byte for byte, and an older log is still canonical. A reader
# takes a missing field as its default.
_OMITTED_AT_DEFAULT: dict[type[Any], tuple[str, ...]] = {
    # Before RunSettings, whose hook takes the one its hooks' type has when it is made.
    HookSpec: ("env",),
    Subagent: ("permission_mode",),
    RunSettings: (
        "max_cost",
        "max_context",
        "context_window",
        "thinking",
        "show_thinking",
        "effort",
        # the shell: a run without one writes no shell setting
        "shell",
        "sandbox",
        "shell_network",
        "shell_allow_read",
        "shell_allow_domains",
        "allow_commands",
        "shell_timeout",
        "project_instructions",
        "instructions",
        "output_schema",
        "output_retries",
        "output_mode",
        "hooks",
        "checkpoints",
        # compaction (docs/compaction.md)
        "compact_at",
        "compact_instructions",
        "compaction",
        # subagents: a run without them writes what it wrote before
        "subagents",
        "max_depth",
        "max_agents",
        "allowed_tools",
    ),
    Usage: ("cache_creation_1h_input_tokens",),
    LlmResponse: ("cost", "priced_by"),
    LlmCallStarted: ("compaction",),
    LlmCallFailed: ("compact",),
    ContextCompacted: ("cost", "priced_by", "request_id", "instructions"),
    CompactionBlock: ("encrypted_content", "signature", "tool_changes"),
    RunResumed: ("max_cost", "max_context", "reask", "elapsed", "confine"),
    RunFinished: ("cost",),
    OutputChecked: ("output", "error", "call_id"),
    HookRan: ("reason", "context", "updated_input", "tool_use_id", "error"),
    Checkpointed: ("empty_dirs", "left_out", "more_left_out", "final", "error"),
    Parent: ("agent", "call", "root"),
    SubagentStarted: ("description",),
    SubagentFinished: ("cost", "error", "awaiting"),
    SettingsChanged: ("model", "effort", "context_window", "compaction"),
}


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=False)
    for cls, names in _OMITTED_AT_DEFAULT.items():
        overrides: dict[str, Any] = {name: override(omit_if_default=True) for name in names}
        converter.register_unstructure_hook(
            cls, make_dict_unstructure_fn(cls, converter, **overrides)
        )

    def structure_block(value: Any, _: Any) -> ContentBlock:
        if not isinstance(value, dict):
            raise TypeError(f"content block must be an object, not {type(value).__name__}")
        cls = _BLOCK_TYPES.get(value.get("type", ""))
        if cls is None:
            raise ValueError(f"unknown content block type {value.get('type')!r}")
        block: ContentBlock = converter.structure(value, cls)
        return block

    converter.register_structure_hook(ContentBlock, structure_block)

    def structure_result(value: Any, _: Any) -> ResultContent:
        # A result's content: a string (every log before images), or its blocks.
        if isinstance(value, str):
            return value
        if not isinstance(value, list):
            raise TypeError(f"expected a string or a list of blocks, got {type(value).__name__}")
        blocks: list[ResultBlock] = []
        for item in value:
            kind = item.get("type") if isinstance(item, dict) else None
            cls = _RESULT_BLOCK_TYPES.get(kind) if isinstance(kind, str) else None
            if cls is None:
                raise ValueError(f"unknown result block {kind!r}")
            blocks.append(converter.structure(item, cls))
        return tuple(blocks)

    converter.register_structure_hook_func(lambda t: t == ResultContent, structure_result)
    # Strict scalars: cattrs would turn "2" into 2 and null into "None"; a log is refused,
    # not guessed at.
    converter.register_structure_hook(int, _exact(int))
    converter.register_structure_hook(str, _exact(str))
    converter.register_structure_hook(bool, _exact(bool))
    converter.register_structure_hook(float, _number)
    # Registered after str: Status is a str subclass, and an unknown status must be refused.
    converter.register_structure_hook(Status, lambda value, _: Status(value))
    converter.register_structure_hook(Phase, lambda value, _: Phase(value))
    converter.register_structure_hook(SourceKind, lambda value, _: SourceKind(value))
    # The turn's results are shown, and stored, as the list they stand for.
    converter.register_unstructure_hook(
        TurnResults, lambda results: converter.unstructure(results.as_tuple())
    )
    converter.register_structure_hook(
        TurnResults,
        lambda value, _: TurnResults.of(converter.structure(value, tuple[ToolResult | None, ...])),
    )
    # A run_started names its parent only when it has one (a fork, a rerun): every other
    # line keeps the bytes it always had, and so its trust record (a hash of them).
    converter.register_unstructure_hook(
        RunStarted,
        make_dict_unstructure_fn(RunStarted, converter, parent=override(omit_if_default=True)),
    )
    return converter


def _exact(kind: type[Any]) -> Any:
    def structure(value: Any, _: Any) -> Any:
        if type(value) is not kind:
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    return structure


def _number(value: Any, _: Any) -> float:
    if type(value) not in (int, float):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    return float(value)


converter = _make_converter()


def encode(event: Event) -> str:
    """One JSON line (no trailing newline) for `event`."""
    if type(event) is LlmToken:
        # The hot path of a live run: the same bytes the generic path writes, 4x faster.
        text = json.dumps(event.text, ensure_ascii=False)
        return f'{_TOKEN_HEAD}"seq":{event.seq},"ts":{event.ts!r},"text":{text}}}'
    body: dict[str, Any] = {"v": SCHEMA_VERSION, "type": event.TAG}
    body.update(converter.unstructure(event))
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


_TOKEN_HEAD = f'{{"v":{SCHEMA_VERSION},"type":"{LlmToken.TAG}",'


# A line nested deeper than MAX_LINE_DEPTH is refused with this, at any depth.
_TOO_DEEP = too_deep("the line", MAX_LINE_DEPTH)


def decode(line: str | bytes) -> Event:
    try:
        # orjson: 8x faster (most of a replay is parsing), and no Python recursion (it
        # refuses past 1,024 levels).
        body = orjson.loads(line)
    except orjson.JSONDecodeError:
        # The stdlib parser judges what orjson refuses (integers past 64 bits, lone
        # surrogates...), so the same lines are accepted and the errors say the same. It
        # recurses, so depth is checked on the text first.
        if text_deeper_than(line, MAX_LINE_DEPTH):
            raise DecodeError(_TOO_DEEP) from None
        try:
            body = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            raise DecodeError(f"not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise DecodeError(f"not a JSON object but {type(body).__name__}")
    version = body.pop("v", None)
    if not isinstance(version, int) or isinstance(version, bool):
        raise DecodeError("no schema version ('v'): not a ruizn event")
    if version < MIN_SCHEMA_VERSION:
        raise DecodeError(
            f"schema version {version} is from ruizn 0.1, whose retries were logged"
            f" differently; read this log with ruizn 0.1"
        )
    if version > SCHEMA_VERSION:
        raise DecodeError(
            f"schema version {version} is newer than this ruizn reads ({SCHEMA_VERSION});"
            " upgrade ruizn"
        )
    tag = body.pop("type", None)
    cls = _EVENT_BY_TAG.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise DecodeError(f"unknown event type {tag!r}")
    if version == 2 and cls is RunStarted:
        body = _run_started_from_v2(body)
    if cls is LlmToken:
        # The hot path of replay: most lines are tokens, so skip the generic machinery.
        try:
            seq, ts, text = body["seq"], body["ts"], body["text"]
        except KeyError as exc:
            raise DecodeError(f"{tag}: missing field {exc.args[0]!r}") from None
        if (
            type(seq) is int
            and type(ts) in (float, int)
            and type(text) is str
            and 0.0 <= ts < MAX_TS  # False for NaN
        ):
            return LlmToken(seq=seq, ts=float(ts), text=text)  # other fields are never read
    # Before cattrs, the reducer, the redactor or `repr` in an error walk it recursively;
    # most lines have too few brackets to be that deep, and skip the walk.
    if not few_brackets(line, MAX_LINE_DEPTH) and deeper_than(body, MAX_LINE_DEPTH):
        raise DecodeError(_TOO_DEEP)
    try:
        event: Event = converter.structure(body, cls)
    except Exception as exc:  # cattrs raises several types; all mean "this line is wrong"
        details = (
            "; ".join(cattrs.transform_error(exc, format_exception=_why))
            if isinstance(exc, cattrs.BaseValidationError)
            else str(exc)
        )
        raise DecodeError(f"{tag}: {details}") from None
    _check_numbers(tag, event)
    return event


# Times are seconds since 1970: a ts past this (the year 5138) or below 0 is not a time, and
# NaN, Infinity or 1e308 would break every view that turns it into a date or nanoseconds.
MAX_TS = 1e11
# Any other number of an event (elapsed seconds, a cost in USD) is finite and below this.
MAX_NUMBER = 1e15


def _check_numbers(tag: object, event: Event) -> None:
    ts = event.ts
    if not 0.0 <= ts < MAX_TS:  # False for NaN
        raise DecodeError(f"{tag}: ts {ts!r} is not a time (seconds since 1970)")
    for name, value in attrs.asdict(event, recurse=False).items():
        if type(value) is float and name != "ts" and not -MAX_NUMBER < value < MAX_NUMBER:
            raise DecodeError(f"{tag}: {name} {value!r} is not a usable number")


# The fields a version 2 run_started held flat, which version 3 keeps in `settings`, with the
# defaults version 2 gave a missing one (logs from before a field existed).
_V2_SETTINGS: dict[str, Any] = {
    "model": None,
    "max_steps": None,
    "max_tokens": None,
    "system": None,
    "tools": (),
    "workspace": ".",
    "max_retries": 4,
    "retry_base_delay": 0.5,
    "tool_sources": (),
    "tool_concurrency": 1,
    "allow_secret_files": False,
    "mcp_servers": (),
    "approval": "ask",
}


def _run_started_from_v2(body: dict[str, Any]) -> dict[str, Any]:
    """A version 2 run_started as version 3 writes it: its settings gathered into one record
    (the settings v2 did not record, such as the timeouts, take today's defaults)."""
    settings: dict[str, Any] = {}
    for name, default in _V2_SETTINGS.items():
        value = body.pop(name, default)
        if value is None:
            raise DecodeError(f"run_started (version 2): missing field {name!r}")
        settings[name] = value
    if settings["workspace"] == "":  # the oldest logs: the folder ruizn was started in
        settings["workspace"] = "."
    body.pop("schema_version", None)
    body["settings"] = settings
    return body


def structured(data: Any, kind: Any) -> Any:
    """`data` (plain JSON) as `kind` (a record, a tuple of records...). A wrong value is a
    ValueError in one line: each field's own error, `; `-joined."""
    try:
        return converter.structure(data, kind)
    except cattrs.BaseValidationError as exc:
        details = "; ".join(cattrs.transform_error(exc, format_exception=_said))
    except (ValueError, TypeError, KeyError) as exc:
        details = str(exc)
    raise ValueError(" ".join(details.split())) from None


def _said(exc: BaseException, type_: Any) -> str:
    """A record's own words for what is wrong (a setting's rule, a definition's field)."""
    if isinstance(exc, (ConfigError, DefinitionError)):
        return str(exc)
    return format_exception(exc, type_)


def _why(exc: BaseException, type_: Any) -> str:
    """A field's error as the decode message shows it: a setting's own words (ConfigError
    names the setting and the rule), cattrs' for the rest."""
    if isinstance(exc, ConfigError):
        return str(exc)
    return format_exception(exc, type_)


def state_to_json(state: ExecutionContext) -> dict[str, Any]:
    """The state as plain JSON data (what `ruizn replay --json` prints)."""
    data: dict[str, Any] = converter.unstructure(state)
    del data["turn_index"]  # derived from turn_calls (see ExecutionContext)
    del data["media"]  # derived from the results (see ExecutionContext)
    if state.checkpoint is None:  # a run without checkpoints prints what it printed before
        del data["checkpoint"]
    if state.settings.output_schema is None:
        # A run without an output schema prints the state it printed before they existed.
        for name in ("output", "output_valid", "output_checks"):
            del data[name]
    if not state.settings.hooks:
        for name in (
            "turn_pre",
            "stop_hooked_step",
            "stop_blocked",
            "hook_stop",
            "start_hooks_ran",
        ):
            del data[name]
    if not state.compactions and state.compacting is None:
        # A run never compacted prints the state it printed before compaction existed.
        for name in ("compacting", "compacted_step", "compactions", "compaction_cost"):
            del data[name]
    if state.precompact_step < 0 and not state.postcompact_ran:
        for name in (
            "precompact_step",
            "precompact_ran",
            "precompact_notes",
            "precompact_block",
            "postcompact_ran",
            "compact_trigger",
        ):
            del data[name]
    if not state.children:
        del data["children"]  # a run without subagents prints what it printed before
    if state.agent_of is None:
        del data["agent_of"]
    if state.agent_root is None:
        del data["agent_root"]
    return data


def state_from_json(data: dict[str, Any]) -> ExecutionContext:
    state: ExecutionContext = converter.structure(data, ExecutionContext)
    return evolve(
        state,
        turn_index={call.id: i for i, call in enumerate(state.turn_calls)},
        media=tally_of_run(state),
    )
