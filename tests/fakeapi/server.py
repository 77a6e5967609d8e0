"""A local Messages API on 127.0.0.1 that speaks the real streaming protocol.

Named SSE events, `ping`, `input_json_delta` fragments split anywhere, usage in
message_start and message_delta, a request-id header, JSON error bodies, and the faults a
real API shows (mid-stream `event: error`, dropped connections, stalls, hangs). Standard
library only. Chunked transfer with keep-alive, so the SDK's connection pool works as it
does against the real API.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import random
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.fakeapi.cache import PromptCache
from tests.fakeapi.replies import (
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
    tool_loop,
)


@dataclass
class RecordedRequest:
    body: dict[str, Any]
    headers: dict[str, str]


class _Dropped(Exception):
    pass


def _sse(name: str, data: dict[str, Any]) -> bytes:
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"event: {name}\ndata: {payload}\n\n".encode()


def _split(text: str, seed: int) -> list[str]:
    """Fragments at pseudo-random places (deterministic per input), as the API does."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        step = rng.randint(1, 12)
        out.append(text[i : i + step])
        i += step
    return out


def _output_tokens(blocks: tuple[Any, ...]) -> int:
    size = 0
    for block in blocks:
        match block:
            case Text(text=text):
                size += len(text)
            case ToolUse(input=value):
                size += len(json.dumps(value))
            case Thinking(thinking=text):
                size += len(text)
            case RedactedThinking(data=data):
                size += len(data)
    return max(1, size // 4)


def stream_events(
    reply: Stream, usage: Usage, message_id: str
) -> list[tuple[str, dict[str, Any], bool]]:
    """(event name, data, is_delta) in wire order."""
    start_usage = {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "output_tokens": 1,
    }
    events: list[tuple[str, dict[str, Any], bool]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": reply.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
            False,
        )
    ]
    last_tool = max((i for i, b in enumerate(reply.blocks) if isinstance(b, ToolUse)), default=-1)
    for index, block in enumerate(reply.blocks):
        cut = reply.incomplete_last_tool and index == last_tool
        match block:
            case Text(text=text, chunk=chunk):
                events.append(
                    (
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {"type": "text", "text": ""},
                        },
                        False,
                    )
                )
                for i in range(0, len(text), max(1, chunk)):
                    events.append(
                        (
                            "content_block_delta",
                            {
                                "type": "content_block_delta",
                                "index": index,
                                "delta": {"type": "text_delta", "text": text[i : i + chunk]},
                            },
                            True,
                        )
                    )
            case ToolUse(id=tool_id, name=name, input=value):
                events.append(
                    (
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {
                                "type": "tool_use",
                                "id": tool_id,
                                "name": name,
                                "input": {},
                            },
                        },
                        False,
                    )
                )
                raw = json.dumps(value, ensure_ascii=False)
                if cut:
                    raw = raw[: max(1, len(raw) // 2)]
                for part in ["", *_split(raw, hash(tool_id) & 0xFFFF)]:
                    events.append(
                        (
                            "content_block_delta",
                            {
                                "type": "content_block_delta",
                                "index": index,
                                "delta": {"type": "input_json_delta", "partial_json": part},
                            },
                            True,
                        )
                    )
            case Thinking(thinking=text, signature=signature):
                events.append(
                    (
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                        },
                        False,
                    )
                )
                for part in _split(text, len(text)):
                    events.append(
                        (
                            "content_block_delta",
                            {
                                "type": "content_block_delta",
                                "index": index,
                                "delta": {"type": "thinking_delta", "thinking": part},
                            },
                            True,
                        )
                    )
                events.append(
                    (
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "signature_delta", "signature": signature},
                        },
                        True,
                    )
                )
            case RedactedThinking(data=data):
                events.append(
                    (
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {"type": "redacted_thinking", "data": data},
                        },
                        False,
                    )
                )
        if index == 0 and reply.pings:
            events.append(("ping", {"type": "ping"}, False))
        if not cut:
            events.append(
                ("content_block_stop", {"type": "content_block_stop", "index": index}, False)
            )
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply.stop_reason, "stop_sequence": None},
                "usage": {**start_usage, "output_tokens": usage.output_tokens},
            },
            False,
        )
    )
    events.append(("message_stop", {"type": "message_stop"}, False))
    return events


def final_message(reply: Stream, usage: Usage, message_id: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    for block in reply.blocks:
        match block:
            case Text(text=text):
                content.append({"type": "text", "text": text})
            case ToolUse(id=tool_id, name=name, input=value):
                content.append({"type": "tool_use", "id": tool_id, "name": name, "input": value})
            case Thinking(thinking=text, signature=signature):
                content.append({"type": "thinking", "thinking": text, "signature": signature})
            case RedactedThinking(data=data):
                content.append({"type": "redacted_thinking", "data": data})
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": reply.stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_creation_input_tokens": usage.cache_creation_input_tokens,
            "cache_read_input_tokens": usage.cache_read_input_tokens,
        },
    }


class FakeAnthropic:
    def __init__(self, script: Script, *, port: int = 0, min_cache_tokens: int = 0) -> None:
        self.script = script
        self.port = port
        self.requests: list[RecordedRequest] = []
        # Seconds the server spent on each request, so a benchmark can subtract them.
        self.handler_seconds: list[float] = []
        self.cache = PromptCache(min_cache_tokens)
        self.base_url = ""
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> FakeAnthropic:
        owner = self

        class Handler(_Handler):
            fake = owner

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        self.base_url = f"http://127.0.0.1:{server.server_address[1]}"
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def sleep(self, seconds: float) -> bool:
        """Sleep unless the server stops; True if it stopped."""
        return self._stopping.wait(seconds)

    def next_reply(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[Reply, int]:
        with self._lock:
            index = len(self.requests)
            self.requests.append(RecordedRequest(body=body, headers=headers))
        if callable(self.script):
            return self.script(body, index), index
        if index < len(self.script):
            return self.script[index], index
        return HttpError(
            500, "api_error", f"fakeapi: script exhausted after {len(self.script)} replies"
        ), index

    def request_id(self) -> str:
        return f"req_fake_{next(self._counter):06d}"


class _Handler(BaseHTTPRequestHandler):
    fake: FakeAnthropic
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # stdlib's name
        pass

    def do_GET(self) -> None:  # stdlib's name
        if self.path == "/_stats":
            stats = {
                "requests": len(self.fake.handler_seconds),
                "handler_seconds": self.fake.handler_seconds,
            }
            self._json(200, stats, self.fake.request_id())
        else:
            self._json(404, _error_body("not_found_error", self.path, "req_none"), "req_none")

    def do_DELETE(self) -> None:  # stdlib's name
        if self.path == "/_stats":  # reset between benchmark runs
            self.fake.handler_seconds.clear()
            self.fake.requests.clear()
            self.fake.cache.reset()
        self._json(200, {}, "req_none")

    def do_POST(self) -> None:  # stdlib's name
        began = time.perf_counter()
        try:
            self._post()
        finally:
            self.fake.handler_seconds.append(time.perf_counter() - began)

    def _post(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length)
        request_id = self.fake.request_id()
        if self.path.split("?")[0] != "/v1/messages":
            self._json(
                404, _error_body("not_found_error", f"no route {self.path}", request_id), request_id
            )
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._json(
                400,
                _error_body("invalid_request_error", "body is not JSON", request_id),
                request_id,
            )
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        reply, _ = self.fake.next_reply(body, headers)
        try:
            self._serve(reply, body, request_id)
        except (BrokenPipeError, ConnectionResetError, _Dropped):
            self.close_connection = True

    def _serve(self, reply: Reply, body: dict[str, Any], request_id: str) -> None:
        match reply:
            case HttpError(status=status, error_type=error_type, message=message, headers=extra):
                self._json(status, _error_body(error_type, message, request_id), request_id, extra)
            case Hang(seconds=seconds):
                self.fake.sleep(seconds)
                self.close_connection = True
            case Recording(stem=stem):
                self._recording(Path(stem), request_id)
            case Stream():
                if reply.usage is None:
                    uncached, creation, read = self.fake.cache.usage(body)
                    usage = Usage(uncached, _output_tokens(reply.blocks), creation, read)
                else:
                    usage = reply.usage
                message_id = f"msg_{request_id}"
                if not body.get("stream"):
                    self._json(200, final_message(reply, usage, message_id), request_id)
                    return
                self._stream(reply, usage, message_id, request_id)

    def _stream(self, reply: Stream, usage: Usage, message_id: str, request_id: str) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("request-id", request_id)
        self.send_header("transfer-encoding", "chunked")
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.end_headers()
        for count, (name, data, is_delta) in enumerate(stream_events(reply, usage, message_id)):
            if reply.error_after is not None and count == reply.error_after:
                self._chunk(
                    _sse(
                        "error",
                        {
                            "type": "error",
                            "error": {
                                "details": None,
                                "type": "overloaded_error",
                                "message": "Overloaded",
                            },
                            "request_id": request_id,
                        },
                    )
                )
                self._end()
                return
            if reply.drop_after is not None and count == reply.drop_after:
                self._drop()
            stall = reply.stall_after is not None and count == reply.stall_after
            if stall and self.fake.sleep(reply.stall_seconds):
                self._drop()
            if is_delta and reply.token_delay and self.fake.sleep(reply.token_delay):
                self._drop()
            self._chunk(_sse(name, data))
        self._end()

    def _recording(self, stem: Path, request_id: str) -> None:
        sse = stem.with_name(stem.name + ".response.sse")
        if sse.exists():
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("request-id", request_id)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            self._chunk(sse.read_bytes())
            self._end()
            return
        meta = json.loads(stem.with_name(stem.name + ".meta.json").read_text())
        status = meta.get("status", {}).get("code", 200)
        payload = stem.with_name(stem.name + ".response.json").read_bytes()
        self._raw(status, payload, request_id)

    def _json(self, status: int, data: dict[str, Any], request_id: str, extra: Any = None) -> None:
        self._raw(status, json.dumps(data).encode(), request_id, extra)

    def _raw(self, status: int, payload: bytes, request_id: str, extra: Any = None) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("request-id", request_id)
        self.send_header("content-length", str(len(payload)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _drop(self) -> None:
        self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
        self.connection.close()
        raise _Dropped


def _error_body(error_type: str, message: str, request_id: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": request_id,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def long_answer(deltas: int, token_delay: float) -> Any:
    words = "".join(f"w{i % 1000:03d} " for i in range(deltas))  # 5 characters a delta
    return lambda body, index: Stream((Text(words, chunk=5),), token_delay=token_delay)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A fake Messages API on 127.0.0.1")
    parser.add_argument("--tool-loop", type=int, default=None, help="tool turns, then an answer")
    parser.add_argument("--trickle", type=float, default=None, help="seconds between deltas")
    parser.add_argument("--long-answer", type=int, default=None, help="one answer of N deltas")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    script: Script
    if args.long_answer is not None:
        script = long_answer(args.long_answer, 0.0)
    elif args.trickle is not None:
        script = long_answer(200, args.trickle)
    else:
        script = tool_loop(args.tool_loop if args.tool_loop is not None else 0)
    server = FakeAnthropic(script, port=args.port).start()
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    print(server.base_url, flush=True)
    done.wait()
    server.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
