"""The provider against the real SDK and the local API server: every reply shape, good or bad.

Each hostile reply must end as one named outcome: a `ModelReply` the log can hold, or a
`ProviderError` saying whether a retry can help. Nothing here fakes the SDK; the bytes come
over a socket from tests/fakeapi.
"""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from attrs import evolve
from hypothesis import given
from hypothesis import strategies as st

from ruizn.bounds import MAX_DEPTH, MAX_LINE_DEPTH
from ruizn.decide import CallModel, next_action
from ruizn.effects.models.anthropic import BODY_BLOCK, AnthropicProvider, BodyEncoder
from ruizn.effects.models.provider import ModelReply, ProviderConfigError, ProviderError
from ruizn.events import LlmResponse
from ruizn.request import build_request, plan_request
from ruizn.serde import decode, encode
from ruizn.settings import RunSettings
from ruizn.state import (
    ExecutionContext,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
)
from tests.fakeapi import (
    FakeAnthropic,
    Hang,
    HttpError,
    Raw,
    RedactedThinking,
    Stream,
    Text,
    Thinking,
    ToolUse,
    free_port,
)
from tests.fakeapi import Usage as WireUsage
from tests.fakeapi.sse import encode as sse_encode
from tests.fakeapi.sse import stream_events
from tests.properties.runs import runs_settings, simulate

pytestmark = pytest.mark.anyio
KEY = "sk-ant-test-provider-SECRET"
USAGE = WireUsage(10, 5, 2, 3)


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[FakeAnthropic] = []

    def make(*replies: Any) -> FakeAnthropic:
        server = FakeAnthropic(list(replies)).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


def _request(text: str = "hi") -> dict[str, Any]:
    return {
        "model": "claude-sonnet-5-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
    }


async def _call(
    server: FakeAnthropic, request: Any = None, **options: Any
) -> tuple[list[str], ModelReply]:
    provider = AnthropicProvider(api_key=KEY, base_url=server.base_url, **options)
    deltas: list[str] = []
    reply: ModelReply | None = None
    try:
        async for item in provider.stream(request if request is not None else _request()):
            if isinstance(item, str):
                deltas.append(item)
            else:
                assert reply is None, "exactly one ModelReply"
                reply = item
    finally:
        await provider.aclose()
    assert reply is not None
    return deltas, reply


async def _fails(server: FakeAnthropic, **options: Any) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await _call(server, **options)
    error = caught.value
    assert "\n" not in error.message
    assert KEY not in error.message
    return error


def _events(*blocks: Any, stop_reason: str = "end_turn") -> list[tuple[str, dict[str, Any]]]:
    stream = Stream(tuple(blocks), stop_reason=stop_reason)
    return [(name, data) for name, data, _ in stream_events(stream, USAGE, "msg_1")]


def _raw(events: list[tuple[str, Any]], **options: Any) -> Raw:
    body = b""
    for name, data in events:
        body += data if isinstance(data, bytes) else sse_encode(name, data)
    return Raw(body, **options)


def _find(events: list[tuple[str, dict[str, Any]]], name: str, nth: int = 0) -> dict[str, Any]:
    return [data for event, data in events if event == name][nth]


def _dumps(value: Any) -> bytes:
    """What the SDK's own encoder makes of a body (anthropic._utils._json.openapi_dumps)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _assert_loggable(reply: ModelReply) -> None:
    """The reply becomes an llm_response line that the log reader accepts as is."""
    event = LlmResponse(
        seq=2, ts=1.0, content=reply.content, stop_reason=reply.stop_reason, usage=reply.usage
    )
    assert decode(encode(event).encode()) == event


# --- good replies -----------------------------------------------------------------------


async def test_blocks_usage_and_deltas_come_through_exactly(serve: Any) -> None:
    tool_input = {"path": "a/b.md", "n": 12345678901234567890, "x": 1.5e300, "s": 'é\\"\u2028'}
    server = serve(
        Stream(
            (
                Thinking("let me think ü", "sig+/=="),
                RedactedThinking("EuYBCkQ="),
                Text("Hello, 世界!"),
                ToolUse("toolu_01", "read_file", tool_input),
            ),
            stop_reason="tool_use",
            usage=USAGE,
        )
    )
    deltas, reply = await _call(server)
    assert "".join(deltas) == "Hello, 世界!"
    assert reply.content == (
        ThinkingBlock(thinking="let me think ü", signature="sig+/=="),
        RedactedThinkingBlock(data="EuYBCkQ="),
        TextBlock(text="Hello, 世界!"),
        ToolUseBlock(id="toolu_01", name="read_file", input=tool_input),
    )
    assert reply.stop_reason == "tool_use"
    assert reply.usage == Usage(
        input_tokens=10, output_tokens=5, cache_creation_input_tokens=2, cache_read_input_tokens=3
    )
    assert reply.request_id == "req_fake_000001"
    _assert_loggable(reply)


@pytest.mark.parametrize(
    "reason", ["pause_turn", "model_context_window_exceeded", "refusal", "stop_sequence", None]
)
async def test_stop_reasons_pass_through_as_strings(serve: Any, reason: str | None) -> None:
    events = _events(Text("ok"))
    _find(events, "message_delta")["delta"]["stop_reason"] = reason
    _, reply = await _call(serve(_raw(events)))
    assert reply.stop_reason == reason


@pytest.mark.parametrize("where", ["message_start", "message_delta", "both"])
@pytest.mark.parametrize("shape", ["missing", "null", "fields null"])
async def test_missing_or_null_usage_is_zero_usage(serve: Any, where: str, shape: str) -> None:
    events = _events(Text("ok"))
    holders = []
    if where in ("message_start", "both"):
        holders.append(_find(events, "message_start")["message"])
    if where in ("message_delta", "both"):
        holders.append(_find(events, "message_delta"))
    for holder in holders:
        if shape == "missing":
            del holder["usage"]
        elif shape == "null":
            holder["usage"] = None
        else:
            holder["usage"] = dict.fromkeys(holder["usage"])
    _, reply = await _call(serve(_raw(events)))
    if where == "both":
        assert reply.usage == Usage()
    assert reply.content == (TextBlock(text="ok"),)
    _assert_loggable(reply)


async def test_server_tool_blocks_are_dropped_and_named(serve: Any) -> None:
    events = _events(Text("a"), Text("b"))
    start = _find(events, "content_block_start", 1)
    start["content_block"] = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}
    delta = _find(events, "content_block_delta", 1)
    delta["delta"] = {"type": "input_json_delta", "partial_json": '{"query": "x"}'}
    _, reply = await _call(serve(_raw(events)))
    assert reply.content == (TextBlock(text="a"),)
    assert reply.dropped_blocks == ("server_tool_use",)


async def test_duplicate_tool_use_ids_are_left_for_the_core(serve: Any) -> None:
    server = serve(
        Stream((ToolUse("toolu_1", "read_file", {}), ToolUse("toolu_1", "read_file", {"a": 1})))
    )
    _, reply = await _call(server)
    assert [b.id for b in reply.content if isinstance(b, ToolUseBlock)] == ["toolu_1", "toolu_1"]


async def test_a_body_split_anywhere_still_parses(serve: Any) -> None:
    events = _events(Text("split me into many small pieces"), ToolUse("t1", "f", {"k": "ü"}))
    _, reply = await _call(serve(_raw(events, chunks=97)))
    assert reply.content[1] == ToolUseBlock(id="t1", name="f", input={"k": "ü"})


# --- malformed replies: a retryable invalid_response ----------------------------------------


def _invalid(error: ProviderError) -> None:
    assert error.error_type == "invalid_response"
    assert error.retryable
    assert error.message.startswith("invalid response from the API: ")


@pytest.mark.parametrize("value", [1.5, -1, 10**30, "12", True, [1], {"n": 1}])
@pytest.mark.parametrize("where", ["message_start", "message_delta"])
async def test_usage_must_be_a_sane_token_count(serve: Any, value: Any, where: str) -> None:
    events = _events(Text("ok"))
    if where == "message_start":
        _find(events, where)["message"]["usage"]["input_tokens"] = value
    else:
        _find(events, where)["usage"]["output_tokens"] = value
    _invalid(await _fails(serve(_raw(events))))


@pytest.mark.parametrize(
    ("event", "path", "value"),
    [
        ("content_block_delta", ("delta", "text"), 5),
        ("content_block_delta", ("delta", "text"), None),
        ("content_block_start", ("content_block", "text"), ["x"]),
        ("content_block_start", ("content_block", "type"), 7),
        ("content_block_start", ("index",), 3),
        ("content_block_start", ("index",), "0"),
        ("content_block_delta", ("index",), 9),
        ("content_block_stop", ("index",), 4),
        ("message_delta", ("delta", "stop_reason"), 3),
        ("message_delta", ("usage",), "many"),
        ("message_start", ("message",), None),
    ],
)
async def test_wrong_types_and_indexes_are_invalid(
    serve: Any, event: str, path: tuple[str, ...], value: Any
) -> None:
    events = _events(Text("ok"))
    holder = _find(events, event)
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    _invalid(await _fails(serve(_raw(events))))


@pytest.mark.parametrize(
    ("field", "value"),
    [("thinking", 3), ("signature", None)],
)
async def test_thinking_and_signature_must_be_strings(serve: Any, field: str, value: Any) -> None:
    events = _events(Thinking("hmm", "sig"))
    delta_type = "thinking_delta" if field == "thinking" else "signature_delta"
    for name, data in events:
        if name == "content_block_delta" and data["delta"]["type"] == delta_type:
            data["delta"][field] = value
    _invalid(await _fails(serve(_raw(events))))


@pytest.mark.parametrize(
    ("start", "pieces"),
    [
        ({"id": "", "name": "f"}, ["{}"]),
        ({"name": "f"}, ["{}"]),
        ({"id": 12, "name": "f"}, ["{}"]),
        ({"id": "t1", "name": None}, ["{}"]),
        ({"id": "t1", "name": "f", "input": []}, []),
        ({"id": "t1", "name": "f"}, ["[1, 2]"]),
        ({"id": "t1", "name": "f"}, ['"text"']),
        ({"id": "t1", "name": "f"}, ['{"a": ']),
        ({"id": "t1", "name": "f"}, ['{"a": NaN}']),
        ({"id": "t1", "name": "f"}, ['{"a": Infinity}']),
        ({"id": "t1", "name": "f"}, ['{"a": "\\ud800"}']),
    ],
)
async def test_tool_use_needs_an_id_a_name_and_an_object_input(
    serve: Any, start: dict[str, Any], pieces: list[str]
) -> None:
    events: list[tuple[str, Any]] = [
        ("message_start", _find(_events(), "message_start")),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", **start},
            },
        ),
        *(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": piece},
                },
            )
            for piece in pieces
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        *_events(stop_reason="tool_use")[-2:],
    ]
    _invalid(await _fails(serve(_raw(events))))


async def test_a_lone_surrogate_in_text_is_invalid(serve: Any) -> None:
    events = _events(Text("ok"))
    body = b"".join(sse_encode(n, d) for n, d in events).replace(
        b'"text":"ok"', b'"text":"\\ud83d"'
    )
    _invalid(await _fails(serve(Raw(body))))


@pytest.mark.parametrize(
    "shape",
    [
        "no message_stop",
        "only pings",
        "empty body",
        "html 200",
        "invalid utf-8",
        "data not json",
        "data not an object",
        "block never stopped",
        "delta after stop",
        "second message_start",
        "event after message_stop",
        "delta before message_start",
        "wrong delta for the block",
    ],
)
async def test_broken_streams_are_a_retryable_invalid_response(serve: Any, shape: str) -> None:
    events: list[tuple[str, Any]] = list(_events(Text("ok")))
    options: dict[str, Any] = {}
    match shape:
        case "no message_stop":
            events = events[:-1]
        case "only pings":
            events = [("ping", {"type": "ping"})] * 5
        case "empty body":
            events = []
        case "html 200":
            events = [("", b"<html><body>Gateway says hi</body></html>")]
            options = {"content_type": "text/html"}
        case "invalid utf-8":
            events.insert(3, ("", b'event: content_block_delta\ndata: {"x": "\xff\xfe"}\n\n'))
        case "data not json":
            events.insert(3, ("", b"event: content_block_delta\ndata: {nope\n\n"))
        case "data not an object":
            events.insert(3, ("", b"event: content_block_delta\ndata: [1]\n\n"))
        case "block never stopped":
            events = [e for e in events if e[0] != "content_block_stop"]
        case "delta after stop":
            stop = next(i for i, e in enumerate(events) if e[0] == "content_block_stop")
            events.insert(stop + 1, events[stop - 1])
        case "second message_start":
            events.insert(2, events[0])
        case "event after message_stop":
            events.append(events[-2])
        case "delta before message_start":
            events.insert(0, ("content_block_delta", _find(events, "content_block_delta")))
        case "wrong delta for the block":
            _find(events, "content_block_delta")["delta"] = {
                "type": "thinking_delta",
                "thinking": "x",
            }
    _invalid(await _fails(serve(_raw(events, **options))))


async def test_a_tool_use_cut_by_max_tokens_is_kept_unrun(serve: Any) -> None:
    server = serve(
        Stream(
            (Text("ok"), ToolUse("t1", "f", {"long": "x" * 50})),
            stop_reason="max_tokens",
            incomplete_last_tool=True,
        )
    )
    _, reply = await _call(server)
    assert reply.stop_reason == "max_tokens"
    assert reply.content[1] == ToolUseBlock(id="t1", name="f", input={})


# --- HTTP failures: retryable or not, with the server's requested wait ----------------------


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 529])
async def test_transient_statuses_are_retryable(serve: Any, status: int) -> None:
    error = await _fails(serve(HttpError(status, "overloaded_error", "busy")))
    assert error.retryable
    assert error.status_code == status
    assert error.request_id == "req_fake_000001"
    assert error.retry_after is None


@pytest.mark.parametrize(
    ("status", "error_type", "says"),
    [
        (400, "invalid_request_error", "invalid request: bad"),
        (401, "authentication_error", "authentication failed: check ANTHROPIC_API_KEY"),
        (403, "permission_error", "authentication failed: check ANTHROPIC_API_KEY"),
        (404, "not_found_error", "model not found: 'claude-sonnet-5-5'"),
        (413, "request_too_large", "HTTP 413 request_too_large"),
    ],
)
async def test_final_statuses_are_not_retryable(
    serve: Any, status: int, error_type: str, says: str
) -> None:
    message = "model: claude-sonnet-5-5" if status == 404 else "bad"
    error = await _fails(serve(HttpError(status, error_type, message)))
    assert not error.retryable
    assert says in error.message
    assert error.status_code == status


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, None),
    ],
)
async def test_retry_after_comes_from_the_headers(
    serve: Any, headers: dict[str, str], expected: float | None
) -> None:
    error = await _fails(serve(HttpError(429, "rate_limit_error", "slow down", headers)))
    assert error.retryable
    assert error.retry_after == expected


async def test_retry_after_as_an_http_date(serve: Any) -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    error = await _fails(serve(HttpError(503, "api_error", "down", {"retry-after": when})))
    assert error.retry_after is not None
    assert 25 <= error.retry_after <= 31


async def test_x_should_retry_overrides_the_status(serve: Any) -> None:
    no = await _fails(serve(HttpError(500, "api_error", "x", {"x-should-retry": "false"})))
    yes = await _fails(
        serve(HttpError(400, "invalid_request_error", "x", {"x-should-retry": "true"}))
    )
    assert (no.retryable, yes.retryable) == (False, True)


@pytest.mark.parametrize("status", [301, 302, 307, 308])
async def test_a_redirect_is_a_clear_final_error(serve: Any, status: int) -> None:
    server = serve(
        Raw(
            b"",
            status=status,
            content_type="text/plain",
            headers={"location": "https://elsewhere.example/v1/messages"},
        )
    )
    error = await _fails(server)
    assert not error.retryable
    assert error.status_code == status
    assert error.error_type == "redirect"
    assert f"HTTP {status} redirect to https://elsewhere.example/v1/messages" in error.message
    assert "check ANTHROPIC_BASE_URL" in error.message
    assert len(server.requests) == 1  # not followed


async def test_an_html_error_page_is_one_short_line(serve: Any) -> None:
    page = (
        b"<html>\n<head><title>502 Bad Gateway</title></head>\n<body>"
        + b"x" * 5000
        + b"</body></html>"
    )
    error = await _fails(serve(Raw(page, status=502, content_type="text/html")))
    assert error.retryable
    assert error.message.startswith("HTTP 502 http_502: <html> <head><title>502 Bad Gateway")
    assert len(error.message) < 300


async def test_mid_stream_errors(serve: Any) -> None:
    overloaded = await _fails(serve(Stream((Text("partial answer"),), error_after=4)))
    assert overloaded.retryable
    assert overloaded.error_type == "overloaded_error"
    assert overloaded.request_id == "req_fake_000001"
    events = _events(Text("x"))
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": "no"}}
    final = await _fails(serve(_raw([*events[:3], ("error", body)])))
    assert not final.retryable
    assert final.error_type == "invalid_request_error"


async def test_dropped_and_stalled_streams_are_retryable(serve: Any) -> None:
    dropped = await _fails(serve(Stream((Text("abc" * 20),), drop_after=4)))
    assert (dropped.error_type, dropped.retryable) == ("connection_error", True)
    stalled = await _fails(
        serve(Stream((Text("abc"),), stall_after=3, stall_seconds=5)), read_timeout=0.3
    )
    assert (stalled.error_type, stalled.retryable) == ("stream_timeout", True)
    hung = await _fails(serve(Hang(5)), read_timeout=0.3)
    assert (hung.error_type, hung.retryable) == ("timeout", True)


async def test_connection_refused_is_retryable() -> None:
    provider = AnthropicProvider(api_key=KEY, base_url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ProviderError) as caught:
        async for _ in provider.stream(_request()):
            pass
    await provider.aclose()
    assert (caught.value.error_type, caught.value.retryable) == ("connection_error", True)
    assert caught.value.status_code is None


async def test_the_sdk_does_not_retry(serve: Any) -> None:
    server = serve(HttpError(529, "overloaded_error", "busy"), Stream((Text("late"),)))
    await _fails(server)
    assert len(server.requests) == 1


# --- configuration ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["ftp://host/x", "localhost:8080", "http://", "not a url", "http://[::1"]
)
def test_a_malformed_base_url_is_a_config_error(url: str) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        AnthropicProvider(api_key=KEY, base_url=url)
    assert caught.value.args[0].startswith("invalid ANTHROPIC_BASE_URL")
    assert "\n" not in caught.value.args[0]


def test_a_key_with_inner_junk_is_refused_and_never_echoed() -> None:
    with pytest.raises(ProviderConfigError) as caught:
        AnthropicProvider(api_key=KEY + "\x00x", base_url="http://127.0.0.1:9")
    assert KEY not in str(caught.value)


async def test_a_key_with_a_trailing_newline_is_stripped(serve: Any) -> None:
    server = serve(Stream((Text("ok"),)))
    provider = AnthropicProvider(api_key=KEY + "\r\n", base_url=server.base_url)
    async for _ in provider.stream(_request()):
        pass
    await provider.aclose()
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


# --- the request body ---------------------------------------------------------------------


def _state(turns: int, *, pad: int = 0) -> ExecutionContext:
    messages: list[Message] = [Message(role="user", content=(TextBlock(text="go 读"),))]
    for i in range(turns):
        call = ToolUseBlock(id=f"toolu_{i}", name="read_file", input={"path": f"f{i}", "n": 1.0})
        messages.append(Message(role="assistant", content=(TextBlock(text=" "), call)))
        text = f"body {i}\n" + "é" * pad
        result = ToolResultBlock(tool_use_id=call.id, content=text, is_error=i % 2 == 1)
        messages.append(Message(role="user", content=(result,)))
    return ExecutionContext(
        run_id="r",
        goal="go",
        settings=RunSettings(
            model="claude-sonnet-5-5",
            max_steps=99,
            system="be brief",
            tools=({"name": "read_file", "input_schema": {"type": "object"}},),
        ),
        messages=tuple(messages),
    )


async def test_the_body_sent_is_the_cores_request_byte_for_byte(serve: Any) -> None:
    server = serve(*[Stream((Text("ok"),))] * 16)
    provider = AnthropicProvider(api_key=KEY, base_url=server.base_url)
    states = [_state(n) for n in range(4)]
    # The history grows by whole messages, as the runner's does: the same objects each step.
    grown = [states[3]]
    for n in range(3):
        grown.append(evolve(states[3], messages=states[3].messages[: 2 * n + 1]))
    for state in [*states, *grown]:
        for request in (plan_request(state), build_request(state)):
            async for _ in provider.stream(request):
                pass
    await provider.aclose()
    expected = [
        _dumps({**build_request(state), "stream": True})
        for state in [*states, *grown]
        for _ in "ab"
    ]
    assert [r.raw for r in server.requests] == expected
    # ...which is also what the SDK's encoder would make of that JSON
    for sent in server.requests:
        body = json.loads(sent.raw)
        assert (
            sent.raw
            == json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        )
        assert sent.headers["content-type"] == "application/json"


async def test_a_long_history_is_sent_in_blocks_as_one_exact_plain_body(serve: Any) -> None:
    # Past BODY_BLOCK bytes of history the body goes out in blocks, with its length given.
    long = _state(40, pad=2_000)  # about 170 KB of history
    states = [long, evolve(long, messages=long.messages[:41]), _state(2), long]
    assert len(BodyEncoder().chunks(plan_request(long))) > 2  # the blocks' way is taken
    server = serve(*[Stream((Text("ok"),))] * len(states))
    provider = AnthropicProvider(api_key=KEY, base_url=server.base_url)
    for state in states:
        async for _ in provider.stream(plan_request(state)):
            pass
    await provider.aclose()
    expected = [_dumps({**build_request(state), "stream": True}) for state in states]
    assert len(expected[0]) > 2 * BODY_BLOCK
    assert [r.raw for r in server.requests] == expected
    for sent in server.requests:  # a plain body: not chunked, its length declared
        assert sent.headers["content-length"] == str(len(sent.raw))
        assert "transfer-encoding" not in sent.headers


@runs_settings(40)
@given(st.data(), st.integers(1, 6), st.integers(1, 600))
def test_the_cached_body_equals_a_fresh_encoding_on_every_step(
    data: st.DataObject, max_steps: int, block: int
) -> None:
    run = simulate(data, max_steps=max_steps)
    encoder = BodyEncoder()  # one encoder for the whole run: its cache is exercised
    small = BodyEncoder(block=block)  # ...and one whose blocks fill within a few messages
    for state in run.states:
        if isinstance(next_action(state), CallModel):
            fresh = _dumps({**build_request(state), "stream": True})
            assert encoder.encode(plan_request(state)) == fresh
            assert b"".join(small.chunks(plan_request(state))) == fresh
            assert json.loads(fresh) == {**build_request(state), "stream": True}


async def test_cancellation_goes_through_a_stalled_stream(serve: Any) -> None:
    server = serve(Stream((Text("abc"),), stall_after=3, stall_seconds=30))
    provider = AnthropicProvider(api_key=KEY, base_url=server.base_url)
    began = time.monotonic()
    with anyio.move_on_after(0.3) as scope:
        async for _ in provider.stream(_request()):
            pass
    await provider.aclose()
    assert scope.cancelled_caught
    assert time.monotonic() - began < 5


def test_equal_messages_with_different_json_are_not_confused() -> None:
    state = _state(3)
    first = state.messages[1]
    call = next(b for b in first.content if isinstance(b, ToolUseBlock))
    twin = Message(
        role="assistant",
        content=(TextBlock(text=" "), evolve(call, input={"path": call.input["path"], "n": 1})),
    )
    assert twin == first  # 1 == 1.0, yet the JSON differs
    other = evolve(state, messages=(state.messages[0], twin, *state.messages[2:]))
    encoder = BodyEncoder()
    small = BodyEncoder(block=1)  # every message its own block
    for each in (state, other, state):
        fresh = _dumps({**build_request(each), "stream": True})
        assert encoder.encode(plan_request(each)) == fresh
        assert b"".join(small.chunks(plan_request(each))) == fresh
    assert b'"n":1}' in encoder.encode(plan_request(other))


# --- depth: refused before anything recursive walks it, one way at every depth --------------

DEEP = [MAX_DEPTH + 1, 600, 3_000, 100_000]


def _nested_text(depth: int) -> str:
    """A tool input `depth` levels deep, as JSON text (the object is level 1)."""
    return '{"path": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def _tool_events(
    depth: int, *, in_start: bool = False, closed: bool = True
) -> list[tuple[str, Any]]:
    """A reply with one tool_use whose input is `depth` deep: streamed in input_json_delta
    pieces as the API sends it, or whole in content_block_start (which the API never does)."""
    start_input = "{}"
    pieces: list[str] = []
    text = _nested_text(depth)
    if in_start:
        start_input = text
    else:
        pieces = [text[i : i + 1000] for i in range(0, len(text), 1000)]
    head = _find(_events(), "message_start")
    block_start = (
        '{"type":"content_block_start","index":0,"content_block":'
        f'{{"type":"tool_use","id":"toolu_1","name":"read_file","input":{start_input}}}}}'
    )
    events: list[tuple[str, Any]] = [
        ("message_start", head),
        ("", f"event: content_block_start\ndata: {block_start}\n\n".encode()),
        *(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": piece},
                },
            )
            for piece in pieces
        ),
    ]
    if closed:
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
    tail = _events(stop_reason="tool_use" if closed else "max_tokens")[-2:]
    return [*events, *tail]


@pytest.mark.parametrize("depth", DEEP)
async def test_a_too_deep_streamed_tool_input_is_one_invalid_response(
    serve: Any, depth: int
) -> None:
    error = await _fails(serve(_raw(_tool_events(depth))))
    _invalid(error)
    assert error.message == (
        f"invalid response from the API: tool_use 'toolu_1' input is nested deeper than"
        f" {MAX_DEPTH} levels"
    )


async def test_a_tool_input_at_the_limit_comes_through(serve: Any) -> None:
    _, reply = await _call(serve(_raw(_tool_events(MAX_DEPTH))))
    block = reply.content[0]
    assert isinstance(block, ToolUseBlock)
    assert block.input == json.loads(_nested_text(MAX_DEPTH))
    _assert_loggable(reply)


@pytest.mark.parametrize("depth", DEEP)
async def test_a_too_deep_input_cut_by_max_tokens_is_kept_unrun(serve: Any, depth: int) -> None:
    _, reply = await _call(serve(_raw(_tool_events(depth, closed=False))))
    assert reply.stop_reason == "max_tokens"
    assert reply.content == (ToolUseBlock(id="toolu_1", name="read_file", input={}),)


@pytest.mark.parametrize("depth", DEEP)
async def test_a_too_deep_input_in_content_block_start_is_an_invalid_response(
    serve: Any, depth: int
) -> None:
    error = await _fails(serve(_raw(_tool_events(depth, in_start=True))))
    _invalid(error)
    # The input sits three levels down the event: past MAX_LINE_DEPTH, the event is refused.
    what = (
        f"tool_use 'toolu_1' input is nested deeper than {MAX_DEPTH} levels"
        if depth + 3 <= MAX_LINE_DEPTH
        else f"an event's data is nested deeper than {MAX_LINE_DEPTH} levels"
    )
    assert error.message == f"invalid response from the API: {what}"


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", DEEP)
async def test_deep_json_anywhere_in_the_stream_is_an_invalid_response(
    serve: Any, depth: int
) -> None:
    events = _events(Text("ok"))
    head = json.dumps(_find(events, "message_start"))[:-1] + f',"extra":{_deep(depth)}}}'
    events[0] = ("", f"event: message_start\ndata: {head}\n\n".encode())
    if depth + 1 <= MAX_LINE_DEPTH:  # a field ruizn does not read, shallow enough to skip
        _, reply = await _call(serve(_raw(events)))
        assert reply.content == (TextBlock(text="ok"),)
        return
    error = await _fails(serve(_raw(events)))
    _invalid(error)
    assert error.message == (
        f"invalid response from the API: an event's data is nested deeper than"
        f" {MAX_LINE_DEPTH} levels"
    )


@pytest.mark.parametrize("depth", DEEP)
async def test_a_deep_error_event_is_a_retryable_error(serve: Any, depth: int) -> None:
    events = _events(Text("x"))
    data = f'{{"type":"error","error":{{"type":"overloaded_error","message":{_deep(depth)}}}}}'
    error = await _fails(
        serve(_raw([*events[:3], ("", f"event: error\ndata: {data}\n\n".encode())]))
    )
    assert error.retryable
    assert len(error.message) < 300 or depth + 3 <= MAX_LINE_DEPTH


@pytest.mark.parametrize("depth", DEEP)
async def test_a_deep_http_error_body_is_a_retryable_error(serve: Any, depth: int) -> None:
    body = f'{{"type":"error","error":{{"type":"api_error","message":{_deep(depth)}}}}}'
    error = await _fails(serve(Raw(body.encode(), status=500, content_type="application/json")))
    assert error.retryable
    assert error.status_code == 500
    assert error.message.startswith("HTTP 500 ")
