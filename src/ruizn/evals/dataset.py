"""A dataset of cases, in pydantic-evals' file format (YAML or JSON), read into frozen records.

    name: refactors
    cases:
    - name: rename
      inputs: Rename foo to bar in main.py
      expected_output: done
      metadata:
        ruizn: {fixture: fixtures/rename, max_steps: 8}
      evaluators:
      - Contains: done
    evaluators:
    - MaxSteps: 10

A case's `inputs` is its goal (a string, or a mapping with a `goal`); `metadata.ruizn` holds
what only ruizn reads: `fixture` (a folder copied fresh as the case's workspace, relative to
the dataset) and any run setting (`max_steps`, `system`, `model`...). An evaluator is written
as pydantic-evals writes it: `Name`, `Name: argument` or `Name: {keyword: value}`. The file
is checked against `DATASET_SCHEMA` with jsonschema before anything is read from it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
from attrs import evolve, field, frozen

from ruizn.evals.scorers import EVALUATORS, ScorerSpec, spec_of
from ruizn.settings import SETTINGS_FIELDS

__all__ = ["DATASET_SCHEMA", "Case", "Dataset", "DatasetError", "load_dataset", "parse_dataset"]


class DatasetError(ValueError):
    """A dataset that cannot be read: the file, its shape, an evaluator or a setting."""


_EVALUATOR = {
    "anyOf": [
        {"type": "string"},
        {"type": "object", "minProperties": 1, "maxProperties": 1},
    ]
}
DATASET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "$schema": {"type": "string"},
        "name": {"type": ["string", "null"]},
        "cases": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": ["string", "null"]},
                    "inputs": {},
                    "expected_output": {},
                    "metadata": {"type": ["object", "null"]},
                    "evaluators": {"type": "array", "items": _EVALUATOR},
                },
                "required": ["inputs"],
                "additionalProperties": False,
            },
        },
        "evaluators": {"type": "array", "items": _EVALUATOR},
        "report_evaluators": {"type": "array"},
    },
    "required": ["cases"],
    "additionalProperties": False,
}
# Keys of `metadata.ruizn` that are not run settings.
_CASE_KEYS = ("fixture",)


@frozen(kw_only=True)
class Case:
    name: str
    goal: str
    inputs: Any  # as written (a string, or a mapping holding `goal`)
    expected_output: Any = None
    metadata: Mapping[str, Any] = field(factory=dict)
    fixture: Path | None = None  # absolute; None: an empty workspace
    options: Mapping[str, Any] = field(factory=dict)  # run settings for Agent
    scorers: tuple[ScorerSpec, ...] = ()  # the dataset's, then the case's own


@frozen(kw_only=True)
class Dataset:
    name: str
    path: Path | None
    cases: tuple[Case, ...]

    def case(self, name: str) -> Case | None:
        return next((case for case in self.cases if case.name == name), None)


def load_dataset(path: str | Path) -> Dataset:
    """The dataset in `path` (.yaml, .yml or .json). Raises DatasetError."""
    where = Path(path)
    try:
        text = where.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot read dataset {where}: {exc.strerror or exc}") from None
    data = _parsed(text, where)
    return parse_dataset(data, base=where.resolve().parent, name=where.stem, path=where)


def _parsed(text: str, where: Path) -> Any:
    if where.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise DatasetError(f"dataset {where} is not valid JSON: {exc}") from None
    try:
        import yaml  # the `eval` extra (PyYAML); a JSON dataset needs nothing more
    except ImportError:
        raise DatasetError(
            f"dataset {where}: reading YAML needs PyYAML: pip install 'ruizn[eval]'"
            " (or write the dataset as .json)"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DatasetError(f"dataset {where} is not valid YAML: {exc}") from None


def parse_dataset(
    data: Any, *, base: Path, name: str = "dataset", path: Path | None = None
) -> Dataset:
    """A dataset from its parsed form; paths in it are relative to `base`."""
    problem = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(DATASET_SCHEMA).iter_errors(data)
    )
    if problem is not None:
        place = "/".join(str(part) for part in problem.absolute_path) or "the top"
        raise DatasetError(f"dataset {path or name}: at {place}: {problem.message}")
    shared = tuple(_specs(data.get("evaluators") or (), base, "evaluators"))
    cases: list[Case] = []
    seen: set[str] = set()
    for index, raw in enumerate(data["cases"]):
        case = _case(raw, index, base, shared)
        if case.name in seen:
            raise DatasetError(f"dataset {path or name}: two cases are named {case.name!r}")
        seen.add(case.name)
        cases.append(case)
    if not cases:
        raise DatasetError(f"dataset {path or name} has no cases")
    return Dataset(name=data.get("name") or name, path=path, cases=tuple(cases))


def _case(raw: Mapping[str, Any], index: int, base: Path, shared: tuple[ScorerSpec, ...]) -> Case:
    name = raw.get("name") or f"case-{index + 1}"
    where = f"case {name!r}"
    inputs = raw["inputs"]
    goal = inputs.get("goal") if isinstance(inputs, Mapping) else inputs
    if not isinstance(goal, str) or not goal.strip():
        raise DatasetError(f"{where}: inputs must be the goal (a string, or a mapping with goal)")
    metadata = raw.get("metadata") or {}
    ours = metadata.get("ruizn") or {}
    if not isinstance(ours, Mapping):
        raise DatasetError(f"{where}: metadata.ruizn must be a mapping")
    unknown = sorted(set(ours) - set(SETTINGS_FIELDS) - set(_CASE_KEYS))
    if unknown:
        raise DatasetError(f"{where}: metadata.ruizn has an unknown setting {unknown[0]!r}")
    fixture = None
    if ours.get("fixture") is not None:
        fixture = (base / str(ours["fixture"])).resolve()
        if not fixture.is_dir():
            raise DatasetError(f"{where}: the fixture {fixture} is not a folder")
    options = {key: value for key, value in ours.items() if key not in _CASE_KEYS}
    own = tuple(_specs(raw.get("evaluators") or (), base, f"{where} evaluators"))
    return Case(
        name=str(name),
        goal=goal,
        inputs=inputs,
        expected_output=raw.get("expected_output"),
        metadata=dict(metadata),
        fixture=fixture,
        options=options,
        scorers=(*shared, *own),
    )


def _specs(raw: Any, base: Path, where: str) -> list[ScorerSpec]:
    found = []
    for item in raw:
        try:
            spec = spec_of(item)
        except ValueError as exc:
            raise DatasetError(f"{where}: {exc} (known: {', '.join(sorted(EVALUATORS))})") from None
        if spec.kind == "FilesEqual":  # relative to the dataset, as a fixture is
            folder = str((base / str(spec.args["expected"])).resolve())
            spec = evolve(spec, args={**spec.args, "expected": folder})
        found.append(spec)
    return found
