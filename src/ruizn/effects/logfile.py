"""Reading an events.jsonl back, one line at a time.

The writer puts each event in one write(2) ending with a newline, so the only damage a crash
can do is to the last line: it may lack its newline or hold half an object ("torn"). A torn
tail is reported and left out; any other bad line is an error naming its line number, since
guessing past it could rebuild the wrong state.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

from attrs import frozen

from ruizn.events import Event, RunStarted
from ruizn.reducers import InvalidTransition, replay
from ruizn.serde import DecodeError, decode
from ruizn.state import ExecutionContext

LOG_NAME = "events.jsonl"


class LogError(ValueError):
    """The log cannot be read as one ruizn run; the message names the line."""


@frozen(kw_only=True)
class TornTail:
    line: int
    offset: int  # byte offset where the torn line starts: resume cuts the file there
    size: int

    def describe(self, path: Path) -> str:
        return (
            f"{path}: line {self.line} is torn ({self.size} bytes of an unfinished write);"
            f" using the {self.line - 1} events before it"
        )


@frozen(kw_only=True)
class Replayed:
    state: ExecutionContext
    events: int
    torn: TornTail | None
    size: int  # bytes of whole lines (where an append must continue)


def iter_events(path: Path, torn: Callable[[TornTail], None] | None = None) -> Iterator[Event]:
    """The events of a log, streamed (memory stays flat for any length)."""
    offset = 0
    with path.open("rb") as f:
        previous: bytes | None = None
        number = 0
        for raw in f:
            # Decide about a line only once we know whether another follows it.
            if previous is not None:
                yield _decode_line(previous, number, last=False)
                offset += len(previous)
            previous = raw
            number += 1
        if previous is None:
            raise LogError(f"{path}: the log is empty")
        last: Event | None = None
        if previous.endswith(b"\n"):
            with contextlib.suppress(_TornLine):
                last = _decode_line(previous, number, last=True)
        if last is not None:
            yield last
            return
        tail = TornTail(line=number, offset=offset, size=len(previous))
        if number == 1:
            raise LogError(f"{path}: line 1 is torn: the log holds no whole event")
        if torn is not None:
            torn(tail)


class _TornLine(Exception):
    pass


def _decode_line(raw: bytes, number: int, *, last: bool) -> Event:
    try:
        return decode(raw)
    except DecodeError as exc:
        if last and str(exc).startswith("not JSON"):
            raise _TornLine from None
        raise LogError(f"line {number}: {exc}") from None


def replay_file(
    path: Path,
    on_event: Callable[[Event], None] | None = None,
    torn: Callable[[TornTail], None] | None = None,
) -> Replayed:
    """Fold a log into the state it describes, calling `on_event` for each whole event."""
    seen: list[TornTail] = []

    def note_torn(tail: TornTail) -> None:
        seen.append(tail)
        if torn is not None:
            torn(tail)

    count = 0
    events = iter_events(path, note_torn)

    def counted() -> Iterator[Event]:
        nonlocal count
        for event in events:
            count += 1
            yield event
            if on_event is not None:
                on_event(event)

    stream = counted()
    try:
        first = next(stream)
        if not isinstance(first, RunStarted):
            raise LogError(f"line 1: not a ruizn run: it begins with {first.TAG}")
        state = replay(itertools.chain((first,), stream))
    except InvalidTransition as exc:
        raise LogError(f"line {count}: {exc}") from None
    except OSError as exc:
        raise LogError(f"{path}: {exc.strerror or exc}") from None
    tail = seen[0] if seen else None
    size = tail.offset if tail else path.stat().st_size
    return Replayed(state=state, events=count, torn=tail, size=size)
