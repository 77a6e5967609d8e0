"""Prompt-cache emulation: prefix caching keyed by the request's `cache_control` markers.

Like the Messages API: the prompt is one sequence of blocks, tools first, then system, then
the messages' content blocks. A block with `cache_control` is a breakpoint; its prefix (every
block up to and including it) is written to the cache. A later request reads the longest
prefix it shares with a stored one, but only up to its own last breakpoint: the real API only
looks up the cache from breakpoints, so a request without any `cache_control` reads nothing.
A top-level `cache_control` (automatic caching, recording 24) marks the last block.

Not emulated: TTLs (nothing expires), the 20-block look-back limit, per-model minimums
(`min_tokens` is one number, 0 by default so small test prompts cache).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Boundary:
    digest: str  # hash of the prefix ending at this block
    tokens: int  # tokens of that prefix
    breakpoint: bool


def _clean(block: Any) -> Any:
    # cache_control is a caching instruction, not prompt content: it neither counts nor hashes.
    if isinstance(block, dict):
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def block_tokens(block: Any) -> int:
    """Tokens of one block: a quarter of its compact canonical JSON (at least 1)."""
    return max(1, len(_canonical(_clean(block))) // 4)


def prefix_blocks(body: dict[str, Any]) -> list[tuple[str, Any]]:
    """(section, block) in cache-prefix order; the section (tool, system or the role) is
    hashed with the block so that the same text from the user and the assistant differ."""
    out: list[tuple[str, Any]] = [("tool", t) for t in body.get("tools") or []]
    system = body.get("system")
    if isinstance(system, str):
        out.append(("system", {"type": "text", "text": system}))
    elif isinstance(system, list):
        out.extend(("system", b) for b in system)
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = str(message.get("role"))
        content = message.get("content")
        if isinstance(content, str):
            out.append((role, {"type": "text", "text": content}))
        elif isinstance(content, list):
            out.extend((role, b) for b in content)
    return out


def boundaries(body: dict[str, Any]) -> list[_Boundary]:
    # Seeded with the model: the real cache is per model.
    running = hashlib.sha256(_canonical(body.get("model")).encode())
    total = 0
    out: list[_Boundary] = []
    for section, block in prefix_blocks(body):
        running.update(_canonical([section, _clean(block)]).encode() + b"\n")
        total += block_tokens(block)
        marked = isinstance(block, dict) and "cache_control" in block
        out.append(_Boundary(running.copy().hexdigest(), total, marked))
    if out and body.get("cache_control"):
        last = out[-1]
        out[-1] = _Boundary(last.digest, last.tokens, True)
    return out


class PromptCache:
    """Thread-safe: every request's lookup-and-store is one critical section."""

    def __init__(self, min_tokens: int = 0) -> None:
        self.min_tokens = min_tokens
        self._stored: set[str] = set()
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self._stored.clear()

    def __len__(self) -> int:
        """How many prefixes are stored."""
        with self._lock:
            return len(self._stored)

    def usage(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """(input_tokens, cache_creation_input_tokens, cache_read_input_tokens); stores the
        request's breakpoints as a side effect, like the real API."""
        marks = boundaries(body)
        total = marks[-1].tokens if marks else 0
        last_breakpoint = max((i for i, b in enumerate(marks) if b.breakpoint), default=-1)
        with self._lock:
            read_at = -1
            for i in range(last_breakpoint + 1):
                if marks[i].digest in self._stored:
                    read_at = i
            read = marks[read_at].tokens if read_at >= 0 else 0
            creation = 0
            for i, mark in enumerate(marks):
                if mark.breakpoint and mark.tokens >= self.min_tokens:
                    self._stored.add(mark.digest)
                    if i > read_at:
                        creation = mark.tokens - read  # the last such breakpoint wins
        return total - read - creation, creation, read
