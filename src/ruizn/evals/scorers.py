"""Scorers: what a dataset's `evaluators` name, and the pure ones' verdicts.

A scorer is written as pydantic-evals writes an evaluator (`Name`, `Name: argument`, or
`Name: {keyword: value}`); the argument alone is the first field. pydantic-evals' built-ins
`EqualsExpected`, `Equals`, `Contains`, `IsInstance`, `MaxDuration` and `LLMJudge` mean what
they mean there; ruizn adds `Regex`, `JsonSchema`, `Function`, `CalledTool`, `NeverRan`,
`FilesEqual`, `MaxSteps` and `MaxCost`.

Scoring is a pure function of `Facts`: what a run's log says (its output, status, steps,
cost, time, tool calls) and digests of the files in its workspace afterwards, so a saved run
is scored again with no model call (`ruizn eval --rescore`). `Function` (the user's code) and
`LLMJudge` (a model call) are not pure: the eval's runner does them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema
from attrs import field, frozen

__all__ = [
    "EVALUATORS",
    "IMPURE",
    "Call",
    "Facts",
    "ScorerSpec",
    "Verdict",
    "score",
    "spec_of",
]

# Each evaluator: its fields, the first being the one a bare argument gives, and how many of
# the first ones are required.
EVALUATORS: dict[str, tuple[tuple[str, ...], int]] = {
    "EqualsExpected": ((), 0),
    "Equals": (("value",), 1),
    "Contains": (("value", "case_sensitive", "as_strings"), 1),
    "IsInstance": (("type_name",), 1),
    "MaxDuration": (("seconds",), 1),
    "LLMJudge": (
        (
            "rubric",
            "model",
            "include_input",
            "include_expected_output",
            "model_settings",
            "score",
            "assertion",
        ),
        1,
    ),
    "Regex": (("pattern",), 1),
    "JsonSchema": (("schema",), 1),
    "Function": (("function",), 1),
    "CalledTool": (("tool", "arguments"), 1),
    "NeverRan": (("pattern",), 1),
    "FilesEqual": (("expected",), 1),
    "MaxSteps": (("steps",), 1),
    "MaxCost": (("usd",), 1),
}
IMPURE = frozenset({"Function", "LLMJudge"})


@frozen(kw_only=True)
class ScorerSpec:
    kind: str
    args: Mapping[str, Any] = field(factory=dict)
    label: str = ""  # as the report names it

    @property
    def name(self) -> str:
        return self.label or self.kind


@frozen(kw_only=True)
class Verdict:
    scorer: str
    passed: bool
    score: float
    reason: str | None = None


@frozen(kw_only=True)
class Call:
    name: str
    input: Mapping[str, Any]


@frozen(kw_only=True)
class Facts:
    """What a run came to, as scorers see it."""

    goal: str
    output: Any
    expected_output: Any
    status: str
    error: str | None
    steps: int
    cost: float | None
    elapsed: float
    calls: tuple[Call, ...] = ()
    files: Mapping[str, str] = field(factory=dict)  # workspace afterwards: path -> sha256
    # FilesEqual's expected folders, as the runner read them: folder -> (path -> sha256)
    expected_files: Mapping[str, Mapping[str, str]] = field(factory=dict)


def spec_of(item: Any) -> ScorerSpec:
    """A scorer from its written form (a path it names as written: the dataset makes it
    absolute). Raises ValueError."""
    if isinstance(item, str):
        kind, given = item, None
    else:
        ((kind, given),) = item.items()
    if kind not in EVALUATORS:
        raise ValueError(f"unknown evaluator {kind!r}")
    names, required = EVALUATORS[kind]
    if isinstance(given, Mapping):
        args = dict(given)
    elif given is None:
        args = {}
    elif names:
        args = {names[0]: given}
    else:
        raise ValueError(f"{kind} takes no argument")
    label = args.pop("evaluation_name", None)
    unknown = sorted(set(args) - set(names))
    if unknown:
        raise ValueError(f"{kind} has no field {unknown[0]!r}")
    missing = [name for name in names[:required] if name not in args]
    if missing:
        raise ValueError(f"{kind} needs {missing[0]!r}")
    _check(kind, args)
    return ScorerSpec(kind=kind, args=args, label=str(label) if label else "")


def _check(kind: str, args: Mapping[str, Any]) -> None:
    if kind in ("Regex", "NeverRan"):
        try:
            re.compile(str(args["pattern"]))
        except re.error as exc:
            raise ValueError(f"{kind}: bad pattern {args['pattern']!r}: {exc}") from None
    if kind == "JsonSchema":
        try:
            jsonschema.validators.validator_for(args["schema"]).check_schema(args["schema"])
        except jsonschema.SchemaError as exc:
            raise ValueError(f"JsonSchema: not a JSON Schema: {exc.message}") from None
    if kind in ("MaxDuration", "MaxSteps", "MaxCost"):
        value = next(iter(args.values()))
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ValueError(f"{kind} needs a number >= 0")
    if kind == "Function" and ":" not in str(args["function"]):
        raise ValueError("Function needs MODULE:NAME")


def score(spec: ScorerSpec, facts: Facts) -> Verdict | None:
    """The verdict of a pure scorer on `facts`; None: it does not apply (EqualsExpected on a
    case with no expected output, as in pydantic-evals)."""
    passed, reason = _judge(spec.kind, spec.args, facts)
    if passed is None:
        return None
    return Verdict(scorer=spec.name, passed=passed, score=1.0 if passed else 0.0, reason=reason)


def _judge(kind: str, args: Mapping[str, Any], facts: Facts) -> tuple[bool | None, str | None]:
    out = facts.output
    match kind:
        case "EqualsExpected":
            if facts.expected_output is None:
                return None, None
            return _said(out == facts.expected_output, f"output {_short(out)}")
        case "Equals":
            return _said(out == args["value"], f"output {_short(out)}")
        case "Contains":
            return _contains(out, args)
        case "IsInstance":
            names = {cls.__name__ for cls in type(out).__mro__}
            return _said(args["type_name"] in names, f"output is {type(out).__name__}")
        case "MaxDuration":
            return _said(facts.elapsed <= args["seconds"], f"{facts.elapsed:.2f} s")
        case "MaxSteps":
            return _said(facts.steps <= args["steps"], f"{facts.steps} steps")
        case "MaxCost":
            if facts.cost is None:
                return False, "the cost is unknown"
            return _said(facts.cost <= args["usd"], f"${facts.cost:.4f}")
        case "Regex":
            found = re.search(str(args["pattern"]), _text(out))
            return _said(found is not None, f"output {_short(out)}")
        case "JsonSchema":
            return _schema(out, args["schema"])
        case "CalledTool":
            return _called(facts.calls, str(args["tool"]), args.get("arguments"))
        case "NeverRan":
            return _never(facts.calls, str(args["pattern"]))
        case "FilesEqual":
            return _files(facts.files, facts.expected_files.get(str(args["expected"]), {}))
    raise ValueError(f"{kind} is not a pure scorer")


def _said(passed: bool, reason: str) -> tuple[bool, str | None]:
    return passed, None if passed else reason


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _contains(out: Any, args: Mapping[str, Any]) -> tuple[bool, str | None]:
    value = args["value"]
    if args.get("as_strings"):
        out, value = str(out), str(value)
    if isinstance(out, str) and isinstance(value, str):
        if not args.get("case_sensitive", True):
            out, value = out.lower(), value.lower()
        return _said(value in out, f"{value!r} not in output {_short(out)}")
    if isinstance(out, Mapping):
        if isinstance(value, Mapping):
            ok = all(key in out and out[key] == item for key, item in value.items())
        else:
            ok = value in out
        return _said(ok, f"{_short(value)} not in output {_short(out)}")
    if isinstance(out, Sequence) and not isinstance(out, str):
        return _said(value in out, f"{_short(value)} not in output {_short(out)}")
    return False, f"cannot look for {_short(value)} in {type(out).__name__}"


def _schema(out: Any, schema: Mapping[str, Any]) -> tuple[bool, str | None]:
    value = out
    if isinstance(out, str):
        try:
            value = json.loads(out)
        except ValueError:
            return False, "the output is not JSON"
    problem = jsonschema.exceptions.best_match(
        jsonschema.validators.validator_for(schema)(schema).iter_errors(value)
    )
    return (True, None) if problem is None else (False, problem.message)


def _called(
    calls: tuple[Call, ...], tool: str, arguments: Mapping[str, Any] | None
) -> tuple[bool, str | None]:
    named = [call for call in calls if call.name == tool]
    if not named:
        return False, f"{tool} was never called"
    if not arguments:
        return True, None
    for call in named:
        if all(key in call.input and call.input[key] == v for key, v in arguments.items()):
            return True, None
    return False, f"{tool} was never called with {_short(dict(arguments))}"


def _never(calls: tuple[Call, ...], pattern: str) -> tuple[bool, str | None]:
    """No string argument of any tool call matches `pattern` (a shell command, a path)."""
    compiled = re.compile(pattern)
    for call in calls:
        for value in _strings(call.input):
            if compiled.search(value):
                return False, f"{call.name} ran {_short(value)}"
    return True, None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [text for item in value.values() for text in _strings(item)]
    if isinstance(value, list | tuple):
        return [text for item in value for text in _strings(item)]
    return []


def _files(files: Mapping[str, str], expected: Mapping[str, str]) -> tuple[bool, str | None]:
    """Every expected file is in the workspace with the same bytes."""
    if not expected:
        return False, "the expected folder holds no file"
    for path, digest in sorted(expected.items()):
        if path not in files:
            return False, f"{path} is missing"
        if files[path] != digest:
            return False, f"{path} differs"
    return True, None
