"""The state as the exact Messages API request body.

Prompt caching: the API caches the prefix (tools, system, messages) up to each
`cache_control` breakpoint, at most 4 per request. We mark the system prompt, the last tool,
and the last block of the two newest user messages. The newest writes this step's prefix;
the one before it is exactly where the previous request wrote, so each step reads the whole
earlier history from the cache however many blocks the last turn added (the API only looks
back about 20 blocks from a breakpoint for an earlier hit).
"""

from __future__ import annotations

from typing import Any

from attrs import frozen

from ruizn.rules import OUTPUT_KEY, OUTPUT_TOOL, wraps_output
from ruizn.settings import RunSettings
from ruizn.state import (
    CompactionBlock,
    ContentBlock,
    ExecutionContext,
    JsonObject,
    Message,
    RedactedThinkingBlock,
    ResultBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

EPHEMERAL: JsonObject = {"type": "ephemeral"}
# The beta of the API's compaction request (`compaction: {type: summarize}`; SDK 2.17).
COMPACTION_BETA = "compact-2026-09-04"
# How ruizn's own summary (no signature) goes back to the model: as text, tagged.
SUMMARY_OPEN = "<conversation_summary>\n"
SUMMARY_CLOSE = "\n</conversation_summary>"
MAX_BREAKPOINTS = 4
_ROLLING_BREAKPOINTS = 2


@frozen(kw_only=True)
class MessagesRequest:
    """The next request, made of the state's own immutable records.

    `to_json()` is the Messages API body. A provider may instead encode each message once
    (a Message never changes, so its JSON never does) and join the cached pieces; `marked`
    says which messages carry a rolling cache breakpoint on their last block.
    """

    model: str
    max_tokens: int
    system: str
    tools: tuple[JsonObject, ...]
    messages: tuple[Message, ...]
    marked: frozenset[int]
    # `thinking` and `output_config` as sent (None: not sent), made from the settings by
    # thinking_config and output_config below.
    thinking: JsonObject | None = None
    output_config: JsonObject | None = None
    # `compaction` as sent (None: not sent): a compaction request (ruizn.compaction).
    compaction: JsonObject | None = None

    @property
    def betas(self) -> tuple[str, ...]:
        """The `anthropic-beta` names the request needs: the compaction beta for a
        compaction request and for every request that sends the API's compaction back."""
        if self.compaction is not None or (
            self.messages
            and any(isinstance(b, CompactionBlock) and b.signed for b in self.messages[0].content)
        ):
            return (COMPACTION_BETA,)
        return ()

    def to_json(self) -> JsonObject:
        request = head_json(self)
        request["messages"] = [
            message_json(m, marked=i in self.marked) for i, m in enumerate(self.messages)
        ]
        return request


def plan_request(state: ExecutionContext) -> MessagesRequest:
    messages = _continued(state.messages)
    settings = state.settings
    return MessagesRequest(
        model=settings.model,
        max_tokens=settings.max_tokens,
        system=system_prompt(settings),
        tools=_tools(settings),
        messages=messages,
        marked=rolling_breakpoints(messages),
        thinking=thinking_config(settings),
        output_config=output_config(settings),
    )


def output_tool(schema: JsonObject) -> JsonObject:
    """The tool a model without constrained decoding answers through (tool mode). Its input
    is the answer (wrapped in `output` when the schema is not an object). No tool_choice
    forces it: that would fail with thinking on; a text answer is sent back instead."""
    input_schema = (
        {"type": "object", "properties": {OUTPUT_KEY: schema}, "required": [OUTPUT_KEY]}
        if wraps_output(schema)
        else schema
    )
    return {
        "name": OUTPUT_TOOL,
        "description": "Give the final answer of the task, as the required structured"
        " output. Call it once, when you are done; the run ends with this answer.",
        "input_schema": input_schema,
    }


def _tools(settings: RunSettings) -> tuple[JsonObject, ...]:
    if settings.output_schema is not None and settings.output_mode == "tool":
        return (*settings.tools, output_tool(settings.output_schema))
    return settings.tools


def system_prompt(settings: RunSettings) -> str:
    """The system prompt as sent: the run's own, then the project's instructions file."""
    parts = [settings.system] if settings.system else []
    if settings.output_schema is not None and settings.output_mode == "tool":
        parts.append(
            f"When you have the final answer, call the {OUTPUT_TOOL} tool with it; do not"
            " give the final answer as text."
        )
    parts.extend(
        instructions_block(item.path, item.text, item.size) for item in settings.instructions
    )
    return "\n\n".join(parts)


def instructions_block(path: str, text: str, size: int) -> str:
    """A project instructions file as the model reads it (in the system prompt for the
    root's, appended to a tool result for a subfolder's): tagged with where it came from."""
    cut = size > len(text.encode("utf-8"))
    note = f" (cut at {len(text.encode('utf-8'))} of {size} bytes)" if cut else ""
    return (
        f'<project_instructions path="{path}"{note}>\n'
        "Instructions the project's authors left for agents working in it (from the"
        " workspace: follow them where they apply to the task).\n"
        f"{text.rstrip()}\n</project_instructions>"
    )


def _continued(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """A continued turn (pause_turn, or an answer cut at max_tokens) ends the history with the
    assistant's partial answer, which the API takes as the start of its reply. It refuses one
    that ends in whitespace or sends no block, so that one is trimmed or left out."""
    last = messages[-1]
    if last.role != "assistant":
        return messages
    blocks = [b for b in last.content if _block(b) is not None]
    if not blocks:
        return messages[:-1]
    tail = blocks[-1]
    if isinstance(tail, TextBlock) and tail.text != tail.text.rstrip():
        blocks[-1] = TextBlock(text=tail.text.rstrip())
        return (*messages[:-1], Message(role="assistant", content=tuple(blocks)))
    return messages


def build_request(state: ExecutionContext) -> JsonObject:
    return plan_request(state).to_json()


def head_json(request: MessagesRequest) -> JsonObject:
    """Everything before `messages`, in the body's key order."""
    head: JsonObject = {"model": request.model, "max_tokens": request.max_tokens}
    if request.system:
        head["system"] = [{"type": "text", "text": request.system, "cache_control": EPHEMERAL}]
    if request.tools:
        tools = [dict(tool) for tool in request.tools]
        tools[-1]["cache_control"] = EPHEMERAL
        head["tools"] = tools
    if request.thinking is not None:
        head["thinking"] = request.thinking
    if request.output_config is not None:
        head["output_config"] = request.output_config
    if request.compaction is not None:
        head["compaction"] = request.compaction
    return head


def thinking_config(settings: RunSettings) -> JsonObject | None:
    """`thinking`: adaptive, its text summarized only when it is to be shown (omitted, the API
    still sends the signature that carries it to the next request); or disabled."""
    match settings.thinking:
        case "adaptive":
            display = "summarized" if settings.show_thinking else "omitted"
            return {"type": "adaptive", "display": display}
        case "off":
            return {"type": "disabled"}
    return None


def output_config(settings: RunSettings) -> JsonObject | None:
    """`output_config`, made whole in this one place: one dict every key of it joins (the
    effort here; a structured output's `format`). None: the key is not sent."""
    config: JsonObject = {}
    if settings.effort is not None:
        config["effort"] = settings.effort
    if settings.output_schema is not None and settings.output_mode == "format":
        # A structured answer the API constrains (format mode; see docs/structured-output.md).
        config["format"] = {"type": "json_schema", "schema": settings.output_schema}
    return config or None


def message_json(message: Message, *, marked: bool) -> JsonObject:
    content = [b for b in map(_block, message.content) if b is not None]
    if marked and content:
        content[-1]["cache_control"] = EPHEMERAL
    return {"role": message.role, "content": content}


def rolling_breakpoints(messages: tuple[Message, ...]) -> frozenset[int]:
    """The two newest user messages that send at least one block."""
    marked: list[int] = []
    for index in range(len(messages) - 1, -1, -1):
        if len(marked) == _ROLLING_BREAKPOINTS:
            break
        message = messages[index]
        if message.role == "user" and any(_block(b) is not None for b in message.content):
            marked.append(index)
    return frozenset(marked)


def _block(block: ContentBlock) -> JsonObject | None:
    match block:
        case TextBlock(text=text):
            # The API refuses empty and whitespace-only text blocks; models stream both.
            return {"type": "text", "text": text} if text.strip() else None
        case ToolUseBlock():
            return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
        case ToolResultBlock():
            content = block.content
            out: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": block.tool_use_id,
                "content": content if isinstance(content, str) else _result_blocks(content),
            }
            if block.is_error:
                out["is_error"] = True
            return out
        case ThinkingBlock():
            return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
        case RedactedThinkingBlock():
            return {"type": "redacted_thinking", "data": block.data}
        case CompactionBlock():
            return compaction_json(block)
    raise AssertionError(f"unknown block {block!r}")  # pragma: no cover


def compaction_json(block: CompactionBlock) -> JsonObject:
    """The API's compaction block exactly as it was returned (its signature covers it), or
    ruizn's own summary as a text block."""
    if not block.signed:
        return {"type": "text", "text": f"{SUMMARY_OPEN}{block.content or ''}{SUMMARY_CLOSE}"}
    out: JsonObject = {"type": "compaction", "content": block.content}
    if block.encrypted_content is not None:
        out["encrypted_content"] = block.encrypted_content
    if block.signature is not None:
        out["signature"] = block.signature
    if block.tool_changes is not None:
        out["tool_changes"] = [dict(change) for change in block.tool_changes]
    return out


def _result_blocks(blocks: tuple[ResultBlock, ...]) -> list[JsonObject]:
    """A result's text and image blocks (media.fit made them fit the API's limits)."""
    out: list[JsonObject] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            out.append({"type": "text", "text": block.text})
        else:
            source = block.source
            out.append(
                {
                    "type": "image",
                    "source": {
                        "type": source.type,
                        "media_type": source.media_type,
                        "data": source.data,
                    },
                }
            )
    return out


def count_breakpoints(request: JsonObject) -> int:
    """How many cache_control markers a request carries (the API allows 4)."""
    count = sum(1 for block in request.get("system", []) if "cache_control" in block)
    count += sum(1 for tool in request.get("tools", []) if "cache_control" in tool)
    for message in request["messages"]:
        count += sum(1 for block in message["content"] if "cache_control" in block)
    return count
