"""Prices from genai-prices: the fast path is the library's own arithmetic, the price list
is the pinned one, and a model nobody prices has no price (never zero)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ruizn.effects.models.pricing import GenaiPrices, _Rates, fast_cost, library_cost
from ruizn.state import Usage
from tests.conftest import run_python

PRICES = GenaiPrices()


def anthropic_models() -> list[str]:
    from genai_prices import data_snapshot

    snapshot = data_snapshot.get_snapshot()
    provider, _ = snapshot.find_provider_model("claude-sonnet-4-5", None, "anthropic", None)
    return [model.id for model in provider.models]


MODELS = anthropic_models()


@st.composite
def usages(draw: st.DrawFn) -> Usage:
    tokens = st.integers(min_value=0, max_value=400_000)
    writes = draw(tokens)
    return Usage(
        input_tokens=draw(tokens),
        output_tokens=draw(st.integers(min_value=0, max_value=64_000)),
        cache_creation_input_tokens=writes,
        cache_read_input_tokens=draw(tokens),
        cache_creation_1h_input_tokens=draw(st.integers(min_value=0, max_value=writes)),
    )


@settings(max_examples=300, deadline=None)
@given(model=st.sampled_from(MODELS), usage=usages())
def test_the_fast_path_is_the_libraries_own_price(model: str, usage: Usage) -> None:
    rates = PRICES._rates_of(model)
    assert rates is not None
    fast = fast_cost(rates, usage)
    exact = library_cost(rates.model_price, usage)
    if fast is not None:  # None: a tier applies, and the library prices it
        assert fast == exact
    assert PRICES.cost(model, usage) == float(exact)


def test_one_step_of_100k_in_10k_out_on_sonnet_4_5_is_45_cents() -> None:
    usage = Usage(input_tokens=100_000, output_tokens=10_000)
    assert PRICES.cost("claude-sonnet-4-5", usage) == 0.45
    assert PRICES.cost("claude-sonnet-4-5-20250929", usage) == 0.45


def test_cache_writes_are_priced_by_ttl_and_reads_at_their_own_price() -> None:
    five_minutes = Usage(cache_creation_input_tokens=1_000_000)
    one_hour = Usage(cache_creation_input_tokens=1_000_000, cache_creation_1h_input_tokens=10**6)
    reads = Usage(input_tokens=0, cache_read_input_tokens=1_000_000)
    assert PRICES.cost("claude-haiku-4-5", five_minutes) == 1.25
    assert PRICES.cost("claude-haiku-4-5", one_hour) == 2.0
    assert PRICES.cost("claude-haiku-4-5", reads) == 0.1


def test_past_200k_input_sonnet_4_5_is_billed_at_its_long_context_price() -> None:
    usage = Usage(input_tokens=300_000, output_tokens=1_000)
    rates = PRICES._rates_of("claude-sonnet-4-5")
    assert isinstance(rates, _Rates)
    assert fast_cost(rates, usage) is None
    assert PRICES.cost("claude-sonnet-4-5", usage) == float(
        Decimal(300_000) * 6 / 10**6 + Decimal(1_000) * Decimal("22.5") / 10**6
    )


@pytest.mark.parametrize("model", ["test", "function", "gpt-4o-mini", "claude-nonesuch-9"])
def test_a_model_the_list_does_not_price_has_no_price(model: str) -> None:
    assert PRICES.cost(model, Usage(input_tokens=1)) is None
    assert PRICES.context_window(model) is None


def test_the_price_list_is_the_pinned_genai_prices_and_knows_the_windows() -> None:
    assert PRICES.name == "genai-prices 0.2.3"
    assert PRICES.context_window("claude-sonnet-4-5") == 200_000


def test_the_offline_model_never_loads_the_price_list() -> None:
    code = (
        "import sys; from ruizn.effects.models.pricing import GenaiPrices;"
        " from ruizn.state import Usage;"
        " p = GenaiPrices(); assert p.cost('test', Usage()) is None;"
        " assert p.context_window('test') is None; print('genai_prices' in sys.modules)"
    )
    out = run_python("-c", code, check=True)
    assert out.stdout.strip() == "False"
