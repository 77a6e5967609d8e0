"""Prompt-cache emulation: prefix caching keyed by the request's cache_control markers.

Like the Messages API: the prefix is tools, then system, then the messages' blocks; a block
with `cache_control` is a breakpoint whose prefix is written to the cache; a later request
reads the longest stored prefix it starts with.
"""

from __future__ import annotations

import hashlib
import json
import threading
from typing import Any


def _tokens(block: Any) -> int:
    if isinstance(block, dict):
        block = {k: v for k, v in block.items() if k != "cache_control"}
    return max(1, len(json.dumps(block, separators=(",", ":"), ensure_ascii=False)) // 4)


def _prefix_blocks(body: dict[str, Any]) -> list[Any]:
    blocks: list[Any] = list(body.get("tools", []))
    system = body.get("system")
    if isinstance(system, str):
        blocks.append({"type": "text", "text": system})
    elif isinstance(system, list):
        blocks.extend(system)
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content, "role": message.get("role")})
        else:
            for block in content or []:
                blocks.append(
                    {**block, "role": message.get("role")} if isinstance(block, dict) else block
                )
    return blocks


class PromptCache:
    def __init__(self, min_tokens: int = 0) -> None:
        self._stored: set[str] = set()
        self._lock = threading.Lock()
        self.min_tokens = min_tokens

    def reset(self) -> None:
        with self._lock:
            self._stored.clear()

    def usage(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """(input_tokens, cache_creation_input_tokens, cache_read_input_tokens)."""
        running = hashlib.sha256()
        total = 0
        boundaries: list[tuple[str, int, bool]] = []
        for block in _prefix_blocks(body):
            clean = block
            marked = isinstance(block, dict) and "cache_control" in block
            if isinstance(block, dict):
                clean = {k: v for k, v in block.items() if k != "cache_control"}
            running.update(json.dumps(clean, sort_keys=True).encode())
            total += _tokens(block)
            boundaries.append((running.copy().hexdigest(), total, marked))
        with self._lock:
            read = 0
            for digest, tokens, _ in boundaries:
                if digest in self._stored:
                    read = tokens
            creation = 0
            for digest, tokens, marked in boundaries:
                if marked and tokens >= self.min_tokens:
                    if tokens > read:
                        creation = tokens - read
                    self._stored.add(digest)
        return total - read - creation, creation, read
