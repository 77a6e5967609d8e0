"""The fake API against the real SDK: everything it sends must parse as the real API's does.

What these tests hold is the fake's side: each fault reaches the client as the failure a
real API's would be. Which class the SDK wraps it in is the SDK's business and changes
between the versions pyproject allows: a body cut mid-stream or a read that times out came
out of httpx2 unwrapped up to 2.16, and 2.17 wraps them in APIConnectionError and
APITimeoutError. So a cut body or a stall is asserted as either, never as one SDK's class.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import Message

from tests.fakeapi import (
    FakeAnthropic,
    Hang,
    HttpError,
    Recording,
    RedactedThinking,
    Reply,
    Script,
    Stream,
    Text,
    Thinking,
    ToolUse,
    Usage,
    free_port,
    tool_loop,
)
from tests.fakeapi.sse import split_fragments

# A body cut mid-stream, and a read that timed out, as the SDK versions pyproject allows
# raise them (see the module docstring); ruizn's provider classifies both the same way.
BROKEN_BODY = (anthropic.APIConnectionError, httpx2.RemoteProtocolError)
READ_TIMED_OUT = (anthropic.APITimeoutError, httpx2.ReadTimeout)

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT.parent / "shared" / "anthropic-recordings"
MODEL = "claude-sonnet-5-5"
HI: list[Any] = [{"role": "user", "content": "hi"}]

Factory = Callable[[Script], FakeAnthropic]


@pytest.fixture
def fake() -> Iterator[Factory]:
    """Start servers on demand; all are stopped at teardown."""
    servers: list[FakeAnthropic] = []

    def make(script: Script) -> FakeAnthropic:
        servers.append(FakeAnthropic(script).start())
        return servers[-1]

    yield make
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def base_client() -> Iterator[anthropic.Anthropic]:
    # One HTTP client for the module: building one costs ~0.1 s (its TLS context).
    with anthropic.Anthropic(base_url="http://127.0.0.1:9", api_key="sk-test") as client:
        yield client


@pytest.fixture
def clients(base_client: anthropic.Anthropic) -> Callable[..., anthropic.Anthropic]:
    def make(server: FakeAnthropic, **options: Any) -> anthropic.Anthropic:
        options.setdefault("max_retries", 0)
        return base_client.with_options(base_url=server.base_url, **options)

    return make


def _final(client: anthropic.Anthropic, messages: list[Any] = HI, **extra: Any) -> Message:
    with client.messages.stream(model=MODEL, max_tokens=64, messages=messages, **extra) as s:
        return s.get_final_message()


def _raw_events(server: FakeAnthropic, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The SSE events as sent (pings included, which the SDK hides)."""
    conn = http.client.HTTPConnection(server.base_url.removeprefix("http://"), timeout=5)
    conn.request("POST", "/v1/messages", json.dumps({"stream": True, **body}))
    text = conn.getresponse().read().decode()
    conn.close()
    events = []
    for chunk in text.split("\n\n"):
        if chunk.strip():
            name, data = chunk.split("\n")
            events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


def _in_background(client: anthropic.Anthropic) -> tuple[threading.Thread, list[Exception]]:
    """Stream one reply on a thread; the list gets what it raised."""
    errors: list[Exception] = []

    def consume() -> None:
        try:
            _final(client)
        except Exception as err:
            errors.append(err)

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    return thread, errors


def _post(server: FakeAnthropic, path: str, raw: bytes) -> tuple[int, dict[str, str], Any]:
    conn = http.client.HTTPConnection(server.base_url.removeprefix("http://"), timeout=5)
    conn.request("POST", path, raw, {"content-type": "application/json"})
    response = conn.getresponse()
    body = json.loads(response.read())
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, body


# --- the reply kinds ------------------------------------------------------------------------


def test_text_reply_with_usage_and_request_id(fake: Factory, clients: Any) -> None:
    usage = Usage(input_tokens=12, output_tokens=3, cache_read_input_tokens=7)
    server = fake([Stream((Text("你好, world! ✓", chunk=4),), usage=usage)])
    client = clients(server)
    with client.messages.stream(model=MODEL, max_tokens=64, messages=HI) as s:
        deltas = list(s.text_stream)
        message = s.get_final_message()
        assert s.request_id == "req_fake_000001"
        assert s.response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert deltas == ["你好, ", "worl", "d! ✓"]  # by characters, not bytes
    assert message.content[0].type == "text"
    assert message.content[0].text == "你好, world! ✓"
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (12, 3)
    assert message.usage.cache_read_input_tokens == 7
    assert message.model == MODEL


def test_wire_order_ping_and_message_delta_usage(fake: Factory) -> None:
    server = fake([Stream((Text("ab", chunk=1), Text("c")), usage=Usage(5, 2))])
    events = _raw_events(server, {"model": MODEL, "messages": HI})
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",  # right after the first block opens, as the API does
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert all(data["type"] == name for name, data in events)
    assert [d["index"] for n, d in events if n.startswith("content_block")] == [0, 0, 0, 0, 1, 1, 1]
    delta = events[-2][1]
    assert delta["delta"] == {
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "stop_details": None,
    }
    assert delta["usage"] == {
        "input_tokens": 5,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 2,
    }


def test_tool_use_fragmented_json_reassembles_exactly(fake: Factory, clients: Any) -> None:
    value = {
        "path": 'dir/"quoted"\\file\n.txt',
        "escapes": "\\" * 20 + '"' * 10,
        "n": [1, 2.5, None, True],
        "说": {"a": ""},
    }
    reply = Stream(
        (Text("Reading."), ToolUse("toolu_01", "read_file", value)), stop_reason="tool_use"
    )
    server = fake([reply, reply])
    message = _final(clients(server))
    assert message.stop_reason == "tool_use"
    tool = message.content[1]
    assert tool.type == "tool_use"
    assert (tool.id, tool.name, tool.input) == ("toolu_01", "read_file", value)
    events = _raw_events(server, {"model": MODEL, "messages": HI})
    parts = [
        d["delta"]["partial_json"]
        for n, d in events
        if n == "content_block_delta" and d["index"] == 1
    ]
    assert parts[0] == ""  # the API opens every tool input with an empty fragment
    assert json.loads("".join(parts)) == value
    cuts = {_where("".join(parts[:i])) for i in range(2, len(parts))}
    assert {"key", "escape"} <= cuts  # pieces end mid-key and mid-escape, as the API's do


def _where(prefix: str) -> str:
    """Where a cut after `prefix` of a JSON text falls: "key", "escape", "string" or ""."""
    in_string = is_key = escaped = False
    last = ""  # the last structural character outside strings
    for char in prefix:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string, is_key = True, last in "{,"
        elif not char.isspace():
            last = char
    if escaped:
        return "escape"
    return ("key" if is_key else "string") if in_string else ""


def test_fragment_cuts_are_the_same_in_every_process() -> None:
    code = "from tests.fakeapi.sse import split_fragments as s; print(s('x' * 200, 'toolu_01'))"
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert runs == {f"{split_fragments('x' * 200, 'toolu_01')}\n"}


def test_thinking_signature_and_redacted_thinking_survive(fake: Factory, clients: Any) -> None:
    blocks = (
        Thinking('Let me think about "this" carefully…', "EuYDCmMIDBgC+sig=="),
        RedactedThinking("EqkECkYIBxgCKkA8AZ4no=="),
        Text("Answer."),
    )
    message = _final(clients(fake([Stream(blocks)])))
    thinking, redacted, text = message.content
    assert thinking.type == "thinking"
    assert thinking.thinking == 'Let me think about "this" carefully…'
    assert thinking.signature == "EuYDCmMIDBgC+sig=="
    assert redacted.type == "redacted_thinking"
    assert redacted.data == "EqkECkYIBxgCKkA8AZ4no=="
    assert text.type == "text"
    assert text.text == "Answer."


def test_stop_sequence_names_the_requests_sequence(fake: Factory, clients: Any) -> None:
    server = fake([Stream((Text("a"),), stop_reason="stop_sequence")])
    message = _final(clients(server), stop_sequences=["```"])
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "```")


def test_incomplete_last_tool_is_cut_without_a_stop(fake: Factory, clients: Any) -> None:
    value = {"filename": "taxes.txt", "lines": ["one", "two", "three", "four"]}
    reply = Stream(
        (Text("Writing."), ToolUse("toolu_cut", "make_file", value)),
        stop_reason="max_tokens",
        incomplete_last_tool=True,
    )
    server = fake([reply, reply])
    message = _final(clients(server))
    assert message.stop_reason == "max_tokens"
    tool = message.content[1]
    assert tool.type == "tool_use"
    assert tool.input != value
    assert tool.input == {"filename": "taxes.txt"}  # the SDK's partial parse drops the cut tail
    events = _raw_events(server, {"model": MODEL, "messages": HI})
    stops = [d["index"] for n, d in events if n == "content_block_stop"]
    assert stops == [0]
    assert [n for n, _ in events][-2:] == ["message_delta", "message_stop"]


def test_non_stream_request_gets_the_message_json(fake: Factory, clients: Any) -> None:
    value = {"path": "README.md"}
    reply = Stream((Text("Hi."), ToolUse("toolu_9", "read_file", value)), stop_reason="tool_use")
    client = clients(fake([reply]))
    message = client.messages.create(model=MODEL, max_tokens=64, messages=HI)
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[1].type == "tool_use"
    assert message.content[1].input == value
    assert message.stop_reason == "tool_use"


@pytest.mark.anyio
async def test_async_client_streams_too(fake: Factory) -> None:
    server = fake(tool_loop(1))
    async with (
        anthropic.AsyncAnthropic(base_url=server.base_url, api_key="sk-test", max_retries=0) as c,
        c.messages.stream(model=MODEL, max_tokens=64, messages=HI) as s,
    ):
        message = await s.get_final_message()
    assert message.stop_reason == "tool_use"
    assert message.content[1].type == "tool_use"
    assert message.content[1].input == {"path": "README.md"}


# --- faults ---------------------------------------------------------------------------------

LONG = Stream((Text("one two three four five six"),))


def test_error_after_raises_a_status_error_mid_stream(fake: Factory, clients: Any) -> None:
    server = fake([Stream(LONG.blocks, error_after=5)])
    client = clients(server)
    seen: list[str] = []
    with (
        pytest.raises(anthropic.APIStatusError) as caught,
        client.messages.stream(model=MODEL, max_tokens=64, messages=HI) as s,
    ):
        seen.extend(s.text_stream)
    # Status 200 (the stream had begun), so it is the base class, not OverloadedError.
    assert type(caught.value) is anthropic.APIStatusError
    assert caught.value.status_code == 200
    body: Any = caught.value.body
    assert body["error"] == {"details": None, "type": "overloaded_error", "message": "Overloaded"}
    assert body["request_id"] == "req_fake_000001"
    assert seen == ["one ", "two "]  # after message_start, block start, ping and two deltas


def test_drop_after_breaks_the_stream_with_an_httpx2_error(fake: Factory, clients: Any) -> None:
    server = fake([Stream(LONG.blocks, drop_after=4)] * 3)
    client = clients(server, max_retries=2)
    with (
        pytest.raises(BROKEN_BODY, match="incomplete chunked read"),
        client.messages.stream(model=MODEL, max_tokens=64, messages=HI) as s,
    ):
        s.get_final_message()
    assert len(server.requests) == 1  # the SDK never retries once the body has begun


def test_stall_times_out_a_client_with_a_short_timeout(fake: Factory, clients: Any) -> None:
    server = fake([Stream(LONG.blocks, stall_after=3, stall_seconds=3)])
    client = clients(server, timeout=0.3)
    began = time.monotonic()
    with (
        pytest.raises(READ_TIMED_OUT),
        client.messages.stream(model=MODEL, max_tokens=64, messages=HI) as s,
    ):
        s.get_final_message()
    assert time.monotonic() - began < 2


def test_a_short_stall_then_continues(fake: Factory, clients: Any) -> None:
    server = fake([Stream(LONG.blocks, stall_after=2, stall_seconds=0.2)])
    began = time.monotonic()
    message = _final(clients(server))
    assert time.monotonic() - began >= 0.2
    assert message.content[0].type == "text"
    assert message.content[0].text == "one two three four five six"


def test_token_delay_trickles_and_stop_cuts_it_short(fake: Factory, clients: Any) -> None:
    server = fake(
        [Stream((Text("abcdef", chunk=1),), token_delay=0.03), Stream(LONG.blocks, token_delay=10)]
    )
    client = clients(server)
    began = time.monotonic()
    assert _final(client).content[0].type == "text"
    assert time.monotonic() - began >= 6 * 0.03
    thread, errors = _in_background(client)
    time.sleep(0.1)
    began = time.monotonic()
    server.stop()
    assert time.monotonic() - began < 1
    thread.join(5)
    assert not thread.is_alive()
    assert isinstance(errors[0], BROKEN_BODY)


def test_429_is_retried_and_the_next_reply_succeeds(fake: Factory, clients: Any) -> None:
    server = fake([HttpError(429, "rate_limit_error", "slow down", {"retry-after-ms": "10"}), LONG])
    message = _final(clients(server, max_retries=2))
    assert message.content[0].type == "text"
    assert len(server.requests) == 2
    assert server.requests[1].headers["x-stainless-retry-count"] == "1"


def test_429_after_all_retries_is_a_rate_limit_error(fake: Factory, clients: Any) -> None:
    server = fake([HttpError(429, "rate_limit_error", "slow down", {"retry-after-ms": "1"})] * 3)
    with pytest.raises(anthropic.RateLimitError) as caught:
        _final(clients(server, max_retries=2))
    assert len(server.requests) == 3
    assert caught.value.request_id == "req_fake_000003"
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
        "request_id": "req_fake_000003",
    }


@pytest.mark.parametrize(
    ("status", "error_type", "exception"),
    [
        (400, "invalid_request_error", anthropic.BadRequestError),
        (401, "authentication_error", anthropic.AuthenticationError),
        (403, "permission_error", anthropic.PermissionDeniedError),
        (404, "not_found_error", anthropic.NotFoundError),
        (413, "request_too_large", anthropic.ContentTooLargeError),
        (500, "api_error", anthropic.InternalServerError),
        (529, "overloaded_error", anthropic.OverloadedError),
    ],
)
def test_http_errors_map_to_sdk_classes(
    status: int, error_type: str, exception: type[Exception], fake: Factory, clients: Any
) -> None:
    server = fake([HttpError(status, error_type, "nope", {"x-should-retry": "false"})] * 3)
    with pytest.raises(exception) as caught:
        _final(clients(server, max_retries=2))
    assert type(caught.value) is exception
    assert len(server.requests) == 1  # x-should-retry: false is obeyed


def test_hang_times_out_and_stop_does_not_wait_for_it(fake: Factory, clients: Any) -> None:
    server = fake([Hang(30), Hang(30)])
    client = clients(server, timeout=0.3)
    with pytest.raises(anthropic.APITimeoutError):
        _final(client)
    # A second Hang in progress: stop() must still return at once, and so must the client.
    thread, errors = _in_background(clients(server, timeout=10))
    time.sleep(0.1)
    began = time.monotonic()
    server.stop()
    assert time.monotonic() - began < 1
    thread.join(5)
    assert time.monotonic() - began < 2
    assert type(errors[0]) is anthropic.APIConnectionError


def test_a_hang_then_close_is_a_connection_error(fake: Factory, clients: Any) -> None:
    server = fake([Hang(0.05)])
    with pytest.raises(anthropic.APIConnectionError) as caught:
        _final(clients(server))
    assert type(caught.value) is anthropic.APIConnectionError
    assert isinstance(caught.value.__cause__, httpx2.RemoteProtocolError)


def test_a_hang_does_not_block_other_connections(fake: Factory, clients: Any) -> None:
    server = fake(lambda body, index: Hang(30) if index == 0 else LONG)
    hung = clients(server, timeout=5)
    thread, errors = _in_background(hung)
    while not server.requests:
        time.sleep(0.01)
    began = time.monotonic()
    assert _final(clients(server)).content[0].type == "text"
    assert time.monotonic() - began < 1
    server.stop()
    thread.join(5)
    assert len(errors) == 1


def test_connection_refused_is_an_api_connection_error() -> None:
    client = anthropic.Anthropic(
        base_url=f"http://127.0.0.1:{free_port()}", api_key="k", max_retries=0
    )
    with pytest.raises(anthropic.APIConnectionError) as caught:
        _final(client)
    assert type(caught.value) is anthropic.APIConnectionError
    assert isinstance(caught.value.__cause__, httpx2.ConnectError)


def test_script_exhausted_fails_loudly(fake: Factory, clients: Any) -> None:
    server = fake([LONG])
    client = clients(server)
    _final(client)
    with pytest.raises(anthropic.InternalServerError, match="script exhausted after 1 replies"):
        _final(client)


def test_a_scenario_that_raises_is_a_500(fake: Factory, clients: Any) -> None:
    def broken(body: dict[str, Any], index: int) -> Reply:
        raise KeyError("oops")

    with pytest.raises(anthropic.InternalServerError, match="script raised KeyError"):
        _final(clients(fake(broken)))


def test_other_routes_are_404_and_bad_json_is_400(fake: Factory) -> None:
    server = fake([])
    status, headers, body = _post(server, "/v1/complete", b"{}")
    assert (status, body["type"], body["error"]["type"]) == (404, "error", "not_found_error")
    assert headers["request-id"].startswith("req_fake_")
    status, headers, body = _post(server, "/v1/messages?beta=true", b"{not json")
    assert (status, body["error"]["type"]) == (400, "invalid_request_error")
    assert body["request_id"] == headers["request-id"]
    assert server.requests == []


# --- recordings -----------------------------------------------------------------------------

needs_recordings = pytest.mark.skipif(
    not RECORDINGS.is_dir(), reason=f"no recorded API traffic at {RECORDINGS}"
)
SSE_STEMS = sorted(p.name.removesuffix(".response.sse") for p in RECORDINGS.glob("*.response.sse"))


@needs_recordings
@pytest.mark.parametrize("stem", SSE_STEMS)
def test_every_recorded_stream_parses_with_the_sdk(stem: str, fake: Factory, clients: Any) -> None:
    text = (RECORDINGS / f"{stem}.response.sse").read_text()
    datas = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    stop_reason = next(d["delta"]["stop_reason"] for d in datas if d["type"] == "message_delta")
    starts = sum(d["type"] == "content_block_start" for d in datas)
    message = _final(clients(fake([Recording(RECORDINGS / stem)])))
    assert message.stop_reason == stop_reason
    assert len(message.content) == starts


@needs_recordings
@pytest.mark.parametrize(
    ("stem", "exception"),
    [
        ("20_error_401_auth_stream_request", anthropic.AuthenticationError),
        ("21_error_404_model_not_found_stream_request", anthropic.NotFoundError),
        ("22_error_400_invalid_request", anthropic.BadRequestError),
    ],
)
def test_recorded_errors_raise_the_sdk_classes(
    stem: str, exception: type[Exception], fake: Factory, clients: Any
) -> None:
    server = fake([Recording(RECORDINGS / stem)] * 3)
    with pytest.raises(exception) as caught:
        _final(clients(server, max_retries=2))
    assert type(caught.value) is exception
    assert len(server.requests) == 1


@needs_recordings
@pytest.mark.parametrize(
    "stem",
    [
        "24_nonstream_toplevel_auto_cache_read_and_write_sonnet45",
        "25_nonstream_parallel_tool_use_sonnet4",
    ],
)
def test_recorded_non_stream_messages_parse(stem: str, fake: Factory, clients: Any) -> None:
    recorded = json.loads((RECORDINGS / f"{stem}.response.json").read_text())
    client = clients(fake([Recording(RECORDINGS / stem)]))
    message = client.messages.create(model=MODEL, max_tokens=64, messages=HI)
    assert message.id == recorded["id"]
    assert len(message.content) == len(recorded["content"])


# --- prompt-cache emulation -----------------------------------------------------------------

SYSTEM = [{"type": "text", "text": "You are terse. " * 40, "cache_control": {"type": "ephemeral"}}]


def _user(text: str, *, mark: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if mark:
        block["cache_control"] = {"type": "ephemeral"}
    return {"role": "user", "content": [block]}


def test_the_same_request_twice_reads_the_cache(fake: Factory, clients: Any) -> None:
    client = clients(fake([LONG, LONG]))
    first = _final(client, system=SYSTEM).usage
    second = _final(client, system=SYSTEM).usage
    assert first.cache_creation_input_tokens
    assert first.cache_read_input_tokens == 0
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0
    assert second.input_tokens == first.input_tokens  # the uncached user turn


def test_a_rolling_breakpoint_reads_the_earlier_prefix(fake: Factory, clients: Any) -> None:
    client = clients(fake([LONG, LONG, LONG]))
    turn1 = [_user("Read the README please. " * 5, mark=True)]
    first = _final(client, messages=turn1, system=SYSTEM).usage
    total1 = first.input_tokens + (first.cache_creation_input_tokens or 0)
    assert first.input_tokens == 0  # everything up to the last breakpoint was written
    turn2 = [
        _user("Read the README please. " * 5, mark=False),  # the breakpoint moved on
        {"role": "assistant", "content": [{"type": "text", "text": "It says hello."}]},
        _user("Thanks. Now summarise it. " * 5, mark=True),
    ]
    second = _final(client, messages=turn2, system=SYSTEM).usage
    assert second.cache_read_input_tokens == total1
    assert second.cache_creation_input_tokens
    assert second.input_tokens == 0
    # No cache_control at all: the API does not look the cache up.
    third = _final(client, messages=[_user("Read the README please. " * 5, mark=False)]).usage
    assert (third.cache_read_input_tokens, third.cache_creation_input_tokens) == (0, 0)


def test_cache_minimum_reset_and_top_level_marker() -> None:
    from tests.fakeapi import PromptCache

    body: dict[str, Any] = {"model": MODEL, "system": SYSTEM, "messages": HI}
    small = PromptCache(min_tokens=10_000)
    assert small.usage(body)[1:] == (0, 0)
    assert small.usage(body)[1:] == (0, 0)
    cache = PromptCache()
    uncached, creation, read = cache.usage(body)
    assert (read, creation > 0, uncached > 0) == (0, True, True)
    assert cache.usage(body) == (uncached, 0, creation)
    assert cache.usage({**body, "model": "other"})[2] == 0  # caches are per model
    cache.reset()
    assert cache.usage(body) == (uncached, creation, 0)
    auto = {"model": MODEL, "messages": HI, "cache_control": {"type": "ephemeral"}}
    assert cache.usage(auto)[0] == 0  # automatic caching marks the last block
    assert cache.usage(auto)[0:2] == (0, 0)


# --- recording and scenarios ----------------------------------------------------------------


def test_requests_are_recorded_in_order_with_lower_case_headers(
    fake: Factory, clients: Any
) -> None:
    server = fake([LONG, LONG, LONG])
    client = clients(server)
    for word in ("one", "two", "three"):
        _final(client, messages=[{"role": "user", "content": word}])
    assert [r.body["messages"][0]["content"] for r in server.requests] == ["one", "two", "three"]
    headers = server.requests[0].headers
    # SDK 2.16 sends the key as `authorization: Bearer ...`; older ones as x-api-key.
    assert "sk-test" in headers.get("x-api-key", headers.get("authorization", ""))
    assert headers["anthropic-version"]  # 2026-10-21 from SDK 2.16 (2023-06-01 before)
    assert all(k == k.lower() for k in headers)
    assert server.requests[0].body["stream"] is True


def _get_stats(server: FakeAnthropic, method: str = "GET") -> Any:
    conn = http.client.HTTPConnection(server.base_url.removeprefix("http://"), timeout=5)
    conn.request(method, "/_stats")
    body = json.loads(conn.getresponse().read())
    conn.close()
    return body


def test_stats_time_each_request_line_and_last_byte(fake: Factory, clients: Any) -> None:
    """bench/ takes answer i's last byte to request i+1's line as client time: each timing
    must fall inside the client's own call, one per POST, in order, and reset on DELETE."""
    server = fake([LONG, LONG, Stream(LONG.blocks, drop_after=4), LONG])
    client = clients(server)
    calls = []
    for _ in range(2):
        sent = time.monotonic()
        _final(client)
        calls.append((sent, time.monotonic()))
    stats = _get_stats(server)
    assert stats["requests"] == 2
    assert stats["clock"] == "time.monotonic"
    first, second = stats["timings"]
    # The server stamps the last byte after its send returns, possibly after the client has
    # read it; but one keep-alive connection's handler reads the next request line only
    # after that stamp.
    assert calls[0][0] <= first["request_line"] <= calls[0][1]
    assert first["request_line"] <= first["last_byte"] <= second["request_line"]
    assert calls[1][0] <= second["request_line"] <= min(second["last_byte"], calls[1][1])
    assert (first["complete"], second["complete"]) == (True, True)
    with pytest.raises(BROKEN_BODY):
        _final(client)
    for _ in range(500):  # the handler records just after the client saw the cut
        if len(server.timings) == 3:
            break
        time.sleep(0.01)
    assert [t["complete"] for t in _get_stats(server)["timings"]] == [True, True, False]
    assert _get_stats(server, "DELETE") == {}
    assert (_get_stats(server)["timings"], server.requests) == ([], [])
    _final(client)
    assert _get_stats(server)["requests"] == 1


def test_tool_loop_drives_exactly_n_tool_turns(fake: Factory, clients: Any) -> None:
    server = fake(tool_loop(3, tool_input={"path": "a.txt"}))
    client = clients(server)
    messages: list[Any] = [{"role": "user", "content": "go"}]
    stops = []
    ids = []
    while True:
        message = _final(client, messages=messages)
        stops.append(message.stop_reason)
        if message.stop_reason != "tool_use":
            break
        tool = message.content[-1]
        assert tool.type == "tool_use"
        assert (tool.name, tool.input) == ("read_file", {"path": "a.txt"})
        ids.append(tool.id)
        messages.append({"role": "assistant", "content": [b.model_dump() for b in message.content]})
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "x"}],
            }
        )
    assert stops == ["tool_use"] * 3 + ["end_turn"]
    assert message.content[0].type == "text"
    assert message.content[0].text == "Done."
    assert len(set(ids)) == 3
    assert all(i.startswith(f"toolu_{n:04d}_") for n, i in enumerate(ids))
    assert len(server.requests) == 4


def test_the_module_serves_a_tool_loop_from_the_command_line() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakeapi.server", "--tool-loop", "2"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        with anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0) as client:
            assert _final(client).stop_reason == "tool_use"
    finally:
        proc.terminate()
        code = proc.wait(5)
    assert proc.stderr is not None
    assert (code, proc.stderr.read()) == (0, "")


def test_concurrent_clients_each_get_their_own_tool_loop(fake: Factory, clients: Any) -> None:
    server = fake(tool_loop(2))
    client = clients(server)
    finals: list[str | None] = []

    def conversation() -> None:
        messages: list[Any] = [{"role": "user", "content": "go"}]
        while (message := _final(client, messages=messages)).stop_reason == "tool_use":
            tool = message.content[-1]
            assert tool.type == "tool_use"
            messages.append(
                {"role": "assistant", "content": [b.model_dump() for b in message.content]}
            )
            result = {"type": "tool_result", "tool_use_id": tool.id, "content": "x"}
            messages.append({"role": "user", "content": [result]})
        finals.append(message.stop_reason)

    threads = [threading.Thread(target=conversation) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert finals == ["end_turn"] * 8
    assert len(server.requests) == 24


def test_latency_holds_each_request_before_its_first_byte_and_requests_wait_at_once() -> None:
    latency = 0.3
    with FakeAnthropic(tool_loop(0), latency_s=latency) as server:
        host = server.base_url.removeprefix("http://")
        body = json.dumps({"model": MODEL, "max_tokens": 8, "stream": True, "messages": HI})
        ready = threading.Barrier(8)
        firsts: list[float] = []
        statuses: list[int] = []

        def ask() -> None:
            conn = http.client.HTTPConnection(host, timeout=10)
            ready.wait()
            began = time.monotonic()
            conn.request("POST", "/v1/messages", body)
            response = conn.getresponse()  # the status line: the answer's first byte
            firsts.append(time.monotonic() - began)
            statuses.append(response.status)
            response.read()
            conn.close()

        threads = [threading.Thread(target=ask) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert statuses == [200] * 8
        assert min(firsts) >= latency
        timings = server.stats()["timings"]
        # Held side by side, not in line: every request arrived before any was answered.
        assert max(t["request_line"] for t in timings) < min(t["last_byte"] for t in timings)
        conn = http.client.HTTPConnection(host, timeout=10)
        began = time.monotonic()
        conn.request("GET", f"/v1/models/{MODEL}")
        assert conn.getresponse().status == 200
        assert time.monotonic() - began >= latency  # the Models API is held too
        conn.close()
