"""One answer of the Messages API, read event by event from its stream into a ModelReply."""

from __future__ import annotations

import json
import re
from typing import Any

from ruizn.bounds import MAX_LINE_DEPTH, deeper_than, text_deeper_than, too_deep
from ruizn.effects.models.provider import ModelReply, ProviderError
from ruizn.state import (
    CompactionBlock,
    ContentBlock,
    JsonObject,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)

# No single call reads or writes a billion tokens; a count past this is a broken reply.
MAX_TOKEN_COUNT = 10**9


_USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


_ONE_HOUR = "cache_creation_1h_input_tokens"


# Error types (HTTP bodies and `event: error`) that the same request cannot get past.
FINAL_ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "billing_error",
    }
)


# What the SDK would send: compact, UTF-8, no NaN (anthropic._utils._json.openapi_dumps).
ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def usage_of(counts: dict[str, int]) -> Usage:
    # The 1-hour writes are a part of all writes; a reply that says more is read as all.
    one_hour = min(counts.get(_ONE_HOUR, 0), counts["cache_creation_input_tokens"])
    return Usage(**{**counts, _ONE_HOUR: one_hour})


class StreamedBlock:
    """A content block being streamed. `parts` collects text, thinking or tool JSON."""

    __slots__ = (
        "closed",
        "data",
        "encrypted",
        "id",
        "input",
        "kind",
        "name",
        "parts",
        "signature",
        "tool_changes",
    )

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.parts: list[str] = []
        self.closed = False
        self.id = ""
        self.name = ""
        self.input: JsonObject = {}
        self.signature = ""
        self.data = ""
        # A compaction block's fields as the API sent them (None: not sent).
        self.encrypted: str | None = None
        self.tool_changes: tuple[JsonObject, ...] | None = None


class StreamedReply:
    """Folds the Messages API events into ruizn's blocks, checking each field on the way in.

    Anything off-protocol raises a retryable `invalid_response`: a reply that fails here
    never becomes an event.
    """

    def __init__(self, request_id: str | None) -> None:
        self.request_id = request_id
        self.started = False
        self.stopped = False
        self.blocks: list[StreamedBlock] = []
        self.counts = dict.fromkeys(_USAGE_FIELDS, 0)
        self.compaction_counts = dict.fromkeys(_USAGE_FIELDS, 0)
        self.stop_reason: str | None = None

    def feed(self, event: str | None, data: str) -> str | None:
        """Take one event; return the text it adds, if it is a text delta."""
        if event == "content_block_delta":  # the common case first
            payload = self._json(data)
            block = self._open_block(payload, event)
            delta = payload.get("delta")
            if not isinstance(delta, dict):
                raise self._bad("content_block_delta without a delta object")
            kind = delta.get("type")
            if kind == "text_delta" and block.kind == "text":
                text = string_of(delta.get("text"), "text_delta.text", self.request_id)
                block.parts.append(text)
                return text
            if kind == "input_json_delta" and block.kind == "tool_use":
                block.parts.append(
                    string_of(delta.get("partial_json"), "partial_json", self.request_id)
                )
            elif kind == "thinking_delta" and block.kind == "thinking":
                block.parts.append(
                    string_of(delta.get("thinking"), "thinking_delta.thinking", self.request_id)
                )
            elif kind == "compaction_delta" and block.kind == "compaction":
                # Each delta holds the block's content whole (the SDK's accumulator sets it).
                block.parts = [self._optional(delta, "content", "compaction_delta.content") or ""]
                block.encrypted = self._optional(
                    delta, "encrypted_content", "compaction_delta.encrypted_content"
                )
            elif kind == "signature_delta" and block.kind == "thinking":
                block.signature = string_of(
                    delta.get("signature"), "signature_delta.signature", self.request_id
                )
            elif kind in _KNOWN_DELTAS and block.kind in _KNOWN_BLOCKS:
                raise self._bad(f"a {kind} for a {block.kind} block")
            # Other deltas (citations, server tools' blocks) carry nothing ruizn keeps.
            return None
        if event == "ping" or event is None:
            return None
        if event == "error":
            raise self._stream_error(data)
        if event not in _KNOWN_EVENTS:
            return None  # the API may add event types; the versioning policy says ignore them
        if self.stopped:
            raise self._bad(f"{event} after message_stop")
        payload = self._json(data)
        if event == "message_start":
            if self.started:
                raise self._bad("a second message_start")
            message = payload.get("message")
            if not isinstance(message, dict):
                raise self._bad("message_start without a message object")
            self.started = True
            self._usage(message.get("usage"))
            return None
        if not self.started:
            raise self._bad(f"{event} before message_start")
        if event == "content_block_start":
            self._start_block(payload)
        elif event == "content_block_stop":
            self._open_block(payload, event).closed = True
        elif event == "message_delta":
            delta = payload.get("delta")
            if delta is not None and not isinstance(delta, dict):
                raise self._bad("message_delta.delta is not an object")
            if delta and "stop_reason" in delta:
                reason = delta["stop_reason"]
                if reason is not None and not isinstance(reason, str):
                    raise self._bad("stop_reason is not a string")
                self.stop_reason = reason
            self._usage(payload.get("usage"))
        else:  # message_stop
            self.stopped = True
        return None

    def finish(self) -> ModelReply:
        if not self.started:
            raise self._bad("the stream ended before any message (no message_start)")
        if not self.stopped:
            raise self._bad("the stream ended without message_stop")
        content: list[ContentBlock] = []
        dropped: list[str] = []
        for index, block in enumerate(self.blocks):
            # A reply cut by max_tokens may end inside a block; anything else must close it.
            if not block.closed and self.stop_reason != "max_tokens":
                raise self._bad(f"content block {index} never stopped")
            match block.kind:
                case "text":
                    content.append(TextBlock(text="".join(block.parts)))
                case "tool_use":
                    content.append(
                        ToolUseBlock(id=block.id, name=block.name, input=self._tool_input(block))
                    )
                case "thinking":
                    content.append(
                        ThinkingBlock(thinking="".join(block.parts), signature=block.signature)
                    )
                case "redacted_thinking":
                    content.append(RedactedThinkingBlock(data=block.data))
                case "compaction":
                    content.append(
                        CompactionBlock(
                            content="".join(block.parts) if block.parts else None,
                            encrypted_content=block.encrypted,
                            signature=block.signature or None,
                            tool_changes=block.tool_changes,
                        )
                    )
                case other:
                    # Server tools (web search...) are not offered by ruizn; nothing to keep.
                    dropped.append(other)
        return ModelReply(
            content=tuple(content),
            stop_reason=self.stop_reason,
            usage=usage_of(self.counts) + usage_of(self.compaction_counts),
            request_id=self.request_id,
            dropped_blocks=tuple(dropped),
        )

    def _start_block(self, payload: JsonObject) -> None:
        index = payload.get("index")
        if type(index) is not int or index != len(self.blocks):
            raise self._bad(f"content_block_start index {index!r}, expected {len(self.blocks)}")
        raw = payload.get("content_block")
        if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
            raise self._bad("content_block_start without a typed content_block")
        block = StreamedBlock(raw["type"])
        rid = self.request_id
        match block.kind:
            case "text":
                block.parts.append(string_of(raw.get("text", ""), "text", rid))
            case "tool_use":
                block.id = string_of(raw.get("id"), "tool_use.id", rid)
                if not block.id:
                    raise self._bad("tool_use with an empty id")
                block.name = string_of(raw.get("name"), "tool_use.name", rid)
                start_input = raw.get("input", {})
                if not isinstance(start_input, dict):
                    raise self._bad("tool_use.input is not an object")
                block.input = start_input
            case "thinking":
                block.parts.append(string_of(raw.get("thinking", ""), "thinking", rid))
                block.signature = string_of(raw.get("signature", ""), "signature", rid)
            case "redacted_thinking":
                block.data = string_of(raw.get("data"), "redacted_thinking.data", rid)
            case "compaction":
                content = self._optional(raw, "content", "compaction.content")
                block.parts = [] if content is None else [content]
                block.encrypted = self._optional(
                    raw, "encrypted_content", "compaction.encrypted_content"
                )
                block.signature = self._optional(raw, "signature", "compaction.signature") or ""
                changes = raw.get("tool_changes")
                if changes is not None:
                    if not isinstance(changes, list) or not all(
                        isinstance(c, dict) for c in changes
                    ):
                        raise self._bad("compaction.tool_changes is not a list of objects")
                    if deeper_than(changes):
                        raise self._bad(too_deep("compaction.tool_changes"))
                    block.tool_changes = tuple(changes)
        self.blocks.append(block)

    def _optional(self, raw: JsonObject, name: str, what: str) -> str | None:
        value = raw.get(name)
        return None if value is None else string_of(value, what, self.request_id)

    def _open_block(self, payload: JsonObject, event: str) -> StreamedBlock:
        index = payload.get("index")
        if type(index) is not int or not 0 <= index < len(self.blocks):
            raise self._bad(f"{event} for block {index!r}, which never started")
        block = self.blocks[index]
        if block.closed:
            raise self._bad(f"{event} for block {index}, which already stopped")
        return block

    def _tool_input(self, block: StreamedBlock) -> JsonObject:
        raw = "".join(block.parts)
        # Depth is checked before json (or anything after it) walks the input recursively:
        # one refusal at every depth past the limit, never a RecursionError.
        if not raw:
            value: object = block.input  # no deltas: the start event held it whole (or {})
            if deeper_than(value):
                raise self._bad(too_deep(f"tool_use {block.id!r} input"))
        elif text_deeper_than(raw):
            if not block.closed:  # cut by max_tokens, as below: the core will not run it
                return {}
            raise self._bad(too_deep(f"tool_use {block.id!r} input"))
        else:
            try:
                value = json.loads(raw, parse_constant=no_constant)
            except ValueError:
                if not block.closed:  # cut by max_tokens mid-JSON: the core will not run it
                    return {}
                raise self._bad(f"tool_use {block.id!r} input is not valid JSON") from None
        if not isinstance(value, dict):
            raise self._bad(f"tool_use {block.id!r} input is not a JSON object")
        try:
            ENCODER.encode(value).encode("utf-8")  # no lone surrogates: it must go back out
        except UnicodeEncodeError:
            raise self._bad(f"tool_use {block.id!r} input is not valid Unicode") from None
        return value

    def _usage(self, usage: object) -> None:
        if usage is None:
            return  # missing usage is zero usage
        if not isinstance(usage, dict):
            raise self._bad("usage is not an object")
        counts = self.counts
        for name in _USAGE_FIELDS:
            value = usage.get(name)
            if value is None:
                continue
            if type(value) is not int or not 0 <= value <= MAX_TOKEN_COUNT:
                raise self._bad(f"usage.{name} is {short(value)}, not a token count")
            counts[name] = value
        # A compaction's own tokens are not in the top-level counts: they come as
        # `iterations` entries of type compaction (SDK 2.17), and they are billed.
        iterations = usage.get("iterations")
        if isinstance(iterations, list):
            extra = dict.fromkeys(_USAGE_FIELDS, 0)
            for entry in iterations:
                if not isinstance(entry, dict) or entry.get("type") != "compaction":
                    continue
                for name in _USAGE_FIELDS:
                    value = entry.get(name, 0)
                    if type(value) is not int or not 0 <= value <= MAX_TOKEN_COUNT:
                        raise self._bad(f"usage.iterations[].{name} is {short(value)}")
                    extra[name] += value
            self.compaction_counts = extra
        # Cache writes by TTL (`cache_creation`): the 1-hour ones are billed higher.
        by_ttl = usage.get("cache_creation")
        if isinstance(by_ttl, dict):
            value = by_ttl.get("ephemeral_1h_input_tokens")
            if value is not None:
                if type(value) is not int or not 0 <= value <= MAX_TOKEN_COUNT:
                    raise self._bad(
                        f"usage.cache_creation.ephemeral_1h_input_tokens is {short(value)},"
                        " not a token count"
                    )
                counts[_ONE_HOUR] = value

    def _json(self, data: str) -> JsonObject:
        if text_deeper_than(data, MAX_LINE_DEPTH):
            raise self._bad(too_deep("an event's data", MAX_LINE_DEPTH))
        try:
            payload = _EVENT_DECODER.decode(data)
        except ValueError:
            raise self._bad(f"an event whose data is not JSON: {short(data)}") from None
        if not isinstance(payload, dict):
            raise self._bad(f"an event whose data is not a JSON object: {short(data)}")
        return payload

    def _stream_error(self, data: str) -> ProviderError:
        error_type, message, request_id = "api_error", short(data), self.request_id
        try:
            body = None if text_deeper_than(data, MAX_LINE_DEPTH) else json.loads(data)
        except ValueError:
            body = None
        if isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict):
                error_type = str(error.get("type") or "api_error")
                message = str(error.get("message") or "")
            if isinstance(body.get("request_id"), str):
                request_id = body["request_id"]
        return ProviderError(
            one_line(f"{error_type} mid-stream: {message}", None),
            error_type=error_type,
            retryable=error_type not in FINAL_ERROR_TYPES,
            request_id=request_id,
        )

    def _bad(self, what: str) -> ProviderError:
        return invalid(what, self.request_id)


_KNOWN_DELTAS = frozenset(
    {"text_delta", "input_json_delta", "thinking_delta", "signature_delta", "compaction_delta"}
)


_KNOWN_BLOCKS = frozenset({"text", "tool_use", "thinking", "redacted_thinking", "compaction"})


_KNOWN_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    }
)


def invalid(what: str, request_id: str | None) -> ProviderError:
    return ProviderError(
        one_line(f"invalid response from the API: {what}", None),
        error_type="invalid_response",
        retryable=True,
        request_id=request_id,
    )


def string_of(value: object, what: str, request_id: str | None) -> str:
    if not isinstance(value, str):
        raise invalid(f"{what} is {short(value)}, not a string", request_id)
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (\ud800): the log could not hold it
            raise invalid(f"{what} is not valid Unicode", request_id) from None
    return value


def no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# json.loads with an option builds a decoder per call: a third of an event's parse time.
_EVENT_DECODER = json.JSONDecoder(parse_constant=no_constant)


def short(value: object, limit: int = 80) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


SPACE = re.compile(r"\s+")


def one_line(text: str, key: str | None) -> str:
    """Error text fit for one terminal line and the log: no newlines, and never the key."""
    if key:
        text = text.replace(key, "[API key]")
    return SPACE.sub(" ", text).strip()
