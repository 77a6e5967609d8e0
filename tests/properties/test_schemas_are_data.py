"""Law: a schema is data. Whatever schema a log holds (references that leave it or loop,
patterns that would backtrack in Python's `re`), checking any answer against it returns a
verdict, the same each time (the reducer makes it again on replay), and raises nothing."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ruizn.rules import schema_error

REFS = st.sampled_from(["#", "#/anyOf/0", "#/properties/a", "http://127.0.0.1:9/x.json", "x.json"])
PATTERNS = st.sampled_from(["^(a+)+$", "(a|aa)*b", "(?=a)a", r"(\w+)\1", "^[a-z]*$", "("])
LEAVES: st.SearchStrategy[Any] = st.one_of(
    st.builds(lambda ref: {"$ref": ref}, REFS),
    st.builds(lambda p: {"type": "string", "pattern": p}, PATTERNS),
    st.builds(lambda p: {"patternProperties": {p: {}}, "additionalProperties": False}, PATTERNS),
    st.just({"type": "object"}),
)
SCHEMAS = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.builds(lambda xs: {"anyOf": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda a: {"type": "object", "properties": {"a": a}}, inner),
        st.builds(lambda i: {"type": "array", "items": i}, inner),
    ),
    max_leaves=6,
)
TEXT = st.text(alphabet="ab!", max_size=40)
ANSWERS: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.none(), TEXT, st.integers()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(TEXT | st.just("a"), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(schema=SCHEMAS, answer=ANSWERS)
def test_checking_an_answer_against_any_schema_is_a_verdict(schema: Any, answer: Any) -> None:
    verdict = schema_error(schema, answer)
    assert verdict is None or isinstance(verdict, str)
    assert schema_error(schema, answer) == verdict
