"""Reading an events.jsonl back, one line at a time, in bounded memory.

The writer puts each event in one write(2) ending with a newline, so the only damage a crash
can do is to the last line: its newline never reached the disk ("torn"). A torn tail is
reported and left out (resume cuts it). Torn means exactly that: a last line without its
newline. A whole line (newline included) that is not a valid event, the last one as much as
any other, is an error naming its line, since guessing past it could rebuild the wrong
state, and nothing is cut.

A log is read like hostile input: opened as `effects/runlog/folder.py` says (no link
followed, a regular file or nothing), and streamed, each line read with a cap: a line longer than
`MAX_LINE_BYTES` is refused with an error naming it, never read whole, so a planted log of
gigabytes costs no more memory than one line at the cap.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import BinaryIO

from attrs import define, frozen

from ruizn.effects.runlog.folder import RunFolder, UnsafeRunFile
from ruizn.events import Event, RunStarted
from ruizn.reducers import InvalidTransition, rebuild
from ruizn.serde import DecodeError, decode
from ruizn.state import ExecutionContext

LOG_NAME = "events.jsonl"
# The longest line a log may hold, its newline included. The writer refuses to write a
# longer one and the reader to read one. Far above any line ruizn writes today (a model's
# reply is bounded by max_tokens, a tool result by its tool's cap, a write_file by 10 MiB),
# with room for the several MB of base64 an image in a tool result will bring.
MAX_LINE_BYTES = 64 << 20
_READ_BUFFER = 1 << 16


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


def open_log(path: Path, folder: RunFolder | None = None) -> BinaryIO:
    """The log at `path` opened for reading, checked as `effects/runlog/folder.py` says;
    `folder`: its run folder, already open. Raises `LogError` naming the file and why."""
    try:
        if folder is not None:
            fd = folder.open_file(path.name, os.O_RDONLY, write=False)
        else:
            with RunFolder.open(path.parent) as opened:
                fd = opened.open_file(path.name, os.O_RDONLY, write=False)
    except UnsafeRunFile as exc:
        raise LogError(str(exc)) from None
    except OSError as exc:
        raise LogError(f"{path}: {exc.strerror or exc}") from None
    return open(fd, "rb", buffering=_READ_BUFFER)


@define
class _Tail:
    """What reading a log found after its last whole line."""

    torn: TornTail | None = None
    whole: int = 0  # bytes of whole lines


def _events(f: BinaryIO, path: Path, tail: _Tail) -> Iterator[Event]:
    """The events of an open log from its start; a torn tail is left in `tail`."""
    number = 0
    # readline with a cap: a line past it comes back cut at the cap, never read whole.
    for number, raw in enumerate(iter(partial(f.readline, MAX_LINE_BYTES), b""), 1):
        if raw[-1] == 10:  # ends in b"\n": a whole line, an event or an error
            try:
                event = decode(raw)
            except DecodeError as exc:
                raise LogError(f"line {number}: {exc}") from None
            yield event
            continue
        if len(raw) == MAX_LINE_BYTES:
            raise LogError(
                f"{path}: line {number} is longer than {MAX_LINE_BYTES >> 20} MiB, the longest"
                " line a log may hold; it was not read further"
            )
        # Short of the cap and no newline: readline met the end of the file.
        if number == 1:
            raise LogError(f"{path}: line 1 is torn: the log holds no whole event")
        tail.whole = f.tell() - len(raw)
        tail.torn = TornTail(line=number, offset=tail.whole, size=len(raw))
        return
    if number == 0:
        raise LogError(f"{path}: the log is empty")
    tail.whole = f.tell()


def iter_events(path: Path, torn: Callable[[TornTail], None] | None = None) -> Iterator[Event]:
    """The events of a log, streamed (memory stays flat for any length)."""
    tail = _Tail()
    with open_log(path) as f:
        try:
            yield from _events(f, path, tail)
        except OSError as exc:
            raise LogError(f"{path}: {exc.strerror or exc}") from None
    if tail.torn is not None and torn is not None:
        torn(tail.torn)


def replay_file(
    path: Path,
    on_event: Callable[[Event], None] | None = None,
    torn: Callable[[TornTail], None] | None = None,
) -> Replayed:
    """Fold a log into the state it describes, calling `on_event` for each whole event."""
    with open_log(path) as f:
        return replay_stream(f, path, on_event=on_event, torn=torn)


def replay_stream(
    f: BinaryIO,
    path: Path,
    on_event: Callable[[Event], None] | None = None,
    torn: Callable[[TornTail], None] | None = None,
) -> Replayed:
    """`replay_file` of a log already open (read from where `f` stands: its start); `path`
    names it in errors."""
    count = 0
    tail = _Tail()

    def counted() -> Iterator[Event]:
        nonlocal count
        for event in _events(f, path, tail):
            count += 1
            yield event
            if on_event is not None:
                on_event(event)

    stream = counted()
    try:
        first = next(stream)
        if not isinstance(first, RunStarted):
            raise LogError(f"line 1: not a ruizn run: it begins with {first.TAG}")
        state = rebuild(itertools.chain((first,), stream))
    except InvalidTransition as exc:
        raise LogError(f"line {count}: {exc}") from None
    except OSError as exc:
        raise LogError(f"{path}: {exc.strerror or exc}") from None
    if tail.torn is not None and torn is not None:
        torn(tail.torn)
    return Replayed(state=state, events=count, torn=tail.torn, size=tail.whole)
