"""What the Models API says about a model, and the decisions made from it before a run's
first request: is the model there at all, is it deprecated, can it take the thinking and
effort the run asks for, and what the run records as its window and thinking mode.

Pure: the facts are fetched by an effect (`ruizn.effects.models.catalog`), the lines these
functions return are printed by the shell. A model the Models API does not describe (no
key that may list models, a proxy without the endpoint, `--model test`) passes through:
ruizn never guesses a capability.
"""

from __future__ import annotations

import difflib
import re
from typing import Literal

from attrs import evolve, frozen

from ruizn.settings import ConfigError, RunSettings

Lifecycle = Literal["active", "deprecated", "retired"]
# What `--thinking` names, and the `thinking.type` each sends.
THINKING_TYPES = {"adaptive": "adaptive", "off": "disabled"}
# How many of the key's models a not-found line names, closest first.
SUGGESTIONS = 6
# How long an answer of the Models API kept in the state directory stands in for asking
# again: a model's facts change a few times a year, a run starts many times a day.
FACTS_KEPT_FOR = 86_400.0


@frozen(kw_only=True)
class ModelFacts:
    """One model as the Models API describes it (SDK `ModelInfo`). A None is "not said"."""

    id: str
    name: str = ""
    lifecycle: Lifecycle = "active"
    deprecated_at: str | None = None  # ISO dates (YYYY-MM-DD)
    retires_at: str | None = None
    context_window: int | None = None
    max_output: int | None = None
    thinking_types: tuple[str, ...] | None = None  # the accepted `thinking.type` values
    effort_levels: tuple[str, ...] | None = None  # the accepted `output_config.effort`s
    structured_outputs: bool | None = None  # takes `output_config.format`
    # Takes the API's compaction request (`compaction: {type: summarize}`; the beta
    # `capabilities.compaction.summarize`, or `context_management.compact_20260112`).
    compaction: bool | None = None


class ModelRefused(ConfigError):
    """The run cannot start on this model with these settings; the message is one line."""


def reusable(model: str, kept: ModelFacts | None, asked_at: float, now: float) -> bool:
    """Whether an earlier answer about `model`, asked at `asked_at` (seconds, the wall clock),
    stands in for asking the Models API now: only a day's answer that the model is there. An
    "unknown" (None) or "retired" is asked again before it refuses a run; an answer about
    another model, or from the future (a clock set back, a file from elsewhere), is not used."""
    return (
        kept is not None
        and kept.id == model
        and kept.lifecycle != "retired"
        and 0.0 <= now - asked_at < FACTS_KEPT_FOR
    )


def closest(model: str, ids: tuple[str, ...]) -> tuple[str, ...]:
    """`ids` ordered by how close each is to `model` (ties keep the API's order)."""
    ranked = sorted(
        enumerate(ids),
        key=lambda pair: (-difflib.SequenceMatcher(None, model, pair[1]).ratio(), pair[0]),
    )
    return tuple(model_id for _, model_id in ranked)


def not_found_line(model: str, available: tuple[str, ...], *, why: str = "not found") -> str:
    """`model not found: 'x'; this key can use: a, b, ...` (closest first)."""
    line = f"model {why}: {model!r}"
    if not available:
        return f"{line}; choose another with --model (`ruizn models` lists them)"
    names = closest(model, available)
    more = len(names) - SUGGESTIONS
    listed = ", ".join(names[:SUGGESTIONS]) + (f" (+{more} more: ruizn models)" if more > 0 else "")
    return f"{line}; this key can use: {listed}"


# Today's naming, `claude-FAMILY-MAJOR[-MINOR]` (claude-sonnet-5-5); older ids
# (claude-2, claude-v1, claude-3-5-sonnet) do not fit it.
_CURRENT_NAMING = re.compile(r"claude-[a-z]+-(\d+)(?:-\d+)?")


def current_generation(ids: tuple[str, ...]) -> tuple[str, ...]:
    """Of a price list's ids, those of the newest generation (the highest major version of
    today's naming), in their order: what `ruizn models` shows when the Models API, which
    alone knows what is retired, cannot be asked."""
    majors = {i: int(m.group(1)) for i in ids if (m := _CURRENT_NAMING.fullmatch(i)) is not None}
    newest = max(majors.values(), default=None)
    return tuple(i for i in ids if newest is not None and majors.get(i) == newest)


def usable(catalog: tuple[ModelFacts, ...]) -> tuple[str, ...]:
    """The ids of the models a request may name (every one not retired)."""
    return tuple(m.id for m in catalog if m.lifecycle != "retired")


def deprecation_line(facts: ModelFacts) -> str | None:
    """The one warning a run on a deprecated model prints (None: not deprecated)."""
    if facts.lifecycle != "deprecated":
        return None
    when = f"retires on {facts.retires_at}" if facts.retires_at else "is headed for retirement"
    return (
        f"warning: {facts.id} is deprecated and {when};"
        " choose another with --model (`ruizn models` lists them)"
    )


def choice_problem(settings: RunSettings, facts: ModelFacts) -> str | None:
    """The one-line error for a setting this model refuses, before any request is sent."""
    model = facts.id
    if settings.thinking is not None and facts.thinking_types is not None:
        wanted = THINKING_TYPES[settings.thinking]
        if wanted not in facts.thinking_types:
            takes = [k for k, v in THINKING_TYPES.items() if v in facts.thinking_types]
            offer = f" (it takes: {', '.join(takes)})" if takes else " (it does not think)"
            return f"{model} does not support --thinking {settings.thinking}{offer}"
    levels = facts.effort_levels
    if settings.effort is not None and levels is not None and settings.effort not in levels:
        named = ", ".join(levels) or "none"
        return f"{model} does not support --effort {settings.effort} (it takes: {named})"
    if facts.max_output is not None and settings.max_tokens > facts.max_output:
        return (
            f"--max-tokens {settings.max_tokens:,} is more than {model} can write"
            f" ({facts.max_output:,} tokens)"
        )
    return None


def fitted(settings: RunSettings, facts: ModelFacts | None) -> RunSettings:
    """The settings a new run records, filled from the facts: the window the API states, and
    adaptive thinking where the model takes it and the run did not choose."""
    if facts is None:
        return settings
    if settings.context_window is None and facts.context_window is not None:
        settings = evolve(settings, context_window=facts.context_window)
    if (
        settings.thinking is None
        and facts.thinking_types is not None
        and "adaptive" in facts.thinking_types
    ):
        settings = evolve(settings, thinking="adaptive")
    if settings.compaction is None and facts.compaction is not None:
        # The API's compaction where the model takes it; else ruizn's own summary.
        settings = evolve(settings, compaction="server" if facts.compaction else "client")
    return settings


def check(settings: RunSettings, facts: ModelFacts | None, catalog: tuple[ModelFacts, ...]) -> None:
    """Raise ModelRefused for a retired model or a refused choice; unknown models pass."""
    if facts is None:
        return
    if facts.lifecycle == "retired":
        when = f" on {facts.retires_at}" if facts.retires_at else ""
        raise ModelRefused(not_found_line(facts.id, usable(catalog), why=f"retired{when}"))
    problem = choice_problem(settings, facts)
    if problem is not None:
        raise ModelRefused(problem)
