"""Real recorded Messages API traffic, served from 127.0.0.1, read by ruizn's provider.

The recordings live beside the checkout (../shared/anthropic-recordings, not in the repo).
The expected content is computed here from the raw SSE, independently of the SDK.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ruizn.effects.models.anthropic import AnthropicProvider
from ruizn.effects.models.provider import ModelReply, ProviderError
from ruizn.state import RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolUseBlock, Usage
from tests.cli.conftest import API_KEY, RECORDINGS
from tests.fakeapi import Recording

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        not RECORDINGS.is_dir(), reason=f"recordings folder {RECORDINGS} is not present"
    ),
]

_SSE = sorted(RECORDINGS.glob("*.response.sse")) if RECORDINGS.is_dir() else []
_KEPT = {"text", "tool_use", "thinking", "redacted_thinking"}


def _expected(path: Path) -> tuple[list[Any], str | None, Usage, str, bool]:
    """Fold the raw SSE into (blocks, stop_reason, usage, streamed text, tool JSON complete)."""
    blocks: dict[int, dict[str, Any]] = {}
    parts: dict[int, list[str]] = {}
    stopped: set[int] = set()
    usage: dict[str, int] = {}
    stop_reason = None
    text = []
    event = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("event:"):
            event = line[6:].strip()
            continue
        if not line.startswith("data:") or event in ("ping", None):
            continue
        data = json.loads(line[5:])
        if event == "message_start":
            usage.update({k: v for k, v in data["message"]["usage"].items() if isinstance(v, int)})
        elif event == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"])
            parts[data["index"]] = []
        elif event == "content_block_delta":
            delta, index = data["delta"], data["index"]
            match delta["type"]:
                case "text_delta":
                    blocks[index]["text"] += delta["text"]
                    text.append(delta["text"])
                case "input_json_delta":
                    parts[index].append(delta["partial_json"])
                case "thinking_delta":
                    blocks[index]["thinking"] += delta["thinking"]
                case "signature_delta":
                    blocks[index]["signature"] = delta["signature"]
        elif event == "content_block_stop":
            stopped.add(data["index"])
        elif event == "message_delta":
            stop_reason = data["delta"]["stop_reason"]
            usage.update({k: v for k, v in data["usage"].items() if isinstance(v, int)})
    complete = True
    out: list[Any] = []
    for index in sorted(blocks):
        block = blocks[index]
        match block["type"]:
            case "text":
                out.append(TextBlock(text=block["text"]))
            case "tool_use":
                raw = "".join(parts[index])
                if index not in stopped:
                    complete = False
                    out.append(("incomplete tool_use", block["id"], block["name"]))
                    continue
                out.append(
                    ToolUseBlock(
                        id=block["id"], name=block["name"], input=json.loads(raw) if raw else {}
                    )
                )
            case "thinking":
                out.append(ThinkingBlock(thinking=block["thinking"], signature=block["signature"]))
            case "redacted_thinking":
                out.append(RedactedThinkingBlock(data=block["data"]))
    expected_usage = Usage(
        input_tokens=usage.get("input_tokens", 0),
        output_tokens=usage.get("output_tokens", 0),
        cache_creation_input_tokens=usage.get("cache_creation_input_tokens", 0),
        cache_read_input_tokens=usage.get("cache_read_input_tokens", 0),
    )
    return out, stop_reason, expected_usage, "".join(text), complete


def _request(stem: Path) -> dict[str, Any]:
    request_file = stem.with_name(stem.name + ".request.json")
    request: dict[str, Any] = {
        "model": "claude-sonnet-5-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
    }
    if request_file.exists():
        recorded = json.loads(request_file.read_text())
        request.update(
            {k: recorded[k] for k in ("model", "max_tokens", "messages") if k in recorded}
        )
    return request


async def _consume(server: Any, request: dict[str, Any]) -> tuple[list[str], ModelReply]:
    provider = AnthropicProvider(api_key=API_KEY, base_url=server.base_url, max_retries=0)
    deltas: list[str] = []
    reply = None
    try:
        async for item in provider.stream(request):
            if isinstance(item, str):
                deltas.append(item)
            else:
                reply = item
    finally:
        await provider.aclose()
    assert reply is not None
    return deltas, reply


@pytest.mark.parametrize("sse", _SSE, ids=[p.name.split(".")[0] for p in _SSE])
async def test_recorded_stream_yields_the_right_response(sse: Path, server_factory: Any) -> None:
    stem = sse.with_name(sse.name.removesuffix(".response.sse"))
    if "error_midstream" in stem.name:
        server = server_factory([Recording(stem)])
        with pytest.raises(ProviderError) as caught:
            await _consume(server, _request(stem))
        assert caught.value.retryable
        assert caught.value.error_type == "overloaded_error"
        return
    blocks, stop_reason, usage, text, complete = _expected(sse)
    server = server_factory([Recording(stem)])
    deltas, reply = await _consume(server, _request(stem))
    assert "".join(deltas) == text
    assert reply.stop_reason == stop_reason
    assert reply.usage == usage
    kept = [b for b in blocks if not isinstance(b, tuple)]
    if complete:
        assert list(reply.content) == kept
    else:
        # stopped inside a tool_use: the call is there, and the core refuses to run it
        assert stop_reason == "max_tokens"
        assert [b for b in reply.content if not isinstance(b, ToolUseBlock)] == kept
        assert any(isinstance(b, ToolUseBlock) for b in reply.content)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("20_error_401_auth_stream_request", "authentication failed: check ANTHROPIC_API_KEY"),
        ("21_error_404_model_not_found_stream_request", "model not found"),
        ("22_error_400_invalid_request", "invalid request: "),
    ],
)
async def test_recorded_error_replies_become_clear_errors(
    name: str, says: str, server_factory: Any
) -> None:
    stem = RECORDINGS / name
    server = server_factory([Recording(stem)])
    with pytest.raises(ProviderError) as caught:
        await _consume(server, _request(stem))
    assert says in caught.value.message
    assert not caught.value.retryable
    assert API_KEY not in caught.value.message
