"""`ruizn view` (a run as one HTML page), `ruizn export` (its spans to a collector) and the
live export of `ruizn run --otlp`. Only reads logs; the page and the spans are projections
of the events (`ruizn.view.timeline`, `ruizn.spans`), so neither can disagree with the log.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ruizn.cli.exits import EXIT_ERROR, EXIT_OK, EXIT_USAGE, fail
from ruizn.effects.runlog.store import FileStore, RunNotFound, RunRef, RunStore
from ruizn.events import Event, SubagentStarted
from ruizn.terminal import visible

if TYPE_CHECKING:  # the runner's module loads anyio: `ruizn view` needs none of it
    from ruizn.shell.runner import Subscriber
    from ruizn.spans import Span
    from ruizn.view.timeline import Timeline

PAGE_NAME = "view.html"


def _find(store: RunStore, run: str) -> RunRef:
    try:
        return store.find(run)
    except RunNotFound as exc:
        fail(visible(str(exc)))


def _read(store: RunStore, ref: RunRef, on_event: Subscriber) -> None:
    """Every event of the run, checked by the reducer as `show` reads it (a torn tail is a
    warning; a log the reducer refuses is one line, exit 2)."""
    from ruizn.cli.logs import read_run

    read_run(store, ref, on_event=on_event)


def _changed(store: RunStore, ref: RunRef) -> dict[int, tuple[str, ...]]:
    """Per checkpoint that begins a step, the files the step changed (from the store of
    checkpoints); nothing when the run has none or the store cannot say."""
    from ruizn.effects.checkpoints.store import CheckpointError
    from ruizn.effects.runlog.reader import LogError
    from ruizn.effects.runlog.writer import RunLocked
    from ruizn.effects.userconfig.dirs import state_dir
    from ruizn.shell.rewind import run_files, step_changes

    try:
        files = run_files(store, ref.run_id, state_dir(os.environ))
        if not files.points:
            return {}
        steps = step_changes(files)
    except (CheckpointError, LogError, RunLocked, OSError, ValueError):
        return {}
    return {span.before.seq: tuple(c.path for c in changes) for span, changes in steps}


# A page draws at most this many child runs (the rest are named, not drawn): a tree a
# planted log makes deep or wide still makes a page a browser opens.
MAX_CHILDREN = 200


def _children(store: RunStore, timeline: Timeline) -> dict[str, Timeline]:
    """The timelines of the runs `timeline`'s `agent` calls started, and theirs, by run id,
    each read from its own log (checked by the reducer); one that cannot be read is left
    out (the page names it with what the parent's log says)."""
    from ruizn.effects.runlog.store import RunNotFound
    from ruizn.view.timeline import TimelineBuilder

    found: dict[str, Timeline] = {}
    todo = [timeline]
    while todo and len(found) < MAX_CHILDREN:
        for run_id in _child_ids(todo.pop()):
            if run_id in found or run_id == timeline.run_id or len(found) >= MAX_CHILDREN:
                continue
            builder = TimelineBuilder()
            try:
                ref = store.find(run_id)
            except RunNotFound:
                continue
            if ref.run_id != run_id:  # found by a prefix, `last` or a path: not this child
                continue
            if store.info(ref, on_event=builder).replayed is not None:
                found[run_id] = builder.timeline()
                todo.append(found[run_id])
    return found


def _child_ids(timeline: Timeline) -> list[str]:
    return [
        tool.child.run_id
        for step in timeline.steps
        for tool in step.tools
        if tool.child is not None
    ]


def _safe_name(run: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", run)[:100] or "run"


def view_run(store: RunStore, run: str, *, out: str | None, open_browser: bool) -> int:
    from ruizn.view.page import render
    from ruizn.view.timeline import TimelineBuilder

    ref = _find(store, run)
    builder = TimelineBuilder()
    # One pass: the store replays the log (checked by the reducer, as `show` reads it) into
    # the projection, and says whether a writer (a worker) holds the run now.
    found = store.info(ref, on_event=builder)
    if found.replayed is None:
        fail(visible(found.error or f"{store.location(ref)}: the log cannot be read"))
    if found.replayed.torn is not None:
        _warn(found.replayed.torn.describe(ref.path))
    live = found.live
    local = isinstance(store, FileStore)
    changed = _changed(store, ref) if local and not live else {}
    timeline = builder.timeline()
    children = _children(store, timeline)
    page = render(
        timeline, live=live, source=store.location(ref), changed=changed, children=children
    )
    if out is not None:
        target = Path(out)
    elif local:
        target = ref.path.parent / PAGE_NAME
    else:
        target = Path(f"view-{_safe_name(ref.run_id)}.html")
    _write(target, page)
    print(visible(str(target)))
    if open_browser:
        _open(target)
    return EXIT_OK


def _write(target: Path, page: str) -> None:
    """Whole or not at all (a page half written would be drawn half), through a new file of
    a fresh name that is never a link: a run folder may have been planted (see Trust), and
    a planted name must not make ruizn write through it."""
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(tmp, flags, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        fail(f"cannot write {target}: {exc.strerror or exc}")


def _open(target: Path) -> None:
    import webbrowser

    uri = target.resolve().as_uri()
    try:
        opened = webbrowser.open(uri)
    except webbrowser.Error:
        opened = False
    if not opened:
        _warn(f"no browser could be started here: open {uri} yourself")


def _warn(message: str) -> None:
    with contextlib.suppress(BrokenPipeError, ValueError):
        print("ruizn: warning: " + visible(" ".join(message.split())), file=sys.stderr)


def _shown_url(url: str) -> str:
    """A URL as it may be printed: no password, no query value (`?api_key=***`)."""
    from ruizn.redact import redact_url

    return redact_url(url)


def _endpoint(url: str | None) -> str:
    from ruizn.effects.telemetry.otlp import OtelMissing, OtlpError, otel_available, traces_endpoint

    try:
        endpoint = traces_endpoint(url, os.environ)
    except OtlpError as exc:
        fail(str(exc), EXIT_USAGE)
    if not otel_available():
        fail(str(OtelMissing()), EXIT_USAGE)
    return endpoint


def export_run(store: RunStore, run: str, *, otlp: str | None) -> int:
    from ruizn.effects.telemetry.otlp import OtlpError, send_spans
    from ruizn.spans import SpanBuilder

    endpoint = _endpoint(otlp)
    ref = _find(store, run)
    builder = SpanBuilder()
    spans: list[Span] = []
    children: list[str] = []

    def collect(event: Event) -> None:
        spans.extend(builder.feed(event))
        if isinstance(event, SubagentStarted):
            children.append(event.run_id)

    _read(store, ref, collect)
    spans.extend(builder.close())
    spans.extend(_child_spans(store, children, builder.trace, {ref.run_id}))
    try:
        send_spans(spans, endpoint)
    except OtlpError as exc:
        fail(str(exc), EXIT_ERROR)
    trace = spans[0].trace_id if spans else 0
    print(
        f"sent {len(spans)} spans of run {visible(builder.run_id)} to"
        f" {visible(_shown_url(endpoint))} (trace {trace:032x})"
    )
    return EXIT_OK


def _child_spans(store: RunStore, run_ids: list[str], trace: int, seen: set[str]) -> list[Span]:
    """The spans of the subagents' runs `run_ids` and theirs, each from its own log, in the
    top run's trace under the calls that started them (one that cannot be read is left
    out, as `ruizn view` leaves it)."""
    from ruizn.spans import SpanBuilder

    spans: list[Span] = []
    todo = list(run_ids)
    while todo and len(seen) <= MAX_CHILDREN:
        run_id = todo.pop(0)
        if run_id in seen:
            continue
        seen.add(run_id)
        try:
            ref = store.find(run_id)
        except RunNotFound:
            continue
        if ref.run_id != run_id:  # found by a prefix, `last` or a path: not this child
            continue
        builder = SpanBuilder(trace=trace)
        found: list[Span] = []

        def collect(
            event: Event, builder: SpanBuilder = builder, found: list[Span] = found
        ) -> None:
            found.extend(builder.feed(event))
            if isinstance(event, SubagentStarted):
                todo.append(event.run_id)

        if store.info(ref, on_event=collect).replayed is not None:
            spans += found
            spans += builder.close()
    return spans


@contextlib.contextmanager
def live_export(url: str) -> Iterator[Subscriber]:
    """A subscriber that exports the run's spans while it runs (`ruizn run --otlp URL`).
    The URL is checked before the run starts; a collector that fails later only costs a
    warning at the end, with the command that sends the run again."""
    from ruizn.effects.telemetry.otlp import LiveExporter, OtlpSender

    endpoint = _endpoint(url)
    exporter = LiveExporter(OtlpSender(endpoint, timeout=5.0))
    try:
        yield exporter
    finally:
        exporter.close()
        if not exporter.complete:
            again = f"ruizn export {exporter.run_id or 'RUN'} --otlp {_shown_url(url)}"
            _warn(
                f"otlp: not every span of the run reached {_shown_url(endpoint)}"
                f" ({exporter.failure}); send the run again with: {again}"
            )
