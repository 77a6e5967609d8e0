"""The real model: the Messages API through `anthropic.AsyncAnthropic`, read event by event.

Imported only by `ruizn run`/`resume`: the SDK takes a while to import, and replay, runs and
show must stay fast.

What we use of the SDK: its client (auth, headers, base URL, typed HTTP errors), on the
SDK's aiohttp transport (`DefaultAioHttpClient`, the `anthropic[aiohttp]` extra), through the
public `client.post(..., content=<bytes>, stream=True)`, and its SSE decoder
(`AsyncStream.raw_events`). What we do not: `messages.stream`. That helper deep-copies and
re-encodes the whole history on every request and folds each event into pydantic models;
ruizn's history is immutable, so each message is encoded once and reused (see `BodyEncoder`),
and the reply is folded straight into ruizn's own blocks, checked as it goes (`StreamedReply`).

The SDK does not retry (max_retries=0): every failure comes out as one `ProviderError` saying
whether a retry can help and how long the server asked us to wait; the core's retry policy
decides. A reply that does not follow the protocol (bad types or ranges, a stream that ends
early, a 200 that is not an event stream, undecodable bytes) is a retryable
`invalid_response`, never a value the log would later refuse.
"""

from __future__ import annotations

import email.utils
import functools
import math
import operator
import os
import ssl
import threading
import time
from collections.abc import AsyncIterator
from typing import Any, cast

import anthropic
import anyio
import httpx2

# The SDK's own SSE decoder (what AsyncStream.raw_events uses), taken directly so the body's
# end can be marked (see _ended). Pinned by pyproject's anthropic<3.
from anthropic._streaming import SSEDecoder

from ruizn.bounds import MAX_LINE_DEPTH, deeper_than
from ruizn.defaults import DEFAULT_READ_TIMEOUT
from ruizn.effects.models.catalog import AnthropicCatalog
from ruizn.effects.models.keptfacts import KeptFactsStore
from ruizn.effects.models.provider import ModelReply, ProviderConfigError, ProviderError
from ruizn.effects.models.stream import ENCODER, StreamedReply, invalid, one_line, short
from ruizn.modelfacts import not_found_line, usable
from ruizn.request import MessagesRequest, head_json, message_json
from ruizn.state import (
    JsonObject,
    Message,
)

_TLS_LOCK = threading.Lock()


@functools.cache
def _tls_context_once() -> ssl.SSLContext:
    return httpx2.create_ssl_context()


def tls_context() -> ssl.SSLContext:
    """The TLS settings every client of this process shares: the SDK's default context
    (its CA bundle, or SSL_CERT_FILE/SSL_CERT_DIR), built once. Loading the CA bundle costs
    10-50 ms of CPU, and a fleet process builds a provider for every run it takes: under
    the lock, sixteen runs starting at once build it once, not sixteen times."""
    with _TLS_LOCK:
        return _tls_context_once()


# A request body whose history passed this size goes out in blocks of it, straight from the
# encoder's cache: a 2 MB body (2,000 steps) was otherwise copied whole three times a step,
# by our join, by aiohttp's join with the headers (on Python < 3.12.9) and by asyncio's
# buffer. Smaller bodies go in one write, where one copy costs less than a stream's set-up.
BODY_BLOCK = 64 * 1024


def _dumps(value: Any) -> bytes:
    return ENCODER.encode(value).encode("utf-8")


class AnthropicProvider:
    def __init__(
        self,
        *,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 0,
        kept_facts: KeptFactsStore | None = None,
    ) -> None:
        """`max_retries` is the SDK's own retry count. Leave it 0: the core retries, and a
        retry it cannot see is one it cannot log, count or pace. `kept_facts`: the Models
        API's earlier answers (`catalog`), None: ask every time."""
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        key = _checked_key(key)
        url = base_url if base_url is not None else os.environ.get("ANTHROPIC_BASE_URL")
        # Unset or blank: the SDK's default, the real API.
        url = _checked_base_url(url) if url is not None and url.strip() else None
        self._key = key
        self._kept_facts = kept_facts
        self._encoder = BodyEncoder()
        try:
            # follow_redirects=False: the API never redirects, and following a POST there
            # silently turns it into a GET somewhere else. A 3xx is reported instead.
            # The SDK's aiohttp transport: the same client, auth, headers and errors, with
            # a third less client time a step than httpx's (docs/benchmark.md).
            http_client = anthropic.DefaultAioHttpClient(
                follow_redirects=False, verify=tls_context()
            )
            self._client = anthropic.AsyncAnthropic(
                api_key=key,
                max_retries=max_retries,
                timeout=httpx2.Timeout(read_timeout, connect=min(read_timeout, 10.0)),
                http_client=http_client,
                base_url=url,
            )
        except anthropic.AnthropicError as exc:
            raise ProviderConfigError(one_line(str(exc), key)) from None

    async def aclose(self) -> None:
        await self._client.close()

    async def stream(
        self, request: JsonObject | MessagesRequest
    ) -> AsyncIterator[str | ModelReply]:
        chunks = self._encoder.chunks(request)
        body: bytes | AsyncIterator[bytes] = chunks[0]
        headers: dict[str, str] = {}
        if len(chunks) > 1:
            # With its length given, aiohttp writes each block as it is (no chunked
            # framing, no join), and httpx adds no Transfer-Encoding.
            body, headers = _sent(chunks), {"Content-Length": str(sum(map(len, chunks)))}
        model = request.model if isinstance(request, MessagesRequest) else request.get("model")
        path = "/v1/messages"
        betas = request.betas if isinstance(request, MessagesRequest) else ()
        if betas:
            # The beta endpoint (what the SDK's client.beta.messages posts to) and its names.
            path, headers["anthropic-beta"] = "/v1/messages?beta=true", ",".join(betas)
        response: httpx2.Response | None = None
        request_id: str | None = None
        try:
            response = cast(
                httpx2.Response,
                await self._client.post(
                    path,
                    cast_to=httpx2.Response,  # the raw response: we read the events ourselves
                    content=body,
                    options={"headers": headers},
                    stream=True,
                    stream_cls=anthropic.AsyncStream[Any],  # unused for a raw response
                ),
            )
            request_id = response.headers.get("request-id")
            content_type = response.headers.get("content-type", "")
            if not content_type.startswith("text/event-stream"):
                raise invalid(
                    f"HTTP {response.status_code} with content-type {content_type!r},"
                    " not an event stream",
                    request_id,
                )
            reply = StreamedReply(request_id)
            feed = reply.feed
            async for sse in SSEDecoder().aiter_bytes(_ended(response)):
                text = feed(sse.event, sse.data)
                if text is not None:
                    yield text
            result = reply.finish()
        except anthropic.APIStatusError as exc:
            available: tuple[str, ...] | None = None
            if _model_missing(exc):
                # Say which models this key can use (GET /v1/models), closest first.
                available = usable(await self.catalog.models())
            raise self._status_error(exc, model, available) from None
        except anthropic.APITimeoutError:
            raise ProviderError(
                "timeout: no response within the read timeout",
                error_type="timeout",
                retryable=True,
            ) from None
        except anthropic.APIConnectionError as exc:
            raise ProviderError(
                one_line(f"connection error: {exc.__cause__ or exc}", self._key),
                error_type="connection_error",
                retryable=True,
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
                one_line(
                    f"the connection broke mid-stream: {type(exc).__name__}: {exc}", self._key
                ),
                error_type="connection_error",
                retryable=True,
                request_id=request_id,
            ) from None
        except UnicodeDecodeError:
            raise invalid("the stream is not valid UTF-8", request_id) from None
        finally:
            if response is not None:
                # Shielded: a cancelled call still hands its connection back closed; the
                # cancellation itself goes on as soon as this returns.
                with anyio.CancelScope(shield=True):
                    await response.aclose()
        yield result

    @property
    def catalog(self) -> AnthropicCatalog:
        """The Models API, on this provider's client (its key, base URL and pool)."""
        return AnthropicCatalog(self._client, self._kept_facts)

    def _status_error(
        self,
        exc: anthropic.APIStatusError,
        model: object,
        available: tuple[str, ...] | None = None,
    ) -> ProviderError:
        status = exc.status_code
        headers = exc.response.headers
        request_id = headers.get("request-id") or _body_request_id(exc.body)
        error_type, message = _api_error(exc, status)
        should_retry = headers.get("x-should-retry")
        if should_retry in ("true", "false"):  # the API says so: obey, as the SDK does
            retryable = should_retry == "true"
        else:
            retryable = status in (408, 409, 429) or status >= 500
        if 300 <= status < 400:
            location = headers.get("location")
            where = f" to {location}" if location else ""
            text = (
                f"HTTP {status} redirect{where}: the API does not redirect;"
                " check ANTHROPIC_BASE_URL"
            )
            error_type, retryable = "redirect", False
        elif status in (401, 403):
            text = "authentication failed: check ANTHROPIC_API_KEY"
        elif status == 404 and error_type == "not_found_error" and "model" in message:
            text = not_found_line(str(model), available or ())
        elif status == 404:
            text = f"HTTP 404 {error_type}: {message}; check ANTHROPIC_BASE_URL"
        elif status == 400:
            text = f"invalid request: {message}"
        else:
            text = f"HTTP {status} {error_type}: {message}"
        if request_id:
            text += f" (request-id {request_id})"
        return ProviderError(
            one_line(text, self._key),
            error_type=error_type,
            retryable=retryable,
            status_code=status,
            request_id=request_id,
            retry_after=retry_after(headers) if retryable else None,
        )


def _model_missing(exc: anthropic.APIStatusError) -> bool:
    error_type, message = _api_error(exc, exc.status_code)
    return exc.status_code == 404 and error_type == "not_found_error" and "model" in message


async def _sent(chunks: tuple[bytes, ...]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


async def _ended(response: httpx2.Response) -> AsyncIterator[bytes]:
    """The body's bytes, then a blank line once it has ended cleanly.

    An SSE event is dispatched at the blank line after it. Some real replies end their last
    event (message_stop) at the end of the body without one (recording 18); the SDK's stream
    helper accepted them, and so do we. A body cut mid-transfer raises before this point.
    """
    async for chunk in response.aiter_bytes():
        yield chunk
    yield b"\n\n"


class BodyEncoder:
    """The request body as bytes, each message encoded once.

    A `Message` is immutable, so its JSON never changes. The history only grows, and every
    message before the oldest rolling cache breakpoint is unmarked now and in every later
    request: that prefix is kept encoded, joined with ",", in blocks of about `block` bytes
    that never change once full (the last one grows in place). The few messages from the
    breakpoint on are encoded fresh, and the head (model, system, tools) once a run. The
    prefix is matched by identity (`is`), never by equality: equal records can have
    different JSON (1 and 1.0, true and 1). So a step costs the new messages plus the copies
    of the body into what is sent, not a walk over the whole history. The bytes are exactly
    `_dumps({**to_json(), "stream": true})`: the tests hold this encoder to that.

    `chunks` gives the body in those pieces, so that a long history is sent without being
    copied whole again (see `AnthropicProvider.stream`); `encode` joins it.
    """

    def __init__(self, *, block: int = BODY_BLOCK) -> None:
        self._block = block
        self._prefix: tuple[Message, ...] = ()
        # The prefix's messages, joined with ",": full blocks (immutable, handed to the
        # transport as they are) and the open one, which only this encoder holds and grows.
        self._full: list[bytes] = []
        self._open = bytearray()
        # The head (model, max_tokens, system, tools) is the same every step of a run: its
        # bytes are kept with what they were made from (system and tools by identity).
        self._head: tuple[tuple[object, ...], str, tuple[JsonObject, ...], bytes] | None = None

    def encode(self, request: JsonObject | MessagesRequest) -> bytes:
        if not isinstance(request, MessagesRequest):
            return _dumps({**request, "stream": True})
        return b"".join(self._pieces(request))

    def chunks(self, request: JsonObject | MessagesRequest) -> tuple[bytes, ...]:
        """The body as a few immutable chunks whose join is `encode(request)`: one, until
        the history fills a block; then the head, the full blocks as they are, and the rest."""
        if not isinstance(request, MessagesRequest):
            return (self.encode(request),)
        pieces = self._pieces(request)
        full = len(self._full)
        if not full:
            return (b"".join(pieces),)
        # pieces: head, '"messages":[', the full blocks, then the open block, comma, tail, end
        return (b"".join(pieces[:2]), *self._full, b"".join(pieces[2 + full :]))

    def _pieces(self, request: MessagesRequest) -> list[bytes | bytearray]:
        messages, marked = request.messages, request.marked
        first = min(marked) if marked else len(messages)
        prefix = self._prefix
        done = len(prefix)
        if done > first or not all(map(operator.is_, prefix, messages)):
            done = 0
            self._prefix, self._full, self._open = (), [], bytearray()
        if done < first:
            full, open_, block = self._full, self._open, self._block
            for message in messages[done:first]:
                if open_ or full:
                    open_ += b","
                open_ += _dumps(message_json(message, marked=False))
                if len(open_) >= block:
                    full.append(bytes(open_))
                    open_ = bytearray()
            self._open = open_
            self._prefix = messages[:first]
        tail = b",".join(
            _dumps(message_json(message, marked=index in marked))
            for index, message in enumerate(messages[first:], start=first)
        )
        comma = b"," if (self._open or self._full) and tail else b""
        return [
            self._head_bytes(request),
            b',"messages":[',
            *self._full,
            self._open,
            comma,
            tail,
            b'],"stream":true}',
        ]

    def _head_bytes(self, request: MessagesRequest) -> bytes:
        """`_dumps(head_json(request))` without its closing brace, encoded once a run."""
        cached = self._head
        # The small keys compared by value: whatever joins thinking or output_config is in.
        small = (
            request.model,
            request.max_tokens,
            request.thinking,
            request.output_config,
            request.compaction,
        )
        if (
            cached is not None
            and cached[0] == small
            and cached[1] is request.system
            and cached[2] is request.tools
        ):
            return cached[3]
        head = _dumps(head_json(request))[:-1]
        self._head = (small, request.system, request.tools, head)
        return head


def retry_after(headers: httpx2.Headers) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms`, else `retry-after` as seconds
    or as an HTTP date. None when absent or unreadable."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        seconds = _finite(millis)
        if seconds is not None:
            return seconds / 1000
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _finite(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _finite(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _api_error(exc: anthropic.APIStatusError, status: int) -> tuple[str, str]:
    body = exc.body
    # The SDK parsed the body already; one too deep to print is shown as text, like HTML.
    if isinstance(body, dict) and not deeper_than(body, MAX_LINE_DEPTH):
        error = body.get("error")
        if isinstance(error, dict):
            return str(error.get("type") or f"http_{status}"), str(error.get("message") or "")
    # Not the API's JSON (a proxy's HTML page...): say what came, briefly.
    try:
        text = exc.response.text
    except httpx2.ResponseNotRead:
        text = ""
    return f"http_{status}", short(text or exc.message, 160)


def _body_request_id(body: object) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("request_id"), str):
        return str(body["request_id"])
    return None


def _checked_key(key: str | None) -> str | None:
    if key is None:
        return None
    stripped = key.strip()  # a key read from a CRLF file ends in "\r\n"
    if not stripped or not stripped.isascii() or not stripped.isprintable() or " " in stripped:
        raise ProviderConfigError(
            "ANTHROPIC_API_KEY is malformed: it holds spaces, control or non-ASCII characters"
        )
    return stripped


def _checked_base_url(url: str) -> str:
    problem = None
    try:
        parsed = httpx2.URL(url.strip())
    except Exception:  # httpx raises several types for a bad URL; all mean the same here
        parsed = None
        problem = "it cannot be parsed"
    if parsed is not None:
        if parsed.scheme not in ("http", "https"):
            problem = "it must start with http:// or https://"
        elif not parsed.host:
            problem = "it names no host"
    if problem is not None:
        raise ProviderConfigError(f"invalid ANTHROPIC_BASE_URL {short(url)!r}: {problem}")
    return url.strip()
