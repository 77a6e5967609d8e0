"""Sending a run's spans (`ruizn.spans`) to an OpenTelemetry collector over OTLP/HTTP.

`OtlpSender` turns the span records into the SDK's `ReadableSpan`s, with the ids and times
the records carry, and sends them with the SDK's protobuf OTLP/HTTP exporter. `LiveExporter`
is a run subscriber: it only queues events (a token costs one type check), and a thread of
its own builds the spans and sends them, so a collector that is down or hangs can never slow
or break the run. What it could not send is reported at the end; `ruizn export` sends the
same spans again (same ids), so nothing is lost for good.

The OpenTelemetry packages are the optional `otel` extra; they are imported only here and
only when something is sent.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from ruizn.events import Event, LlmToken, RunStarted
from ruizn.redact import Redactor, redact_url, url_secrets
from ruizn.spans import Span, SpanBuilder
from ruizn.version import __version__

TRACES_PATH = "/v1/traces"
BATCH = 512  # spans a request: a 2,000-step run is ~6,000 spans
# A collector's answer is a few bytes of protobuf (or an error text): more is not read, so a
# collector that answers gigabytes costs this much memory, not that much.
MAX_ANSWER = 64 * 1024
# The whole of one `send` (every batch, every retry the SDK makes, a collector that drips
# one byte a second) ends by then; `ruizn export --otlp` and a live run's exporter alike.
SEND_DEADLINE = 30.0


class OtlpError(Exception):
    """The spans could not be sent; the message is one line for the user."""


class OtelMissing(OtlpError):
    def __init__(self) -> None:
        from ruizn.effects.packaging.extras import install_command

        super().__init__(f"OpenTelemetry export needs the otel extra: {install_command('otel')}")


def otel_available() -> bool:
    try:
        return importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is not None
    except ModuleNotFoundError:
        return False


def traces_endpoint(url: str | None, environ: Mapping[str, str]) -> str:
    """The URL spans are POSTed to. `--otlp URL` and OTEL_EXPORTER_OTLP_ENDPOINT name the
    collector (`http://localhost:4318`: /v1/traces is added, as the OTLP spec says);
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is the full URL, used as it is."""
    full = False
    if url is None:
        url = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None
        full = url is not None
    if url is None:
        url = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
    if url is None:
        raise OtlpError("no collector: give --otlp URL or set OTEL_EXPORTER_OTLP_ENDPOINT")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError:
        raise OtlpError(f"--otlp {redact_url(url)!r} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OtlpError(
            f"--otlp {redact_url(url)!r} must be an http:// or https:// URL of a collector"
        )
    if full or parts.path.rstrip("/").endswith(TRACES_PATH):
        return url
    # Into the path, before any query (`http://h/?api_key=X` -> `http://h/v1/traces?api_key=X`).
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + TRACES_PATH))


def shown_endpoint(url: str) -> str:
    """The endpoint as it may be printed: query values and user:password hidden."""
    return redact_url(url)


class Sender(Protocol):
    def send(self, spans: Sequence[Span]) -> None:
        """Deliver the spans or raise OtlpError."""
        ...

    def close(self) -> None: ...


class _LastMessage(logging.Handler):
    """Keeps what the SDK's exporter logged about a failure, for our own one-line error;
    nothing of it reaches the terminal."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.message: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.message = " ".join(record.getMessage().split())


def _bounded_session() -> Any:
    """A requests session (the SDK exporter's own client) that reads at most MAX_ANSWER
    bytes of any answer, then closes it."""
    import requests

    class Bounded(requests.Session):
        def send(self, request: Any, **kwargs: Any) -> Any:
            kwargs["stream"] = True
            response = super().send(request, **kwargs)
            try:
                body = response.raw.read(MAX_ANSWER, decode_content=False) or b""
                response._content = bytes(body)
            finally:
                response.close()
            return response

    return Bounded()


class OtlpSender:
    """The SDK's OTLP/HTTP protobuf exporter, fed with span records. Bounded: each `send`
    ends within `deadline` seconds whatever the collector does (it runs in a helper thread
    that is abandoned, reading at most MAX_ANSWER bytes, if the collector never finishes)."""

    def __init__(
        self, endpoint: str, *, timeout: float = 10.0, deadline: float = SEND_DEADLINE
    ) -> None:
        if not otel_available():
            raise OtelMissing
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.endpoint = endpoint
        self._deadline = deadline
        self._log = _LastMessage()
        otel_log = logging.getLogger("opentelemetry")
        otel_log.addHandler(self._log)
        otel_log.propagate = False
        self._exporter = OTLPSpanExporter(
            endpoint=endpoint, timeout=min(timeout, deadline), session=_bounded_session()
        )
        # OTEL_SERVICE_NAME, when set, names the service, as in any OpenTelemetry program.
        named = os.environ.get("OTEL_SERVICE_NAME")
        attributes = {"service.version": __version__} | ({} if named else {"service.name": "ruizn"})
        self._resource = Resource.create(attributes)
        self._scope = InstrumentationScope("ruizn", __version__)

    def send(self, spans: Sequence[Span]) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        ends = time.monotonic() + self._deadline
        where = shown_endpoint(self.endpoint)
        for start in range(0, len(spans), BATCH):
            batch = [self._readable(span) for span in spans[start : start + BATCH]]
            self._log.message = None
            result: list[Any] = []
            worker = threading.Thread(
                target=self._export,
                args=(batch, result),
                name="ruizn-otlp-send",
                daemon=True,
            )
            worker.start()
            worker.join(max(0.0, ends - time.monotonic()))
            if worker.is_alive():
                raise OtlpError(
                    f"the collector at {where} did not answer within {self._deadline:g} s"
                )
            if not result or result[0] is not SpanExportResult.SUCCESS:
                why = self._log.message or "the export failed"
                why = Redactor(secrets=url_secrets(self.endpoint)).redact(why)
                raise OtlpError(f"the collector at {where} did not take the spans: {why}")

    def _export(self, batch: list[Any], result: list[Any]) -> None:
        result.append(self._exporter.export(batch))

    def close(self) -> None:
        self._exporter.shutdown()  # type: ignore[no-untyped-call]
        logging.getLogger("opentelemetry").removeHandler(self._log)

    def _readable(self, span: Span) -> Any:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
        from opentelemetry.trace.status import Status, StatusCode

        sampled = TraceFlags(TraceFlags.SAMPLED)
        context = SpanContext(span.trace_id, span.span_id, is_remote=False, trace_flags=sampled)
        parent = None
        if span.parent_id is not None:
            parent = SpanContext(
                span.trace_id, span.parent_id, is_remote=False, trace_flags=sampled
            )
        status = Status(StatusCode.UNSET)
        if span.error is not None:
            status = Status(StatusCode.ERROR, span.error)
        return ReadableSpan(
            name=span.name,
            context=context,
            parent=parent,
            resource=self._resource,
            attributes=dict(span.attributes),
            kind=SpanKind.CLIENT if span.kind == "client" else SpanKind.INTERNAL,
            status=status,
            start_time=span.start_ns,
            end_time=span.end_ns,
            instrumentation_scope=self._scope,
        )


def send_spans(
    spans: Sequence[Span],
    endpoint: str,
    *,
    timeout: float = 10.0,
    deadline: float = SEND_DEADLINE,
) -> None:
    """Send every span, in batches, within `deadline` seconds in all; raise OtlpError
    (OtelMissing) when they do not go."""
    sender = OtlpSender(endpoint, timeout=timeout, deadline=deadline)
    try:
        sender.send(spans)
    finally:
        sender.close()


class MemorySender:
    """A collector in memory, for tests: keeps what it is sent. `fail` makes every send
    fail with that message; `hold` makes every send wait until the event is set."""

    def __init__(self, *, fail: str | None = None, hold: threading.Event | None = None) -> None:
        self.spans: list[Span] = []
        self.closed = False
        self._fail = fail
        self._hold = hold

    def send(self, spans: Sequence[Span]) -> None:
        if self._hold is not None:
            self._hold.wait()
        if self._fail is not None:
            raise OtlpError(self._fail)
        self.spans.extend(spans)

    def close(self) -> None:
        self.closed = True


_STOP = object()


class _ChildFeed:
    """The events of a subagent's run, for its parent's `LiveExporter` (tokens left out)."""

    def __init__(self, exporter: LiveExporter, key: int) -> None:
        self._exporter = exporter
        self._key = key

    def __call__(self, event: Event) -> None:
        if type(event) is not LlmToken:
            self._exporter._put(self._key, event)

    def for_child(self) -> _ChildFeed:
        """Its own children's feed: the same exporter, the same trace."""
        return self._exporter.for_child()


class LiveExporter:
    """A run subscriber that exports the run's spans as their ends are logged.

    The run's thread only puts events on a queue; a daemon thread turns them into spans
    (`SpanBuilder`, the projection `ruizn export` uses) and sends each batch. `close` waits
    at most `flush_timeout` for the last spans, and not at all once a send has failed (a
    collector that is down is not waited for); `complete` says whether every span went.
    """

    def __init__(self, sender: Sender, *, flush_timeout: float = 2.0) -> None:
        # The sender is made by the caller, before the run: importing the SDK in this
        # thread would compete with the run's first steps for the interpreter.
        self._sender = sender
        self._flush_timeout = flush_timeout
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.run_id: str | None = None
        self._token_ts = 0.0
        self.sent = 0
        self.failure: str | None = None
        self._children = 0
        self._thread = threading.Thread(target=self._work, name="ruizn-otlp", daemon=True)
        self._thread.start()

    def __call__(self, event: Event) -> None:
        if type(event) is LlmToken:
            # Most events are tokens, and none begins or ends a span: only its time is
            # kept (a span left open is cut at the log's last time). Waking the thread for
            # each would make it compete with the run for the interpreter.
            self._token_ts = event.ts
            return
        if type(event) is RunStarted:
            self.run_id = event.run_id
        self._queue.put((0, self._token_ts, event))

    def for_child(self) -> _ChildFeed:
        """A subscriber for a subagent's run: its spans go to the same collector, in this
        run's trace, under the call that started it."""
        with self._lock:
            self._children += 1
            return _ChildFeed(self, self._children)

    def _put(self, key: int, event: Event) -> None:
        self._queue.put((key, event.ts, event))

    def close(self) -> None:
        """Stop: wait a little for the spans still queued (see the class)."""
        self._queue.put((0, self._token_ts, _STOP))
        with self._lock:
            failed = self.failure is not None
        self._thread.join(0 if failed else self._flush_timeout)
        with self._lock:
            if self._thread.is_alive() and self.failure is None:
                self.failure = f"the collector did not answer within {self._flush_timeout:g} s"

    @property
    def complete(self) -> bool:
        """Every span of the run reached the collector."""
        with self._lock:
            return self.failure is None and not self._thread.is_alive()

    def _work(self) -> None:
        builder = SpanBuilder()
        children: dict[int, SpanBuilder] = {}  # a subagent's run's, by its feed
        sender = self._sender
        stopping = False
        while not stopping:
            spans: list[Span] = []
            for key, token_ts, event in self._drain():
                if event is _STOP:
                    stopping = True
                    builder.saw(token_ts)
                    for one in (*children.values(), builder):
                        spans.extend(one.close())
                    break
                if key:
                    one = children.setdefault(key, SpanBuilder(trace=builder.trace))
                    spans.extend(one.feed(event))
                    continue
                builder.saw(token_ts)
                spans.extend(builder.feed(event))
            if spans:
                self._send(sender, spans)
        sender.close()

    def _drain(self) -> Iterator[Any]:
        """The next event (waiting for it), then whatever else is queued already."""
        yield self._queue.get()
        while True:
            try:
                yield self._queue.get_nowait()
            except queue.Empty:
                return

    def _send(self, sender: Sender, spans: list[Span]) -> None:
        try:
            sender.send(spans)
        except OtlpError as exc:
            with self._lock:
                self.failure = str(exc)
        except Exception as exc:  # an exporter's bug must not reach the run either
            with self._lock:
                self.failure = f"{type(exc).__name__}: {exc}"
        else:
            with self._lock:
                self.sent += len(spans)
