"""A local Messages API on 127.0.0.1 that speaks the real streaming protocol.

Named SSE events, `ping`, `input_json_delta` fragments split anywhere, usage in
message_start and message_delta, a request-id header, JSON error bodies, and the faults a
real API shows (mid-stream `event: error`, dropped connections, stalls, hangs). Standard
library only. Chunked transfer with keep-alive, so the SDK's connection pool works as it
does against the real API.

    python -m tests.fakeapi.server --tool-loop N [--port P] [--trickle SECONDS]

prints `http://127.0.0.1:PORT` once listening and serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from tests.fakeapi import compaction
from tests.fakeapi.cache import PromptCache
from tests.fakeapi.models import CATALOG, find, listing, refusal
from tests.fakeapi.replies import (
    Compacted,
    Hang,
    HttpError,
    Raw,
    Recording,
    Reply,
    Script,
    Stream,
    Text,
    Usage,
    tool_loop,
)
from tests.fakeapi.sse import (
    Event,
    dumps,
    encode,
    error_body,
    final_message,
    output_tokens,
    overloaded_event,
    stream_events,
)

__all__ = [
    "FakeAnthropic",
    "RecordedRequest",
    "Timing",
    "final_message",
    "free_port",
    "long_answer",
    "main",
    "stream_events",
]

# Response headers of a recorded error that change what a client does (retry or not).
_RECORDED_HEADERS = ("x-should-retry", "retry-after", "retry-after-ms")


@dataclass
class RecordedRequest:
    body: dict[str, Any]
    headers: dict[str, str]  # names lower-cased
    raw: bytes = b""  # the body's bytes exactly as they came


@dataclass(frozen=True)
class Timing:
    """One POST as the server saw it, on its own time.monotonic() clock. A benchmark takes
    the gap from one answer's `last_byte` to the next request's `request_line` as pure client
    time: the server's own work (parsing, cache emulation, encoding) lies outside every gap."""

    request_line: float  # the request line had just been read
    last_byte: float  # the last byte of the response had been handed to the socket
    complete: bool  # False if the reply was cut (a fault) or the client hung up


class _Dropped(Exception):
    """The handler cut the connection on purpose; nothing more may be written."""


# Every port a server of this process was given, never given to another (see `start`).
_PORTS_USED: set[int] = set()


class FakeAnthropic:
    def __init__(
        self,
        script: Script,
        *,
        port: int = 0,
        min_cache_tokens: int = 0,
        models: tuple[dict[str, Any], ...] | None = CATALOG,
        keep: bool = True,
        endless_models: Literal["same", "new"] | None = None,
        latency_s: float = 0.0,
    ) -> None:
        """`keep`: record every POST in `requests` (body, headers, raw bytes) for a test to
        read. bench/fake_server.py's servers keep none: a 2,000-step run's would be
        gigabytes, and a server that large slowed the client it served (docs/benchmark.md).
        `latency_s`: seconds each API request (a POST, a Models API GET) waits before the
        first byte of its answer, as a real API's round trip and time to first token do;
        many requests wait at once (one thread each)."""
        self.script = script
        self.latency_s = latency_s
        self.keep = keep
        # The Models API's catalogue, and the Claude 5 rules its entries imply for POSTs (see
        # tests.fakeapi.models); None: no Models API (404) and no rules, like a bare proxy.
        self.models = models
        # GET /v1/models says `has_more` on every page, for ever: with the same cursor
        # ("same"), or with a new one each time ("new").
        self.endless_models = endless_models
        self.model_gets: list[str] = []  # the paths of the Models API requests, in order
        self.port = port
        self.requests: list[RecordedRequest] = []
        self._posts = 0  # POSTs recorded (kept or not): the next one's index
        # One per POST, in the order the handlers finished (bench/ reads them via /_stats).
        self.timings: list[Timing] = []
        self.cache = PromptCache(min_cache_tokens)
        self.base_url = ""
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> FakeAnthropic:
        owner = self

        class Handler(_Handler):
            fake = owner

        self._stopping.clear()
        server = _Server(("127.0.0.1", self.port), Handler)
        while not self.port and server.server_address[1] in _PORTS_USED:
            # A port of an earlier server of this process (the kernel reuses them): its base
            # URL would find that server's Models API answers kept in the state folder.
            spare = server
            server = _Server(("127.0.0.1", 0), Handler)
            spare.server_close()
        _PORTS_USED.add(server.server_address[1])
        server.daemon_threads = True  # a hung handler must not keep the process alive
        self._server = server
        self.base_url = f"http://127.0.0.1:{server.server_address[1]}"
        # A short poll interval: shutdown() waits up to one interval, and tests stop often.
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Return quickly even mid-Hang or mid-trickle: sleeping handlers wake on the event,
        idle keep-alive connections are shut so their threads (and clients) see the end."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def sleep(self, seconds: float) -> bool:
        """Sleep unless the server stops; True if it stopped."""
        return self._stopping.wait(seconds)

    def track(self, conn: socket.socket, *, open_: bool) -> None:
        with self._lock:
            if open_:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def next_reply(self, body: dict[str, Any], headers: dict[str, str], raw: bytes = b"") -> Reply:
        index = self.record(RecordedRequest(body=body, headers=headers, raw=raw))
        if callable(self.script):
            try:
                return self.script(body, index)
            except Exception as err:  # a broken scenario must fail the test loudly
                traceback.print_exc()
                return HttpError(500, "api_error", f"fakeapi: script raised {err!r}")
        if index < len(self.script):
            return self.script[index]
        message = f"fakeapi: script exhausted after {len(self.script)} replies"
        return HttpError(500, "api_error", message)

    def request_id(self) -> str:
        return f"req_fake_{next(self._counter):06d}"

    def timed(self, timing: Timing) -> None:
        with self._lock:
            self.timings.append(timing)

    def stats(self) -> dict[str, Any]:
        """What GET /_stats returns: the POSTs' timings, ordered by request line, and how
        many Models API requests there were."""
        with self._lock:
            timings = sorted(self.timings, key=lambda t: t.request_line)
            model_gets = len(self.model_gets)
        return {
            "requests": len(timings),
            "model_gets": model_gets,
            "clock": "time.monotonic",
            "timings": [
                {"request_line": t.request_line, "last_byte": t.last_byte, "complete": t.complete}
                for t in timings
            ],
        }

    def record(self, request: RecordedRequest) -> int:
        """Count a POST (kept if `keep`); its index among the POSTs, under one lock so that
        requests[i] is the request that got reply i."""
        with self._lock:
            index = self._posts
            self._posts += 1
            if self.keep:
                self.requests.append(request)
        return index

    def reset(self) -> None:
        """Forget the requests, their timings and the prompt cache (DELETE /_stats)."""
        with self._lock:
            self._posts = 0
            self.requests.clear()
            self.model_gets.clear()
            self.timings.clear()
        self.cache.reset()


class _Server(ThreadingHTTPServer):
    # A fleet opens dozens of connections at once; the default backlog of 5 drops SYNs
    # past it, and each dropped one waits a second for its retransmission.
    request_queue_size = 256


class _Handler(BaseHTTPRequestHandler):
    fake: FakeAnthropic
    protocol_version = "HTTP/1.1"  # keep-alive, so the SDK's pool reuses connections
    # TCP_NODELAY: each SSE event is its own small send; with Nagle on, the client's delayed
    # ACK holds every event after the first for ~40 ms.
    disable_nagle_algorithm = True
    request_line_at = 0.0

    def parse_request(self) -> bool:
        # socketserver calls this right after reading the request line (a keep-alive
        # connection waits in that readline), so this is when the request line arrived.
        self.request_line_at = time.monotonic()
        return super().parse_request()

    def setup(self) -> None:
        super().setup()
        self.fake.track(self.connection, open_=True)

    def handle(self) -> None:
        # A client that hangs up (a cancelled stream, a closed pool) is routine, not a server
        # error for socketserver to print a traceback about.
        with contextlib.suppress(ConnectionError):
            super().handle()

    def finish(self) -> None:
        self.fake.track(self.connection, open_=False)
        with contextlib.suppress(OSError, ValueError):  # the socket may be cut already
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # stdlib's name
        pass

    def do_GET(self) -> None:  # stdlib's name
        path = self.path.split("?")[0]
        catalog = self.fake.models
        if path == "/_stats":
            self._json(200, self.fake.stats(), self.fake.request_id())
        elif catalog is not None and path.startswith("/v1/models"):
            with self.fake._lock:
                self.fake.model_gets.append(self.path)
            self.fake.sleep(self.fake.latency_s)
            request_id = self.fake.request_id()
            if path == "/v1/models":
                page = listing(catalog)
                if self.fake.endless_models is not None:
                    page["has_more"] = True
                if self.fake.endless_models == "new":
                    page["last_id"] = f"cursor-{len(self.fake.model_gets)}"
                self._json(200, page, request_id)
                return
            info = find(catalog, path.removeprefix("/v1/models/"))
            if info is None:
                body = error_body("not_found_error", f"model: {path[11:]}", request_id)
                self._json(404, body, request_id)
            else:
                self._json(200, info, request_id)
        else:
            self._not_found()

    def do_DELETE(self) -> None:  # stdlib's name
        if self.path != "/_stats":
            self._not_found()
            return
        self.fake.reset()  # between benchmark runs
        self._json(200, {}, self.fake.request_id())

    def do_PUT(self) -> None:  # stdlib's name
        self._not_found()

    def do_PATCH(self) -> None:  # stdlib's name
        self._not_found()

    def do_POST(self) -> None:  # stdlib's name
        complete = False
        try:
            self._post()
            complete = True
        except (BrokenPipeError, ConnectionResetError, _Dropped):
            self.close_connection = True
        finally:
            # Every write is unbuffered (socketserver's wbufsize is 0) and flushed: the last
            # byte is on the socket now.
            self.fake.timed(Timing(self.request_line_at, time.monotonic(), complete))

    def _not_found(self) -> None:
        self._read_body()  # keep the connection usable for the next request
        request_id = self.fake.request_id()
        body = error_body(
            "not_found_error", f"fakeapi: no route {self.command} {self.path}", request_id
        )
        self._json(404, body, request_id)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _post(self) -> None:
        if self.path.split("?")[0] != "/v1/messages":  # the SDK adds ?beta=true for beta
            self._not_found()
            return
        raw = self._read_body()
        request_id = self.fake.request_id()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            message = "fakeapi: the request body is not a JSON object"
            self._json(400, error_body("invalid_request_error", message, request_id), request_id)
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.fake.sleep(self.fake.latency_s)  # once, before the first byte of any answer
        refused = refusal(self.fake.models, body) if self.fake.models is not None else None
        if refused is None:
            info = find(self.fake.models or (), str(body.get("model")))
            problem = compaction.refusal(info, body, headers)
            if problem is not None:
                refused = (400, "invalid_request_error", problem)
        if refused is not None:
            # Recorded like any request, but the script is not asked.
            self.fake.record(RecordedRequest(body=body, headers=headers, raw=raw))
            status, error_type, message = refused
            self._json(status, error_body(error_type, message, request_id), request_id)
            return
        self._serve(self.fake.next_reply(body, headers, raw), body, request_id)

    def _serve(self, reply: Reply, body: dict[str, Any], request_id: str) -> None:
        if isinstance(reply, Compacted):
            reply = compaction.compaction_stream(body, self.fake.cache.usage(body))
        match reply:
            case HttpError(status=status, error_type=error_type, message=message, headers=extra):
                self._json(status, error_body(error_type, message, request_id), request_id, extra)
            case Hang(seconds=seconds):
                self.fake.sleep(seconds)
                self.close_connection = True  # no status line at all, then the socket closes
            case Recording(stem=stem):
                self._recording(Path(stem), request_id)
            case Raw():
                self._raw_reply(reply, request_id)
            case Stream():
                if reply.usage is None:
                    uncached, creation, read = self.fake.cache.usage(body)
                    usage = Usage(uncached, output_tokens(reply.blocks), creation, read)
                else:
                    usage = reply.usage
                message_id = f"msg_{request_id}"
                stop_sequence = _stop_sequence(reply, body)
                if not body.get("stream"):
                    whole = final_message(reply, usage, message_id, stop_sequence=stop_sequence)
                    self._json(200, whole, request_id)
                    return
                events = stream_events(reply, usage, message_id, stop_sequence=stop_sequence)
                self._stream(reply, events, request_id)

    def _stream(self, reply: Stream, events: list[Event], request_id: str) -> None:
        self._sse_head(request_id, reply.headers)
        for count, (name, data, is_delta) in enumerate(events):
            # `count` events have been sent: the faults fire "after N events".
            if count == reply.error_after:
                self._chunk(overloaded_event(request_id))
                self._end()  # the API ends the body cleanly, without message_stop
                return
            if count == reply.drop_after:
                self._drop()
            if count == reply.stall_after and self.fake.sleep(reply.stall_seconds):
                self._drop()
            if is_delta and reply.token_delay and self.fake.sleep(reply.token_delay):
                self._drop()
            self._chunk(encode(name, data))
        self._end()

    def _recording(self, stem: Path, request_id: str) -> None:
        sse = stem.with_name(stem.name + ".response.sse")
        if sse.exists():
            self._sse_head(request_id, {})
            self._chunk(sse.read_bytes())  # verbatim, padding and all
            self._end()
            return
        meta_path = stem.with_name(stem.name + ".meta.json")
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        status = int(meta.get("status", {}).get("code", 200))
        extra: dict[str, str] = {}
        for key, values in (meta.get("response_headers") or {}).items():
            if key.lower() in _RECORDED_HEADERS and values:
                extra[key.lower()] = values[0] if isinstance(values, list) else str(values)
        payload = stem.with_name(stem.name + ".response.json").read_bytes()
        self._raw(status, payload, request_id, extra)

    def _raw_reply(self, reply: Raw, request_id: str) -> None:
        if not reply.content_type.startswith("text/event-stream"):
            extra = {"content-type": reply.content_type, **reply.headers}
            self._raw(reply.status, reply.body, request_id, extra, content_type=None)
            return
        self._sse_head(request_id, reply.headers, status=reply.status)
        size = max(1, -(-len(reply.body) // max(1, reply.chunks)))
        for i in range(0, len(reply.body), size):
            self._chunk(reply.body[i : i + size])
        self._end()

    def _sse_head(self, request_id: str, extra: Mapping[str, str], status: int = 200) -> None:
        self.send_response(status)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("request-id", request_id)
        self.send_header("transfer-encoding", "chunked")
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()

    def _json(
        self,
        status: int,
        data: dict[str, Any],
        request_id: str,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        self._raw(status, dumps(data).encode(), request_id, extra)

    def _raw(
        self,
        status: int,
        payload: bytes,
        request_id: str,
        extra: Mapping[str, str] | None = None,
        content_type: str | None = "application/json",
    ) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("content-type", content_type)
        self.send_header("request-id", request_id)
        self.send_header("content-length", str(len(payload)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        # One write per event (size line, data, CRLF), so an event never straddles sends.
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _drop(self) -> None:
        """Cut the connection mid-body: FIN without the terminating chunk. socketserver
        closes the socket after the handler returns; nothing else is written."""
        self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True
        raise _Dropped


def _stop_sequence(reply: Stream, body: dict[str, Any]) -> str | None:
    # The API names the sequence that matched; the fake says the request's first one.
    if reply.stop_reason != "stop_sequence":
        return None
    sequences = body.get("stop_sequences") or []
    return str(sequences[0]) if sequences else None


def free_port() -> int:
    """A port nothing listens on (bound and released at once), for connection-refused tests."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def long_answer(deltas: int, token_delay: float) -> Callable[[dict[str, Any], int], Reply]:
    """A scenario answering every request with one text of `deltas` text_deltas."""
    words = "".join(f"w{i % 1000:03d} " for i in range(deltas))  # 5 characters a delta
    answer = Stream((Text(words, chunk=5),), token_delay=token_delay)
    return lambda body, index: answer


def _trickled(inner: Callable[[dict[str, Any], int], Reply], delay: float) -> Script:
    """`inner`, with its final answer replaced by a long one trickled at `delay`."""
    answer = long_answer(200, delay)

    def reply(body: dict[str, Any], index: int) -> Reply:
        got = inner(body, index)
        if isinstance(got, Stream) and got.stop_reason == "end_turn":
            return answer(body, index)
        return got

    return reply


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A fake Anthropic Messages API on 127.0.0.1")
    parser.add_argument("--tool-loop", type=int, default=0, help="tool turns before the answer")
    parser.add_argument(
        "--trickle",
        type=float,
        default=None,
        help="seconds before each delta of a long (200-delta) final answer",
    )
    parser.add_argument("--long-answer", type=int, default=None, help="answer N deltas at once")
    parser.add_argument("--min-cache-tokens", type=int, default=0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument(
        "--latency-s", type=float, default=0.0, help="seconds before each answer's first byte"
    )
    args = parser.parse_args(argv)
    script: Script
    if args.long_answer is not None:
        script = long_answer(args.long_answer, 0.0)
    elif args.trickle is not None:
        script = _trickled(tool_loop(args.tool_loop), args.trickle)
    else:
        script = tool_loop(args.tool_loop)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    server = FakeAnthropic(
        script, port=args.port, min_cache_tokens=args.min_cache_tokens, latency_s=args.latency_s
    ).start()
    print(server.base_url, flush=True)
    # A timed wait: the main thread then wakes to run the signal handler promptly.
    while not done.wait(0.2):
        pass
    server.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
