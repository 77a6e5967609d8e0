"""`ruizn models`: the models this key can use, as the Models API describes them, with their
prices per million tokens from genai-prices. With no key, or no answer from the API, it says
so and lists the current generation of Claude models genai-prices knows (prices and
windows; nothing about capabilities)."""

from __future__ import annotations

import json
import os
from typing import Any

import click


@click.command("models")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per model, in a list.")
def models_command(as_json: bool) -> None:
    """The models this key can use (the Models API) and their prices (genai-prices)."""
    from ruizn.effects.models.pricing import default_pricer

    pricer = default_pricer()
    facts, problem = _ask_the_api()
    if facts:
        if problem:  # a listing cut short: what came is listed, and why it is short
            click.echo(f"ruizn: {problem}", err=True)
        rows = [_api_row(f, pricer.per_mtok(f.id)) for f in facts]
    else:
        from ruizn.modelfacts import current_generation

        known = pricer.known_models()
        current = set(current_generation(tuple(model_id for model_id, _, _ in known)))
        click.echo(
            f"ruizn: {problem}; the current generation of Claude models {pricer.name} knows"
            " (older and retired ones left out; only the Models API says which this key can"
            " use and which are deprecated):",
            err=True,
        )
        rows = [
            _price_row(model_id, name, deprecated, pricer.per_mtok(model_id), pricer)
            for model_id, name, deprecated in known
            if model_id in current
        ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        _table(rows)


def _ask_the_api() -> tuple[tuple[Any, ...], str]:
    """The Models API's models, or () and why not (one line)."""
    if not os.environ.get("ANTHROPIC_API_KEY"):
        return (), "ANTHROPIC_API_KEY is not set: the Models API was not asked"
    import anyio

    from ruizn.effects.models.anthropic import AnthropicProvider
    from ruizn.effects.models.provider import ProviderConfigError

    async def ask() -> tuple[tuple[Any, ...], str]:
        try:
            provider = AnthropicProvider()
        except ProviderConfigError as exc:
            return (), str(exc)
        try:
            catalog = provider.catalog
            facts = await catalog.models()
            if facts:
                return facts, catalog.problem or ""
            return facts, catalog.problem or "the Models API listed no models"
        finally:
            await provider.aclose()

    return anyio.run(ask)


def _api_row(facts: Any, prices: tuple[float, float] | None) -> dict[str, Any]:
    return {
        "id": facts.id,
        "name": facts.name,
        "lifecycle": facts.lifecycle,
        "deprecated_at": facts.deprecated_at,
        "retires_at": facts.retires_at,
        "context_window": facts.context_window,
        "max_output": facts.max_output,
        "thinking": list(facts.thinking_types) if facts.thinking_types is not None else None,
        "effort": list(facts.effort_levels) if facts.effort_levels is not None else None,
        "structured_outputs": facts.structured_outputs,
        "input_usd_per_mtok": prices[0] if prices else None,
        "output_usd_per_mtok": prices[1] if prices else None,
        "source": "models-api",
    }


def _price_row(
    model_id: str, name: str, deprecated: bool, prices: tuple[float, float] | None, pricer: Any
) -> dict[str, Any]:
    return {
        "id": model_id,
        "name": name,
        "lifecycle": "deprecated" if deprecated else None,  # None: the price list cannot say
        "context_window": pricer.context_window(model_id),
        "input_usd_per_mtok": prices[0] if prices else None,
        "output_usd_per_mtok": prices[1] if prices else None,
        "source": "genai-prices",
    }


def _table(rows: list[dict[str, Any]]) -> None:
    from ruizn.terminal import visible

    def cell(row: dict[str, Any]) -> list[str]:
        lifecycle = row.get("lifecycle") or "?"
        if row.get("retires_at"):
            lifecycle += f" (retires {row['retires_at']})"
        window = row.get("context_window")
        output = row.get("max_output")
        prices = (row.get("input_usd_per_mtok"), row.get("output_usd_per_mtok"))
        return [
            row["id"],
            row.get("name") or "",
            lifecycle,
            f"{window:,}" if window else "?",
            f"{output:,}" if output else "?",
            ",".join(row["thinking"]) if row.get("thinking") is not None else "?",
            ",".join(row["effort"]) if row.get("effort") is not None else "?",
            f"${prices[0]:g} / ${prices[1]:g}" if None not in prices else "?",
        ]

    header = ["ID", "NAME", "LIFECYCLE", "CONTEXT", "MAX OUT", "THINKING", "EFFORT", "$/MTOK"]
    # From the price list alone: no max output, thinking or effort to show.
    keep = [0, 1, 2, 3, 7] if rows and rows[0]["source"] == "genai-prices" else list(range(8))
    table = [[header[i] for i in keep], *([cell(row)[i] for i in keep] for row in rows)]
    header = table[0]
    sizes = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        padded = (text.ljust(size) for text, size in zip(line, sizes, strict=True))
        click.echo(visible("  ".join(padded).rstrip()))
