"""What a model call costs, in US dollars, and how large a model's context window is.

Prices come from `genai-prices` (pydantic's kept database of LLM prices), never from a
table of our own. The version is pinned in pyproject.toml, so a run's costs do not change
under it; `pip install -U genai-prices` (and the pin raised) brings new prices and models.
The runner prices each call as it is made and records the cost, and the price list that
gave it, on `llm_response`: a run's cost is then a fact of its log, replayed exactly,
whatever prices come later. Calls logged before ruizn priced them can be priced now, by
`price_now`, and are shown as such.

`genai_prices` takes a fifth of a second to import: it is imported on the first call that
needs it, never by `ruizn --help`, `runs` or `show` for runs whose calls are priced.

A price lookup through the library's generic path takes about 0.25 ms, which a step would
feel; the per-model prices are looked up once, and a call whose input stays under every
price tier (Anthropic's long-context prices) is priced from them with the same Decimal
arithmetic (a property test holds the two equal). Anything else goes through the library.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Protocol

from ruizn.defaults import TEST_MODEL
from ruizn.state import Usage

PROVIDER = "anthropic"
# Model names that are not Claude models (the offline model; `Agent(model=function)`): no
# price and no window, known without loading the price list.
NOT_MODELS = frozenset({TEST_MODEL, "function"})
_MILLION = Decimal(1_000_000)


class SharedBudget(Protocol):
    """A budget this run shares with other runs (a fleet's batch), asked before each step."""

    def spent(self) -> tuple[str, float, float] | None:
        """(its name, its limit, what its runs have spent) once it is spent; else None."""
        ...


class Pricer(Protocol):
    """Prices model calls. `name` is recorded with each cost (`llm_response.priced_by`)."""

    name: str

    def cost(self, model: str, usage: Usage) -> float | None:
        """The call's cost in USD, or None: no known price for the model."""
        ...

    def context_window(self, model: str) -> int | None:
        """The model's context window in tokens, or None: unknown."""
        ...


class _Rates:
    """A model's prices per million tokens, for the fast path: (base, lowest tier start) per
    usage kind, or None when the model has no price of that kind (the library decides)."""

    def __init__(self, model_price: Any) -> None:
        self.model_price = model_price
        self.input = _rate(model_price.input_mtok)
        self.output = _rate(model_price.output_mtok)
        self.cache_read = _rate(model_price.cache_read_mtok)
        self.cache_write = _rate(model_price.cache_write_mtok)
        self.cache_write_1h = _rate(model_price.cache_write_1h_mtok)


def _rate(price: Any) -> tuple[Decimal, int | None] | None:
    if price is None:
        return None
    tiers = getattr(price, "tiers", None)
    if tiers is None:
        return (price, None)
    return (price.base, min((tier.start for tier in tiers), default=None))


class GenaiPrices:
    """The price list of the installed `genai-prices`."""

    def __init__(self) -> None:
        self._rates: dict[str, _Rates | None] = {}
        self._windows: dict[str, int | None] = {}
        self._loaded: Any = None
        self.name = f"genai-prices {_version()}"

    def _snapshot(self) -> Any:
        if self._loaded is None:
            from genai_prices import data_snapshot

            self._loaded = data_snapshot.get_snapshot()
        return self._loaded

    def _model(self, model: str) -> tuple[Any, Any] | None:
        if model in NOT_MODELS:
            return None
        try:
            return self._snapshot().find_provider_model(model, None, PROVIDER, None)  # type: ignore[no-any-return]
        except LookupError:
            return None

    def _rates_of(self, model: str) -> _Rates | None:
        if model not in self._rates:
            found = self._model(model)
            if found is None:
                self._rates[model] = None
            else:
                from datetime import UTC, datetime

                self._rates[model] = _Rates(found[1].get_prices(datetime.now(tz=UTC)))
        return self._rates[model]

    def cost(self, model: str, usage: Usage) -> float | None:
        rates = self._rates_of(model)
        if rates is None:
            return None
        total = fast_cost(rates, usage)
        if total is None:
            total = library_cost(rates.model_price, usage)
        return float(total)

    def per_mtok(self, model: str) -> tuple[float, float] | None:
        """The model's base prices (input, output) in USD per million tokens, if known."""
        rates = self._rates_of(model)
        if rates is None or rates.input is None or rates.output is None:
            return None
        return float(rates.input[0]), float(rates.output[0])

    def known_models(self) -> tuple[tuple[str, str, bool], ...]:
        """(id, name, deprecated) of every Claude model the price list knows."""
        provider = self._snapshot().find_provider(None, PROVIDER, None)
        return tuple(
            (m.id, m.name or "", bool(getattr(m, "deprecated", False))) for m in provider.models
        )

    def context_window(self, model: str) -> int | None:
        if model not in self._windows:
            found = self._model(model)
            window = getattr(found[1], "context_window", None) if found is not None else None
            self._windows[model] = window if isinstance(window, int) and window > 0 else None
        return self._windows[model]


def fast_cost(rates: _Rates, usage: Usage) -> Decimal | None:
    """The cost from the model's base prices, or None when the library must decide (a tier
    applies, or the usage has a kind the model prices no way of its own)."""
    whole_input = usage.total_input_tokens
    writes_1h = usage.cache_creation_1h_input_tokens
    writes_5m = usage.cache_creation_input_tokens - writes_1h
    total = Decimal(0)
    for rate, count in (
        (rates.input, usage.input_tokens),
        (rates.output, usage.output_tokens),
        (rates.cache_read, usage.cache_read_input_tokens),
        (rates.cache_write, writes_5m),
        (rates.cache_write_1h, writes_1h),
    ):
        if not count:
            continue
        if rate is None:
            return None
        price, tier_start = rate
        if tier_start is not None and whole_input > tier_start:
            return None
        total += price * count
    return total / _MILLION


def library_cost(model_price: Any, usage: Usage) -> Decimal:
    """The cost as genai-prices computes it (its usage counts input with the cache's)."""
    from genai_prices import Usage as PriceUsage

    counts = PriceUsage(
        input_tokens=usage.total_input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_input_tokens,
        cache_write_tokens=usage.cache_creation_input_tokens,
        cache_write_1h_tokens=usage.cache_creation_1h_input_tokens,
    )
    return model_price.calc_price(counts)["total_price"]  # type: ignore[no-any-return]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("genai-prices")
    except PackageNotFoundError:  # pragma: no cover - a dependency of ruizn
        return "unknown"


class FixedPrices:
    """A test fake: prices per million tokens (input, output, cache write, cache read) for
    the models it names, and the context windows it is given."""

    def __init__(
        self,
        prices: dict[str, tuple[float, float, float, float]],
        windows: dict[str, int] | None = None,
        name: str = "fixed prices",
    ) -> None:
        self._prices = prices
        self._windows = windows or {}
        self.name = name

    def cost(self, model: str, usage: Usage) -> float | None:
        price = self._prices.get(model)
        if price is None:
            return None
        per_input, per_output, per_write, per_read = price
        return (
            usage.input_tokens * per_input
            + usage.output_tokens * per_output
            + usage.cache_creation_input_tokens * per_write
            + usage.cache_read_input_tokens * per_read
        ) / 1_000_000

    def context_window(self, model: str) -> int | None:
        return self._windows.get(model)


_DEFAULT: list[GenaiPrices] = []


def default_pricer() -> GenaiPrices:
    """The process's one price list (its lookups are cached across runs)."""
    if not _DEFAULT:
        _DEFAULT.append(GenaiPrices())
    return _DEFAULT[0]


def price_now(model: str, usage: Usage, pricer: Pricer | None = None) -> float | None:
    """What `usage` costs at today's prices (for calls the log holds no cost for)."""
    return (pricer or default_pricer()).cost(model, usage)


def unpriced(model: str, option: str, pricer: Pricer | None = None) -> str | None:
    """Why a budget (`option`: `--max-cost`, `--batch-max-cost`) cannot be kept for runs of
    `model`, in one line, or None: a model the price list does not know would spend without
    counting."""
    pricer = pricer or default_pricer()
    if pricer.cost(model, Usage()) is not None:
        return None
    return (
        f"no known price for model {model} ({pricer.name}): a {option} budget cannot be kept for it"
    )


__all__ = [
    "FixedPrices",
    "GenaiPrices",
    "Pricer",
    "SharedBudget",
    "default_pricer",
    "price_now",
    "unpriced",
]
