"""The real model: `anthropic.AsyncAnthropic` and `messages.stream`.

Imported only by `ruizn run`/`resume`: the SDK takes a while to import, and replay, runs and
show must stay fast. Retries before a stream starts (429, 5xx, 529, connection errors) are
the SDK's, configured with `max_retries`; we only watch them through httpx event hooks so the
user and the log can see them. Failures after the stream started (an `error` event inside a
200 response, a dropped connection, a stall past the read timeout) are not retried by the SDK
(anthropic-sdk-python#688): they come out as retryable `ProviderError`s for the runner.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
import httpx2

from ruizn.effects.provider import ModelReply, ProviderError, RetryNotice
from ruizn.state import (
    ContentBlock,
    JsonObject,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)

DEFAULT_MAX_RETRIES = 4
DEFAULT_READ_TIMEOUT = 60.0


class AnthropicProvider:
    def __init__(
        self,
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        on_retry: Callable[[RetryNotice], None] | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
    ) -> None:
        self._on_retry = on_retry
        self._attempt = 0
        self._last_status: int | None = None
        self._last_request_id: str | None = None
        http_client = anthropic.DefaultAsyncHttpxClient(
            event_hooks={"request": [self._on_request], "response": [self._on_response]},
        )
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY"),
            max_retries=max_retries,
            timeout=httpx2.Timeout(read_timeout, connect=min(read_timeout, 10.0)),
            http_client=http_client,
            base_url=base_url,  # None: the SDK reads ANTHROPIC_BASE_URL
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def _on_request(self, request: httpx2.Request) -> None:
        self._attempt += 1
        if self._attempt > 1 and self._on_retry is not None:
            reason = (
                f"HTTP {self._last_status}" if self._last_status is not None else "connection error"
            )
            self._on_retry(
                RetryNotice(
                    attempt=self._attempt,
                    reason=reason,
                    status_code=self._last_status,
                    request_id=self._last_request_id,
                )
            )
        self._last_status = None
        self._last_request_id = None

    async def _on_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self._last_status = response.status_code
            self._last_request_id = response.headers.get("request-id")

    async def stream(self, request: JsonObject) -> AsyncIterator[str | ModelReply]:
        self._attempt = 0
        started = False
        request_id: str | None = None
        try:
            async with self._client.messages.stream(**request) as stream:
                started = True
                request_id = stream.request_id
                async for event in stream:
                    if event.type == "text":
                        yield event.text
                message = await stream.get_final_message()
        except anthropic.APIStatusError as exc:
            raise _status_error(exc, request, mid_stream=started) from None
        except anthropic.APIConnectionError as exc:
            kind = "timeout" if isinstance(exc, anthropic.APITimeoutError) else "connection_error"
            raise ProviderError(
                f"{kind.replace('_', ' ')}: {exc.__cause__ or exc}",
                error_type=kind,
                retryable=True,
                request_id=request_id,
            ) from None
        except httpx2.TimeoutException:
            raise ProviderError(
                "the stream stalled: no data within the read timeout",
                error_type="stream_timeout",
                retryable=True,
                request_id=request_id,
            ) from None
        except (httpx2.TransportError, httpx2.StreamError) as exc:
            raise ProviderError(
                f"the connection broke mid-stream: {type(exc).__name__}: {exc}",
                error_type="connection_error",
                retryable=True,
                request_id=request_id,
            ) from None
        yield ModelReply(
            content=tuple(_blocks(message.content)),
            stop_reason=message.stop_reason,
            usage=_usage(message.usage),
            request_id=request_id,
        )


def _status_error(
    exc: anthropic.APIStatusError, request: JsonObject, *, mid_stream: bool
) -> ProviderError:
    status = exc.status_code
    request_id = exc.request_id if hasattr(exc, "request_id") else None
    error_type, message = _api_error(exc)
    if mid_stream or status == 200:
        request_id = _body_request_id(exc) or request_id
        return ProviderError(
            f"{error_type} mid-stream: {message}",
            error_type=error_type,
            retryable=True,
            status_code=None,
            request_id=request_id,
        )
    if status in (401, 403):
        text = "authentication failed: check ANTHROPIC_API_KEY"
    elif status == 404:
        text = f"model not found: {request.get('model')!r} ({message})"
    elif status == 400:
        text = f"invalid request: {message}"
    else:
        text = f"HTTP {status} {error_type}: {message}"
    if request_id:
        text += f" (request-id {request_id})"
    return ProviderError(
        text,
        error_type=error_type,
        status_code=status,
        request_id=request_id,
        retryable=status in _RETRYABLE_STATUS,
        retry_after=_retry_after(exc.response.headers),
    )


_RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})


def _retry_after(headers: Any) -> float | None:
    """The wait the server asked for: retry-after-ms, else retry-after (seconds or a date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    import email.utils
    import time

    try:
        when = email.utils.parsedate_to_datetime(raw).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - time.time())


def _api_error(exc: anthropic.APIStatusError) -> tuple[str, str]:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            return str(error.get("type", "api_error")), str(error.get("message", ""))
    return "api_error", str(exc.message)


def _body_request_id(exc: anthropic.APIStatusError) -> str | None:
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("request_id"), str):
        return str(body["request_id"])
    return None


def _blocks(content: list[Any]) -> list[ContentBlock]:
    blocks: list[ContentBlock] = []
    for block in content:
        match block.type:
            case "text":
                blocks.append(TextBlock(text=block.text))
            case "tool_use":
                tool_input = block.input if isinstance(block.input, dict) else {}
                blocks.append(ToolUseBlock(id=block.id, name=block.name, input=dict(tool_input)))
            case "thinking":
                blocks.append(ThinkingBlock(thinking=block.thinking, signature=block.signature))
            case "redacted_thinking":
                blocks.append(RedactedThinkingBlock(data=block.data))
            case _:
                # Server tools (web search...) are not offered by ruizn; nothing to keep.
                pass
    return blocks


def _usage(usage: Any) -> Usage:
    return Usage(
        input_tokens=usage.input_tokens or 0,
        output_tokens=usage.output_tokens or 0,
        cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
        cache_read_input_tokens=usage.cache_read_input_tokens or 0,
    )
