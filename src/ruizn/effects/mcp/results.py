"""An MCP tool's answer as a ToolResult: text and images, clipped to what a request holds."""

from __future__ import annotations

import json
from typing import cast

import mcp.types as mt

from ruizn.media import content_of
from ruizn.state import ErrorType, ImageBlock, ImageSource, ToolResult

# What one result may put in front of the model; more is cut (read_file's limit too).
MAX_RESULT_CHARS = 512 * 1024


TRUNCATED = "\n[truncated]"


def tool_result(result: mt.CallToolResult, note: str) -> ToolResult:
    parts = _render(result)
    if note:
        parts.insert(0, note.rstrip("\n"))
    content = content_of(_clipped(parts))
    if result.is_error:
        return ToolResult(
            content=content or "the tool failed without a message",
            is_error=True,
            error_type=ErrorType.RUNTIME_ERROR.value,
        )
    return ToolResult.ok(content)


def _render(result: mt.CallToolResult) -> list[str | ImageBlock]:
    """Text blocks as they are; images as image blocks, for the model to see (the runner
    checks them against the API's limits, ruizn.media); every other block described in one
    line, so nothing the server sent is dropped without a trace."""
    parts: list[str | ImageBlock] = []
    for block in result.content:
        match block:
            case mt.TextContent():
                parts.append(block.text)
            case mt.ImageContent():
                source = ImageSource(media_type=block.mime_type, data=block.data)
                parts.append(ImageBlock(source=source))
            case mt.AudioContent():
                size = _size(_b64_size(block.data))
                parts.append(f"[audio: {block.mime_type}, {size}: not shown, the model hears none]")
            case mt.EmbeddedResource(resource=mt.TextResourceContents() as res):
                # A text resource is text the tool meant the caller to read: keep it.
                parts.append(f"[resource: {res.uri}{_mime(res.mime_type)}]\n{res.text}")
            case mt.EmbeddedResource(resource=mt.BlobResourceContents() as res):
                size = _size(_b64_size(res.blob))
                parts.append(
                    f"[resource: {res.uri}{_mime(res.mime_type)}, {size} binary, not shown]"
                )
            case mt.ResourceLink():
                size = f", {_size(block.size)}" if block.size is not None else ""
                parts.append(
                    f"[resource link: {block.name} {block.uri}{_mime(block.mime_type)}{size}]"
                )
            case _:
                parts.append(f"[{getattr(block, 'type', type(block).__name__)} content, not shown]")
    if not parts and result.structured_content is not None:
        # The spec asks servers to send structured results as text too; not all do.
        return [json.dumps(result.structured_content, ensure_ascii=False)]
    if not parts and not result.is_error:
        return ["(the tool returned no content)"]
    return parts


def _clipped(parts: list[str | ImageBlock]) -> list[str | ImageBlock]:
    """The parts with their text cut to MAX_RESULT_CHARS in all (read_file's limit too),
    counting the newlines that will join them; images are kept (media.fit bounds them)."""
    if all(isinstance(part, str) for part in parts):
        text = "\n".join(cast(list[str], parts))
        return [text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + TRUNCATED]
    kept: list[str | ImageBlock] = []
    room = MAX_RESULT_CHARS
    for part in parts:
        if not isinstance(part, str):
            kept.append(part)
        elif len(part) <= room:
            kept.append(part)
            room -= len(part) + 1
        elif room >= 0:  # the first text past the limit: cut, and the rest left out
            kept.append(part[:room] + TRUNCATED)
            room = -1
    return kept


def _mime(mime: str | None) -> str:
    return f" ({mime})" if mime else ""


def _b64_size(data: str) -> int:
    return len(data) * 3 // 4 - data.count("=", -2)


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KB"
    return f"{n / 1024 / 1024:.1f} MB"
