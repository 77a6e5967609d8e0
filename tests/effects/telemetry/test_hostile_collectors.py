"""Hostile collectors (#28): one that drips its answer a byte a second, one that answers
hundreds of megabytes, and a collector URL with a secret in its query. A send ends within
its one deadline, reads a bounded answer, and never prints the secret. Real collectors on
127.0.0.1, the real SDK exporter."""

from __future__ import annotations

import resource
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ruizn.effects.telemetry.otlp import OtlpError, send_spans, traces_endpoint
from ruizn.spans import Span
from tests.cli.conftest import run_cli
from tests.view.receiver import OtlpReceiver

SECRET = "qs-secret-0123456789"


class RawCollector:
    """Reads a request, then answers with `answer(conn)`: whatever bytes it likes."""

    def __init__(self, answer: Callable[[socket.socket], None]) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._answer = answer
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self._sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(5)
            conn.recv(1 << 20)  # the request (small); its body is not needed
            self._answer(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._sock.close()


def _spans() -> list[Span]:
    return [
        Span(
            name="ruizn.run",
            trace_id=1,
            span_id=2,
            parent_id=None,
            kind="internal",
            start_ns=1,
            end_ns=2,
            attributes=(),
        )
    ]


def test_a_dripping_collector_ends_at_the_deadline() -> None:
    def drip(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n")
        for _ in range(600):
            conn.sendall(b"x")
            time.sleep(1)

    collector = RawCollector(drip)
    try:
        began = time.monotonic()
        with pytest.raises(OtlpError, match="did not answer within 3 s"):
            send_spans(_spans(), collector.url + "/v1/traces", deadline=3)
        assert time.monotonic() - began < 8
    finally:
        collector.close()


def test_a_huge_answer_costs_a_bounded_memory() -> None:
    size = 400 * 1024 * 1024
    chunk = b"e" * (1 << 20)

    def huge(conn: socket.socket) -> None:
        conn.sendall(
            b"HTTP/1.1 500 Oops\r\ncontent-type: text/plain\r\n"
            + f"content-length: {size}\r\n\r\n".encode()
        )
        for _ in range(size // len(chunk)):
            conn.sendall(chunk)

    collector = RawCollector(huge)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    try:
        with pytest.raises(OtlpError, match="did not take the spans"):
            send_spans(_spans(), collector.url + "/v1/traces", deadline=20)
    finally:
        collector.close()
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < 64 * 1024, f"the answer cost {grown} KiB"


def test_a_secret_in_the_collector_query_is_sent_but_never_printed(
    workspace: Path, server_factory: Any
) -> None:
    assert traces_endpoint(f"http://h:4318/?api_key={SECRET}", {}) == (
        f"http://h:4318/v1/traces?api_key={SECRET}"
    )
    from tests.fakeapi import Stream, Text

    server = server_factory([Stream((Text("Fine."),))])
    assert run_cli(["run", "hello"], workspace=workspace, base_url=server.base_url).code == 0
    with OtlpReceiver() as receiver:
        result = run_cli(
            ["export", "last", "--otlp", f"{receiver.url}/?api_key={SECRET}"], workspace=workspace
        )
    assert result.code == 0, result.stderr
    assert receiver.paths[0] == f"/v1/traces?api_key={SECRET}"
    assert SECRET not in result.stdout + result.stderr
    assert "api_key=***" in result.stdout
