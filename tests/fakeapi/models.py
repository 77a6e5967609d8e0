"""The fake's Models API (`GET /v1/models`, `GET /v1/models/{id}`) and the Claude 5 request
rules the real API enforces on `POST /v1/messages`.

The catalogue has the shape of the API's `ModelInfo` (SDK 2.17: lifecycle, deprecated_at,
retires_at, max_input_tokens, max_tokens, capabilities with thinking types and effort
levels). The rules: a model the catalogue lists as retired is a 404; on a model that refuses
them, manual thinking (`thinking.type: enabled` with `budget_tokens`), a thinking type or an
effort level its capabilities do not list, and a non-default temperature/top_p/top_k are
400s. A model the catalogue does not list passes (the fake has no opinion about it).
"""

from __future__ import annotations

from typing import Any

EFFORT_LEVELS = ("low", "medium", "high", "xhigh", "max")


def _support(value: bool) -> dict[str, bool]:
    return {"supported": value}


def model_info(
    model_id: str,
    name: str,
    *,
    created: str = "2026-09-01T00:00:00Z",
    lifecycle: str = "active",
    deprecated_at: str | None = None,
    retires_at: str | None = None,
    window: int = 1_000_000,
    max_tokens: int = 128_000,
    thinking: tuple[str, ...] = ("adaptive", "disabled"),
    effort: tuple[str, ...] = EFFORT_LEVELS,
    line: str | None = None,
    compaction: bool = True,
) -> dict[str, Any]:
    """One catalogue entry, every capability key present (as the API sends them)."""
    return {
        "type": "model",
        "id": model_id,
        "display_name": name,
        "created_at": created,
        "lifecycle": lifecycle,
        "deprecated_at": deprecated_at,
        "retires_at": retires_at,
        "line": line,
        "max_input_tokens": window,
        "max_tokens": max_tokens,
        "capabilities": {
            "batch": _support(True),
            "citations": _support(True),
            "code_execution": _support(True),
            "compaction": {"supported": compaction, "summarize": _support(compaction)},
            "context_management": {
                "supported": True,
                "compact_20260112": _support(compaction),
            },
            "effort": {
                "supported": bool(effort),
                **{level: _support(level in effort) for level in EFFORT_LEVELS},
            },
            "image_input": _support(True),
            "pdf_input": _support(True),
            "server_tools": {
                "supported": True,
                "code_execution": _support(True),
                "web_search": _support(True),
            },
            "structured_outputs": _support(True),
            "thinking": {
                "supported": bool(thinking),
                "types": {
                    kind: _support(kind in thinking)
                    for kind in ("adaptive", "between_tools", "disabled", "enabled")
                },
            },
        },
    }


# December 2026, as the product owner's brief lists them; Sonnet 4.5 retired, Opus 4.8
# deprecated (a date to warn about), Sonnet 4.6 an older model that still takes manual
# thinking budgets and has no xhigh/max effort.
CATALOG: tuple[dict[str, Any], ...] = (
    model_info("claude-sonnet-5-5", "Claude Sonnet 5.5", line="sonnet"),
    model_info("claude-opus-5-5", "Claude Opus 5.5", line="opus"),
    model_info("claude-haiku-5-5", "Claude Haiku 5.5", max_tokens=64_000, line="haiku"),
    model_info("claude-sonnet-5", "Claude Sonnet 5", created="2026-05-01T00:00:00Z"),
    model_info(
        "claude-opus-4-8",
        "Claude Opus 4.8",
        created="2026-03-01T00:00:00Z",
        lifecycle="deprecated",
        deprecated_at="2026-11-01T00:00:00Z",
        retires_at="2027-05-01T00:00:00Z",
        thinking=("adaptive", "disabled", "enabled"),
    ),
    model_info(
        "claude-sonnet-4-6",
        "Claude Sonnet 4.6",
        created="2026-02-01T00:00:00Z",
        max_tokens=64_000,
        thinking=("adaptive", "disabled", "enabled"),
        effort=("low", "medium", "high"),
        # An older model: no compaction request (ruizn writes its own summary).
        compaction=False,
    ),
    model_info(
        "claude-sonnet-4-5",
        "Claude Sonnet 4.5",
        created="2025-09-29T00:00:00Z",
        lifecycle="retired",
        deprecated_at="2026-02-01T00:00:00Z",
        retires_at="2026-05-01T00:00:00Z",
        window=200_000,
        max_tokens=64_000,
        thinking=("disabled", "enabled"),
        effort=(),
    ),
)

# The models that refuse non-default sampling parameters (Claude 5).
_NO_SAMPLING = frozenset(
    {"claude-sonnet-5-5", "claude-opus-5-5", "claude-haiku-5-5", "claude-sonnet-5"}
)
_SAMPLING_DEFAULTS = {"temperature": 1.0, "top_p": None, "top_k": None}


def listing(catalog: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """GET /v1/models: one page with everything (has_more false)."""
    return {
        "data": list(catalog),
        "has_more": False,
        "first_id": catalog[0]["id"] if catalog else None,
        "last_id": catalog[-1]["id"] if catalog else None,
    }


def find(catalog: tuple[dict[str, Any], ...], model_id: str) -> dict[str, Any] | None:
    return next((m for m in catalog if m["id"] == model_id), None)


def refusal(
    catalog: tuple[dict[str, Any], ...], body: dict[str, Any]
) -> tuple[int, str, str] | None:
    """(status, error type, message) the real API would answer this body with, or None."""
    model = body.get("model")
    info = find(catalog, model) if isinstance(model, str) else None
    if info is None:
        return None
    if info["lifecycle"] == "retired":
        return 404, "not_found_error", f"model: {model}"
    caps = info["capabilities"]
    thinking = body.get("thinking")
    if isinstance(thinking, dict):
        kind = thinking.get("type")
        types = caps["thinking"]["types"]
        if kind not in types or not types[kind]["supported"]:
            return (
                400,
                "invalid_request_error",
                f"thinking.type: {kind!r} is not supported by {model}",
            )
        if kind == "adaptive" and thinking.get("display") not in (None, "summarized", "omitted"):
            return 400, "invalid_request_error", "thinking.display: must be summarized or omitted"
    effort = (body.get("output_config") or {}).get("effort")
    if effort is not None and not caps["effort"].get(effort, {}).get("supported", False):
        return (
            400,
            "invalid_request_error",
            f"output_config.effort: {effort!r} is not supported by {model}",
        )
    if model in _NO_SAMPLING:
        for key, default in _SAMPLING_DEFAULTS.items():
            if key in body and body[key] != default:
                return 400, "invalid_request_error", f"{key}: not supported on {model}"
    return None
