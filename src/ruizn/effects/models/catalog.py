"""The Models API (`GET /v1/models`, `GET /v1/models/{id}`) through the SDK's own
`client.models`, read into ruizn's `ModelFacts`. SDK types stop here.

Never fatal: a key that may not list models, a proxy without the endpoint, no network, or a
field an older SDK does not have all come back as "not said" (None, ()), and the run goes
on as it would have without the lookup: unknown models pass through.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
import time
from typing import Any, ClassVar

import anthropic
import anyio

from ruizn.effects.models.keptfacts import KeptFacts, KeptFactsStore
from ruizn.modelfacts import ModelFacts, reusable

# The lookup is before the first request of a run: it must not hold a run up for long.
LOOKUP_TIMEOUT = 10.0
# A listing's bounds, whatever the server says: pages of 1,000 models, at most this many,
# all within one deadline (a server that says `has_more` for ever, or pages slowly, ends).
MAX_PAGES = 20
LISTING_DEADLINE = 30.0
_THINKING_TYPES = ("adaptive", "between_tools", "disabled", "enabled")
_EFFORT_LEVELS = ("low", "medium", "high", "xhigh", "max")


class AnthropicCatalog:
    def __init__(
        self, client: anthropic.AsyncAnthropic, kept: KeptFactsStore | None = None
    ) -> None:
        """`kept`: earlier answers, read before asking and written after (None: ask)."""
        self._client = client.with_options(timeout=LOOKUP_TIMEOUT, max_retries=0)
        self._kept = kept
        # Why the last lookup came back empty (for `ruizn models` to say so), or None.
        self.problem: str | None = None
        # The last model `describe` was told the API does not know (HTTP 404), or None.
        self.not_found: str | None = None

    async def describe(self, model: str) -> ModelFacts | None:
        key = _asked(self._client, model)
        known = _Remembered.get(key)
        if known is not None and known.lifecycle != "retired":  # retired: asked again
            return known
        url, digest, _ = key
        if self._kept is not None:
            # A small file read in place: a thread hop would cost more than the read.
            kept = self._kept.read(url, digest, model)
            if kept is not None and reusable(model, kept.facts, kept.asked_at, time.time()):
                return kept.facts
        try:
            info = await self._client.models.retrieve(model)
        except anthropic.NotFoundError:
            self.not_found = model  # a misspelt id, or an endpoint without the Models API
            self._keep(url, digest, model, None)
            return None
        except anthropic.AnthropicError:
            return None  # not remembered: the next run asks again
        facts = facts_of(info)
        _Remembered.put(key, facts)
        self._keep(url, digest, model, facts)
        return facts

    def _keep(self, url: str, digest: str, model: str, facts: ModelFacts | None) -> None:
        if self._kept is not None:
            self._kept.write(url, digest, model, KeptFacts(facts=facts, asked_at=time.time()))

    async def models(self) -> tuple[ModelFacts, ...]:
        """Every model the Models API lists, page by page within the listing's bounds; what
        was listed before a bound was hit, with `problem` saying which."""
        found: dict[str, ModelFacts] = {}  # by id: a model listed twice is listed once
        try:
            with anyio.fail_after(LISTING_DEADLINE):
                await self._pages(found)
        except anthropic.APIStatusError as exc:
            self.problem = f"the Models API answered HTTP {exc.status_code}"
        except (anthropic.APITimeoutError, TimeoutError):
            self.problem = "the Models API did not answer in time"
        except anthropic.AnthropicError:
            self.problem = "the Models API cannot be reached"
        return tuple(found.values())

    async def _pages(self, found: dict[str, ModelFacts]) -> None:
        page = await self._client.models.list(limit=1000)
        cursors: set[str | None] = set()
        for count in range(1, MAX_PAGES + 1):
            if page.last_id in cursors:
                self.problem = "the Models API gave the same page twice: the listing stops"
                return
            cursors.add(page.last_id)
            found.update((facts.id, facts) for facts in map(facts_of, page.data))
            if not page.has_next_page():
                return
            if count == MAX_PAGES:
                self.problem = f"the Models API has more than {MAX_PAGES} pages: the listing stops"
                return
            page = await page.get_next_page()


def remember_facts(seconds: float) -> None:
    """Reuse the Models API's answer about a model for `seconds` in this process (0: ask
    for every run). A fleet process starts runs of the same model all day: this spares it
    even the read of the state directory's kept answers (`keptfacts`). Data about the model,
    not a decision: a model retired meanwhile is refused by the API at the run's first
    request anyway."""
    with _Remembered.lock:
        _Remembered.seconds = seconds
        _Remembered.facts.clear()


class _Remembered:
    lock = threading.Lock()
    seconds = 0.0
    # (base URL, a digest of the key, model) -> (when asked, the answer)
    facts: ClassVar[dict[tuple[str, str, str], tuple[float, ModelFacts]]] = {}

    @classmethod
    def get(cls, key: tuple[str, str, str]) -> ModelFacts | None:
        with cls.lock:
            found = cls.facts.get(key)
            if found is None or time.monotonic() - found[0] >= cls.seconds:
                return None
            return found[1]

    @classmethod
    def put(cls, key: tuple[str, str, str], facts: ModelFacts) -> None:
        with cls.lock:
            if cls.seconds > 0:
                cls.facts[key] = (time.monotonic(), facts)


def _asked(client: anthropic.AsyncAnthropic, model: str) -> tuple[str, str, str]:
    """Who was asked about what: another key or endpoint may see other models."""
    digest = hashlib.sha256(str(client.api_key or "").encode()).hexdigest()[:16]
    return (str(client.base_url), digest, model)


def facts_of(info: Any) -> ModelFacts:
    """A `ModelInfo` (any SDK version since 2.16: a field it lacks is "not said")."""
    capabilities = getattr(info, "capabilities", None)
    thinking = getattr(capabilities, "thinking", None)
    effort = getattr(capabilities, "effort", None)
    lifecycle = getattr(info, "lifecycle", None)
    return ModelFacts(
        id=info.id,
        name=getattr(info, "display_name", "") or "",
        lifecycle=lifecycle if lifecycle in ("active", "deprecated", "retired") else "active",
        deprecated_at=_day(getattr(info, "deprecated_at", None)),
        retires_at=_day(getattr(info, "retires_at", None)),
        context_window=_count(getattr(info, "max_input_tokens", None)),
        max_output=_count(getattr(info, "max_tokens", None)),
        thinking_types=_supported(getattr(thinking, "types", None), _THINKING_TYPES),
        structured_outputs=_flag(getattr(capabilities, "structured_outputs", None)),
        compaction=_compaction(capabilities),
        effort_levels=(
            None
            if effort is None
            else _supported(effort, _EFFORT_LEVELS)
            if effort.supported
            else ()
        ),
    )


def _supported(record: Any, names: tuple[str, ...]) -> tuple[str, ...] | None:
    if record is None:
        return None
    return tuple(name for name in names if getattr(getattr(record, name, None), "supported", False))


def _compaction(capabilities: Any) -> bool | None:
    """Whether the model takes the compaction request: the beta `compaction.summarize`, else
    the context-management strategy `compact_20260112` (a field an SDK does not type comes
    as a plain dict)."""
    if capabilities is None:
        return None
    said = _flag(_field(_field(capabilities, "compaction"), "summarize"))
    if said is None:
        said = _flag(_field(_field(capabilities, "context_management"), "compact_20260112"))
    return said


def _field(record: Any, name: str) -> Any:
    if isinstance(record, dict):
        return record.get(name)
    return getattr(record, name, None)


def _flag(support: Any) -> bool | None:
    value = _field(support, "supported")
    return value if isinstance(value, bool) else None


def _day(value: Any) -> str | None:
    if isinstance(value, dt.datetime):
        return value.date().isoformat()
    return None


def _count(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None
