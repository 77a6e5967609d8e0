"""Structured output: the JSON Schema of a run's `output_type`, the check of a schema given
as it is, and which way a model is asked for it (constrained decoding or a final tool)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from ruizn.effects.models.provider import ModelCatalog, Provider
from ruizn.settings import ConfigError, JsonObject, RunSettings


def check_output_schema(schema: JsonObject | None) -> None:
    """A schema the API would refuse is refused before any run (ConfigError)."""
    if schema is None:
        return
    from ruizn.rules import schema_problem

    problem = schema_problem(schema)
    if problem is not None:
        raise ConfigError(f"output_schema: {problem}")


async def output_mode(provider: Provider, settings: RunSettings) -> Literal["format", "tool"]:
    """Constrained decoding (output_config.format) where the Models API says the model
    supports it; else the final tool, which every model with tools can call."""
    catalog = getattr(provider, "catalog", None)
    if not isinstance(catalog, ModelCatalog):
        return "tool"
    facts = await catalog.describe(settings.model)
    return "format" if facts is not None and facts.structured_outputs is True else "tool"


def output_schema_of(output_type: Any) -> tuple[JsonObject, Callable[[Any], Any] | None]:
    """A JSON Schema dict as given (the output stays the JSON value); a pydantic model or a
    TypedDict as pydantic describes it, with the function that makes the value that type."""
    if isinstance(output_type, dict):
        return output_type, None
    from pydantic import TypeAdapter

    try:
        adapter: TypeAdapter[Any] = TypeAdapter(output_type)
        schema = adapter.json_schema()
    except Exception as exc:  # pydantic's errors for a type it cannot describe
        raise ConfigError(f"output_type {output_type!r} has no JSON Schema: {exc}") from None
    return schema, adapter.validate_python


__all__: Sequence[str] = ("check_output_schema", "output_mode", "output_schema_of")
