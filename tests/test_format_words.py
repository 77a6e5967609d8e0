"""Numbers and the nouns that agree with them, as every command prints them."""

from __future__ import annotations

from ruizn.format import counted


def test_one_is_singular_and_every_other_count_plural() -> None:
    assert counted(1, "step") == "1 step"
    assert counted(0, "step") == "0 steps"
    assert counted(2, "tool call") == "2 tool calls"
    assert counted(1, "entry", "entries") == "1 entry"
    assert counted(3, "entry", "entries") == "3 entries"
    assert counted(12345, "run") == "12,345 runs"
