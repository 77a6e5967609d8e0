"""A command's output as the shell tools keep it (capped: its head and its tail), and the
sink a foreground command's output is shown to while it runs (`CommandOutput`)."""

from __future__ import annotations

import threading
from typing import Protocol

__all__ = ["HEAD_BYTES", "LIVE_EVERY", "TAIL_BYTES", "CappedOutput", "CommandOutput", "render"]

# What the model reads of a command's output: the head and the tail, the middle cut.
HEAD_BYTES = 8 * 1024
TAIL_BYTES = 24 * 1024
# With a CommandOutput (a terminal): how often a running command's output is looked at, and
# how much of its end is handed over.
LIVE_EVERY = 0.1
_LIVE_BYTES = 4096


class CommandOutput(Protocol):
    """Where a foreground command's output goes while it runs: the CLI draws its last lines
    at a terminal. Display only: the call's result (and so the log) is the same without it.
    Called on the event loop's thread."""

    def running(self, job: str, tail: str) -> None:
        """`tail`: the end of what command `job` printed so far (its last bytes, decoded)."""

    def ended(self, job: str) -> None:
        """Command `job` ended (or was cancelled): its lines go."""


class CappedOutput:
    """Bytes a process printed, keeping the first HEAD_BYTES and the last TAIL_BYTES."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        with self._lock:
            self.total += len(chunk)
            room = HEAD_BYTES - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail += chunk
                if len(self.tail) > TAIL_BYTES:
                    del self.tail[: len(self.tail) - TAIL_BYTES]

    def last(self, size: int = _LIVE_BYTES) -> str:
        """The end of what was printed so far (about `size` bytes), left in place."""
        with self._lock:
            data = (
                bytes(self.tail[-size:])
                if len(self.tail) >= size
                else bytes((self.head + self.tail)[-size:])
            )
        return data.decode("utf-8", "replace")

    def take(self) -> str:
        """The text so far (capped), and start again."""
        with self._lock:
            text = render(bytes(self.head), bytes(self.tail), self.total)
            self._reset()
            return text


def render(head: bytes, tail: bytes, total: int) -> str:
    cut = total - len(head) - len(tail)
    if cut <= 0:
        return (head + tail).decode("utf-8", "replace")
    return (
        head.decode("utf-8", "replace")
        + f"\n[... {cut:,} bytes of output cut: {total:,} in all; the first {len(head):,} and"
        f" the last {len(tail):,} are shown ...]\n" + tail.decode("utf-8", "replace")
    )
