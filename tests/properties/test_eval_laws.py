"""The laws of an eval's figures: pass@k and pass^k over n trials of which c passed, and a
report's JSON form."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from ruizn.evals.report import (
    EvalReport,
    Trial,
    pass_at_k,
    pass_hat_k,
    report_from_json,
    report_to_json,
)

counts = st.integers(min_value=1, max_value=30).flatmap(
    lambda n: st.tuples(
        st.just(n), st.integers(min_value=0, max_value=n), st.integers(min_value=1, max_value=n)
    )
)


@given(counts)
def test_pass_hat_k_is_at_most_pass_at_k(nck: tuple[int, int, int]) -> None:
    n, c, k = nck
    assert 0.0 <= pass_hat_k(n, c, k) <= pass_at_k(n, c, k) <= 1.0


@given(counts)
def test_one_draw_is_the_pass_rate(nck: tuple[int, int, int]) -> None:
    n, c, _ = nck
    assert abs(pass_at_k(n, c, 1) - c / n) < 1e-9
    assert abs(pass_hat_k(n, c, 1) - c / n) < 1e-9


@given(counts)
def test_more_draws_make_any_likelier_and_all_rarer(nck: tuple[int, int, int]) -> None:
    n, c, k = nck
    if k < n:
        assert pass_at_k(n, c, k + 1) >= pass_at_k(n, c, k) - 1e-12
        assert pass_hat_k(n, c, k + 1) <= pass_hat_k(n, c, k) + 1e-12


outcomes = st.sampled_from(["passed", "failed", "error", "diverged", "stopped", "not_run"])
trials = st.builds(
    Trial,
    case=st.text(min_size=1, max_size=12),
    epoch=st.integers(min_value=1, max_value=5),
    outcome=outcomes,
    run_id=st.none() | st.text(max_size=8),
    cost=st.none() | st.floats(min_value=0, max_value=10),
    elapsed=st.floats(min_value=0, max_value=100),
    steps=st.integers(min_value=0, max_value=50),
    reason=st.none() | st.text(max_size=20),
)


@given(st.lists(trials, max_size=8), st.floats(min_value=0, max_value=1))
def test_a_report_reads_back_as_it_was_written(found: list[Trial], min_pass: float) -> None:
    report = EvalReport(dataset="d", eval_id="e", epochs=1, trials=tuple(found), min_pass=min_pass)
    assert report_from_json(json.loads(json.dumps(report_to_json(report)))) == report
