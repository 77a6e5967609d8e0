"""Output schemas are data: jsonschema checks them, and no schema can fetch, recurse for
ever or backtrack.

A run's `output_schema` comes from the person (`--output-schema`, `output_type`) or from a
log being read (`runs`, `show`, `replay`, `view`, `export` replay the log, and the reducer
checks each logged verdict by making it again). Either way it is only data:

- references resolve only inside the schema (and jsonschema's own meta-schemas): the
  registry retrieves nothing, so a remote `$ref` is an unresolvable reference, never a
  request;
- a reference cycle that consumes no input ends as an error (Python's recursion bound),
  never a traceback;
- `pattern` and `patternProperties` (and `additionalProperties`, which reads them) match
  with RE2, which cannot backtrack: a pattern's time is linear in the text. A pattern RE2
  does not know (backreferences, look-around) does not match. `unevaluatedProperties`
  beside `patternProperties` would match with Python's `re`, so that pair is refused.

`schema_error` is what a check of an answer says; `schema_problem` is why a person's schema
is refused before any request.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Any

__all__ = ["iter_schemas", "remote_refs", "schema_error", "schema_problem_of"]

REF_KEYS = ("$ref", "$dynamicRef", "$recursiveRef")
# Answers a person's schema is tried on before any request: a reference cycle that
# consumes no input loops on every one of them.
PROBES: tuple[Any, ...] = (None, True, 0, "", [], {})


def iter_schemas(schema: Any) -> Iterator[Mapping[str, Any]]:
    """Every object in the schema, itself included (depth bounded by the callers)."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def remote_refs(schema: Any) -> list[str]:
    """The references that name a document outside the schema (a scheme or `//host`)."""
    found = []
    for node in iter_schemas(schema):
        for key in REF_KEYS:
            ref = node.get(key)
            if isinstance(ref, str) and _remote(ref):
                found.append(ref)
    return found


def _remote(ref: str) -> bool:
    head = ref.split("#", 1)[0]
    if not head:
        return False
    scheme = head.split(":", 1)[0]
    return head.startswith("//") or (":" in head and scheme.isalnum())


def _unsupported(schema: Any) -> str | None:
    nodes = list(iter_schemas(schema))
    if any("unevaluatedProperties" in n for n in nodes) and any(
        "patternProperties" in n for n in nodes
    ):
        return "patternProperties beside unevaluatedProperties is not supported"
    return None


def schema_error(schema: Mapping[str, Any], value: Any) -> str | None:
    """Why `value` does not match `schema` (jsonschema's best match), or None. A schema
    that cannot be checked (a reference it cannot resolve, a cycle) is an error too."""
    from jsonschema import exceptions
    from referencing.exceptions import Unresolvable

    unsupported = _unsupported(schema)
    if unsupported is not None:
        return f"the schema cannot be checked: {unsupported}"
    try:
        best = exceptions.best_match(_validator(schema).iter_errors(value))
    except Unresolvable as exc:
        return f"the schema cannot be checked: unresolvable reference {_ref_of(exc)!r}"
    except RecursionError:
        return "the schema cannot be checked: it refers to itself without end"
    if best is None:
        return None
    where = best.json_path
    return best.message if where == "$" else f"{best.message} (at {where})"


def schema_problem_of(schema: Mapping[str, Any]) -> str | None:
    """Why a person's (already well-formed) schema cannot be used, or None: a remote
    reference, an unsupported pair, a pattern RE2 cannot compile, a reference it cannot
    resolve or a cycle (tried on a few answers)."""
    remote = remote_refs(schema)
    if remote:
        return f"the reference {remote[0]!r} is remote: ruizn fetches no schema"
    unsupported = _unsupported(schema)
    if unsupported is not None:
        return unsupported
    for node in iter_schemas(schema):
        patterns = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        props = node.get("patternProperties")
        if isinstance(props, Mapping):
            patterns.extend(p for p in props if isinstance(p, str))
        for pattern in patterns:
            if _compiled(pattern) is None:
                return (
                    f"the pattern {pattern!r} is not RE2 syntax (no backreferences or look-around)"
                )
    for probe in PROBES:
        error = schema_error(schema, probe)
        if error is not None and error.startswith("the schema cannot be checked: "):
            return error.removeprefix("the schema cannot be checked: ")
    return None


def _ref_of(exc: Exception) -> str:
    return str(getattr(exc, "ref", "") or exc)[:200]


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    """The RE2 regex of a JSON Schema pattern (ECMA-262 in the spec; RE2 covers the safe
    part of it), or None when RE2 refuses it."""
    import re2

    options = re2.Options()
    options.log_errors = False  # RE2 would print parse errors on stderr
    try:
        return re2.compile(pattern, options)
    except (re2.error, TypeError, ValueError):
        return None


def _search(pattern: str, text: str) -> bool:
    regex = _compiled(pattern)
    return regex is not None and regex.search(text) is not None


def _pattern(validator: Any, pattern: Any, instance: Any, _schema: Any) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not _search(str(pattern), instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, props: Any, instance: Any, _schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in props.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[Any]:
    """jsonschema's own keyword, given the names `patternProperties` matches (by RE2) as
    plain properties, so that it runs no pattern itself."""
    from jsonschema import _keywords
    from jsonschema.exceptions import ValidationError

    original: Any = _keywords.additionalProperties

    patterns = schema.get("patternProperties")
    if not (isinstance(patterns, Mapping) and validator.is_type(instance, "object")):
        yield from original(validator, extra, instance, schema)
        return
    named = schema.get("properties", {})
    matched = {k for k in instance if k not in named and any(_search(p, k) for p in patterns)}
    plain = {k: v for k, v in schema.items() if k != "patternProperties"}
    plain["properties"] = {**named, **dict.fromkeys(matched, True)}
    if validator.is_type(extra, "object") or extra:
        yield from original(validator, extra, instance, plain)
        return
    extras = sorted(k for k in instance if k not in plain["properties"])
    if extras:
        verb = "does" if len(extras) == 1 else "do"
        joined = ", ".join(repr(each) for each in extras)
        listed = ", ".join(repr(each) for each in sorted(patterns))
        yield ValidationError(f"{joined} {verb} not match any of the regexes: {listed}")


@lru_cache(maxsize=8)
def _registry() -> Any:
    """A registry that retrieves nothing (referencing's default: every retrieval fails with
    NoSuchResource), so a reference outside the schema does not resolve. Passing any
    registry also turns off jsonschema's own deprecated fetching of remote references."""
    from referencing import Registry

    return Registry()


def _validator(schema: Mapping[str, Any]) -> Any:
    from jsonschema import Draft202012Validator, validators

    base = validators.validator_for(schema, default=Draft202012Validator)
    safe = _safe_class(base)
    return safe(schema, registry=_registry())


@lru_cache(maxsize=16)
def _safe_class(base: Any) -> Any:
    from jsonschema import validators

    return validators.extend(  # type: ignore[no-untyped-call]
        base,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
    )
