"""The fake's compaction, as SDK 2.17 types it and the real API enforces it.

- A compaction request (`compaction: {type: summarize, instructions?}`, beta
  `compact-2026-09-04`) on a model whose Models API entry takes it is answered with one
  `compaction` block, stop_reason `compaction`; its own tokens come only as a
  `usage.iterations` entry of type compaction (the top-level counts are 0).
- The block is signed: an HMAC over its content, encrypted_content and tool_changes. A
  request that sends it back must send it verbatim, first in `messages` (the first block of
  the first message, an assistant's). A tampered, reordered or re-typed block is a 400, as is
  a compaction block (or request) for a model that does not take compaction, or a
  compaction request together with `context_management`.

The summary the fake writes counts the tool calls the conversation made (those of an
earlier summary included), so a scripted run can read its progress after a compaction
(`progress`); `summarizing` wraps a script so that it answers compaction requests and
ruizn's own summary requests (the client form) on top of what it answers otherwise.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Callable
from typing import Any

from tests.fakeapi.replies import Compacted, Compaction, Reply, Stream, Text, Usage

BETA = "compact-2026-09-04"
_KEY = b"fakeapi compaction key"
_COUNT = re.compile(r"tool calls so far: (\d+)")
# The first words of ruizn's own summary request (ruizn.compaction.SUMMARY_PROMPT).
CLIENT_PROMPT = "Stop the task here and write a summary of this conversation so far"


def sign(content: str | None, encrypted: str | None, tool_changes: Any) -> str:
    payload = json.dumps([content, encrypted, tool_changes], sort_keys=True).encode()
    digest = hmac.new(_KEY, payload, hashlib.sha256).digest()
    return "cmp_" + base64.b64encode(digest).decode()


def supports(info: dict[str, Any] | None) -> bool:
    if info is None:
        return True  # a model the catalogue does not list: no opinion
    caps = info["capabilities"].get("compaction") or {}
    return bool((caps.get("summarize") or {}).get("supported"))


def refusal(
    info: dict[str, Any] | None, body: dict[str, Any], headers: dict[str, str]
) -> str | None:
    """The 400 message the real API would answer this body with, or None."""
    model = body.get("model")
    betas = {b.strip() for b in headers.get("anthropic-beta", "").split(",")}
    if "compaction" in body:
        if not supports(info):
            return f"compaction: not supported by {model}"
        if BETA not in betas:
            return f"compaction: requires the {BETA} beta"
        if body.get("context_management"):
            return "compaction: cannot be combined with context_management"
        config = body["compaction"]
        if not isinstance(config, dict) or config.get("type") != "summarize":
            return "compaction.type: must be 'summarize'"
        if _unanswered(body.get("messages") or []):
            return "compaction: the last turn has a tool_use without a tool_result"
    for m_index, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        for b_index, block in enumerate(content if isinstance(content, list) else []):
            where = f"messages.{m_index}.content.{b_index}"
            problem = _block_problem(
                info, block, where=where, at=(m_index, b_index), message=message, betas=betas
            )
            if problem is not None:
                return problem
    return None


def _block_problem(
    info: dict[str, Any] | None,
    block: Any,
    *,
    where: str,
    at: tuple[int, int],
    message: dict[str, Any],
    betas: set[str],
) -> str | None:
    if not isinstance(block, dict):
        return None
    if block.get("type") != "compaction":
        # A compaction block sent as another type: its fields do not belong there.
        if "encrypted_content" in block or "tool_changes" in block:
            return f"{where}: Extra inputs are not permitted"
        signature = block.get("signature")
        if isinstance(signature, str) and signature.startswith("cmp_"):
            return f"{where}.signature: Invalid signature in {block.get('type')} block"
        return None
    if not supports(info):
        return f"{where}: compaction blocks are not supported by {info and info['id']}"
    if BETA not in betas:
        return f"{where}: compaction blocks require the {BETA} beta"
    if at != (0, 0) or message.get("role") != "assistant":
        return f"{where}: a compaction block must be the first block of the first message"
    expected = sign(block.get("content"), block.get("encrypted_content"), block.get("tool_changes"))
    extra = set(block) - {"type", "content", "encrypted_content", "signature", "tool_changes"}
    extra.discard("cache_control")
    if extra:
        return f"{where}.{sorted(extra)[0]}: Extra inputs are not permitted"
    if not hmac.compare_digest(str(block.get("signature")), expected):
        return f"{where}.signature: Invalid signature in compaction block"
    return None


def _unanswered(messages: list[Any]) -> bool:
    if not messages or not isinstance(messages[-1], dict):
        return False
    last = messages[-1]
    content = last.get("content")
    if last.get("role") != "assistant" or not isinstance(content, list):
        return False
    return any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)


def progress(body: dict[str, Any]) -> int:
    """The tool calls the conversation has made: those its summary counts, and those since."""
    done = 0
    for message in body.get("messages") or []:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            kind = block.get("type")
            if kind == "tool_use":
                done += 1
            elif kind in ("compaction", "text"):
                found = _COUNT.search(str(block.get("content") or block.get("text") or ""))
                if found and (kind == "compaction" or "<conversation_summary>" in block["text"]):
                    done += int(found.group(1))
    return done


def summary(body: dict[str, Any]) -> str:
    instructions = (body.get("compaction") or {}).get("instructions")
    kept = f" Kept as asked: {instructions}." if instructions else ""
    return f"The task is under way; tool calls so far: {progress(body)}.{kept}"


def compaction_stream(body: dict[str, Any], tokens: tuple[int, int, int]) -> Stream:
    """The API's answer to a compaction request: one signed block, usage in iterations."""
    content = summary(body)
    encrypted = "enc_" + hashlib.sha256(content.encode()).hexdigest()[:16]
    block = Compaction(
        content=content,
        signature=sign(content, encrypted, []),
        encrypted_content=encrypted,
        tool_changes=(),
    )
    uncached, creation, read = tokens
    iteration = {
        "type": "compaction",
        "input_tokens": uncached,
        "cache_creation_input_tokens": creation,
        "cache_read_input_tokens": read,
        "output_tokens": max(1, len(content) // 4),
    }
    return Stream(
        (block,),
        stop_reason="compaction",
        usage=Usage(0, 0),
        iterations=(iteration,),
        model=str(body.get("model")),
    )


def is_client_summary(body: dict[str, Any]) -> bool:
    """The request is ruizn's own summary request (the client form)."""
    messages = body.get("messages") or []
    if not messages:
        return False
    content = messages[-1].get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and str(b.get("text", "")).startswith(CLIENT_PROMPT) for b in content
    )


def summarizing(
    script: Callable[[dict[str, Any], int], Reply],
) -> Callable[[dict[str, Any], int], Reply]:
    """`script`, with compaction requests answered as the API does and ruizn's own summary
    requests answered with a summary that keeps the count of tool calls."""

    def reply(body: dict[str, Any], index: int) -> Reply:
        if "compaction" in body:
            return Compacted()
        if is_client_summary(body):
            return Stream((Text(f"Summary: tool calls so far: {progress(body)}.", chunk=64),))
        return script(body, index)

    return reply


def counting_loop(
    tool_turns: int, *, tool_name: str = "read_file", tool_input: dict[str, Any] | None = None
) -> Callable[[dict[str, Any], int], Reply]:
    """Like replies.tool_loop, but counting its progress through summaries: a tool call until
    the conversation has made `tool_turns`, then "Done."."""
    from tests.fakeapi.replies import ToolUse

    call_input = tool_input if tool_input is not None else {"path": "README.md"}

    def reply(body: dict[str, Any], index: int) -> Reply:
        done = progress(body)
        if done < tool_turns:
            return Stream(
                (Text("Reading."), ToolUse(f"toolu_{done:04d}_loop", tool_name, call_input)),
                stop_reason="tool_use",
            )
        return Stream((Text("Done."),))

    return summarizing(reply)
