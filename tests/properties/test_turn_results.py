"""Laws of `TurnResults`, the O(1) record of a turn's answers: whatever order versions are
answered in, branches included, every version shows exactly the tuple it stands for, and
never changes once made."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ruizn.serde import converter
from ruizn.state import ToolResult, TurnResults


@settings(max_examples=300, deadline=None)
@given(
    size=st.integers(min_value=0, max_value=12),
    steps=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 11)), max_size=40),
)
def test_every_version_shows_its_tuple_and_never_changes(
    size: int, steps: list[tuple[int, int]]
) -> None:
    # versions[i] is a TurnResults; tuples[i] the tuple it must show, built the slow way.
    versions = [TurnResults(size)]
    tuples: list[tuple[ToolResult | None, ...]] = [(None,) * size]
    for n, (pick, index) in enumerate(steps):
        base = pick % len(versions)  # any version, old ones too: a branch
        version, expected = versions[base], tuples[base]
        result = ToolResult.ok(f"r{n}")
        if index >= size or expected[index] is not None:
            with pytest.raises((IndexError, ValueError)):
                version.answer(index, result)
            continue
        versions.append(version.answer(index, result))
        tuples.append((*expected[:index], result, *expected[index + 1 :]))
        for made, shown in zip(versions, tuples, strict=True):
            assert made.as_tuple() == shown
            assert made == shown
            assert tuple(made) == shown
            assert len(made) == size
            assert made.answered == sum(r is not None for r in shown)
            assert all(made.get(i) == shown[i] for i in range(size))
    for made, shown in zip(versions, tuples, strict=True):
        assert converter.structure(converter.unstructure(made), TurnResults) == made
        assert TurnResults.of(shown) == made
