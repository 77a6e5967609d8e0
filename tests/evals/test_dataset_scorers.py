"""Datasets as pydantic-evals' users write them, and the pure scorers' verdicts. In-process,
no run: the laws a dataset author relies on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ruizn.evals.dataset import DatasetError, load_dataset, parse_dataset
from ruizn.evals.report import EvalReport, Trial, compare, pass_at_k, pass_hat_k, table
from ruizn.evals.scorers import Call, Facts, score, spec_of

DATA = Path(__file__).parent / "data"


def facts(**given: Any) -> Facts:
    base: dict[str, Any] = {
        "goal": "g",
        "output": "Hello World",
        "expected_output": None,
        "status": "success",
        "error": None,
        "steps": 2,
        "cost": 0.01,
        "elapsed": 1.5,
    }
    return Facts(**{**base, **given})


@pytest.mark.parametrize("name", ["my_tests.yaml", "my_tests.json"])
def test_a_dataset_written_by_pydantic_evals_reads_as_it_means(name: str) -> None:
    # Both files were written by pydantic-evals 2.62.0's Dataset.to_file, from its docs'
    # example (docs/evals/how-to/dataset-serialization) with a case-level evaluator more.
    dataset = load_dataset(DATA / name)
    assert dataset.name == "my_tests"
    first, second = dataset.cases
    assert (first.name, first.goal, first.expected_output) == ("test_1", "hello", "HELLO")
    assert first.metadata == {"difficulty": "easy"}
    kinds = [(s.kind, dict(s.args)) for s in second.scorers]
    assert kinds == [
        ("IsInstance", {"type_name": "str"}),
        ("EqualsExpected", {}),
        ("MaxDuration", {"seconds": 5}),
        (
            "LLMJudge",
            {
                "rubric": "Response is factually accurate based on the input",
                "include_input": True,
            },
        ),
        ("Contains", {"value": "polite", "case_sensitive": False}),
        ("Equals", {"value": "x"}),
    ]


def test_a_ruizn_case_has_a_fixture_and_settings_in_its_metadata(tmp_path: Path) -> None:
    (tmp_path / "fx").mkdir()
    data = {
        "cases": [
            {
                "inputs": {"goal": "fix it"},
                "metadata": {"ruizn": {"fixture": "fx", "max_steps": 3}, "owner": "me"},
            }
        ]
    }
    (case,) = parse_dataset(data, base=tmp_path).cases
    assert case.goal == "fix it"
    assert case.fixture == (tmp_path / "fx").resolve()
    assert case.options == {"max_steps": 3}
    assert case.name == "case-1"


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"cases": [{"inputs": "a", "bogus": 1}]}, ["cases/0", "bogus"]),
        ({"cases": [{"inputs": "a", "evaluators": ["Nope"]}]}, ["unknown evaluator 'Nope'"]),
        ({"cases": [{"inputs": "a", "evaluators": [{"Regex": "("}]}]}, ["bad pattern"]),
        ({"cases": [{"inputs": "a", "evaluators": [{"Contains": {"valu": 1}}]}]}, ["valu"]),
        ({"cases": [{"inputs": 3}]}, ["goal"]),
        ({"cases": [{"inputs": "a", "metadata": {"ruizn": {"max_stepz": 1}}}]}, ["max_stepz"]),
        ({"cases": [{"inputs": "a", "metadata": {"ruizn": {"fixture": "nowhere"}}}]}, ["fixture"]),
        ({"cases": [{"name": "x", "inputs": "a"}, {"name": "x", "inputs": "b"}]}, ["two cases"]),
        ({"cases": []}, ["no cases"]),
    ],
)
def test_a_bad_dataset_is_refused_naming_the_problem(
    tmp_path: Path, data: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(DatasetError) as raised:
        parse_dataset(data, base=tmp_path)
    for word in words:
        assert word in str(raised.value)


def test_a_bad_file_is_one_error(tmp_path: Path) -> None:
    bad = tmp_path / "d.yaml"
    bad.write_text("cases: [\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="not valid YAML"):
        load_dataset(bad)
    with pytest.raises(DatasetError, match="cannot read"):
        load_dataset(tmp_path / "none.json")


@pytest.mark.parametrize(
    ("item", "given", "passed"),
    [
        ("EqualsExpected", {"expected_output": "Hello World"}, True),
        ("EqualsExpected", {"expected_output": "Bye"}, False),
        ({"Equals": "Hello World"}, {}, True),
        ({"Contains": "World"}, {}, True),
        ({"Contains": "world"}, {}, False),
        ({"Contains": {"value": "world", "case_sensitive": False}}, {}, True),
        ({"Contains": {"value": {"a": 1}}}, {"output": {"a": 1, "b": 2}}, True),
        ({"IsInstance": "str"}, {}, True),
        ({"IsInstance": "dict"}, {}, False),
        ({"Regex": r"^Hello \w+$"}, {}, True),
        ({"Regex": r"^Bye"}, {}, False),
        (
            {"JsonSchema": {"schema": {"type": "object", "required": ["n"]}}},
            {"output": '{"n": 1}'},
            True,
        ),
        (
            {"JsonSchema": {"schema": {"type": "object", "required": ["n"]}}},
            {"output": "{}"},
            False,
        ),
        ({"JsonSchema": {"schema": {"type": "object"}}}, {"output": "not json"}, False),
        ({"MaxSteps": 2}, {}, True),
        ({"MaxSteps": 1}, {}, False),
        ({"MaxCost": 0.02}, {}, True),
        ({"MaxCost": 0.001}, {}, False),
        ({"MaxCost": 1}, {"cost": None}, False),
        ({"MaxDuration": 1}, {}, False),
        ({"CalledTool": "grep"}, {"calls": (Call(name="grep", input={"q": "x"}),)}, True),
        (
            {"CalledTool": {"tool": "grep", "arguments": {"q": "y"}}},
            {"calls": (Call(name="grep", input={"q": "x"}),)},
            False,
        ),
        (
            {"NeverRan": r"rm\s+-rf"},
            {"calls": (Call(name="shell", input={"command": "rm -rf /"}),)},
            False,
        ),
        ({"NeverRan": r"rm\s+-rf"}, {"calls": (Call(name="shell", input={"c": "ls"}),)}, True),
    ],
)
def test_each_pure_scorer(item: Any, given: dict[str, Any], passed: bool, tmp_path: Path) -> None:
    verdict = score(spec_of(item), facts(**given))
    assert verdict is not None
    assert verdict.passed is passed
    assert verdict.score == (1.0 if passed else 0.0)
    assert (verdict.reason is None) is passed  # a failed verdict says why


def test_equals_expected_does_not_apply_without_an_expected_output(tmp_path: Path) -> None:
    assert score(spec_of("EqualsExpected"), facts()) is None


def test_files_equal_compares_digests(tmp_path: Path) -> None:
    spec = spec_of({"FilesEqual": "want"})
    folder = "want"
    want = {folder: {"a.txt": "1", "b/c.txt": "2"}}
    same = facts(files={"a.txt": "1", "b/c.txt": "2", "extra": "3"}, expected_files=want)
    changed = facts(files={"a.txt": "1", "b/c.txt": "9"}, expected_files=want)
    assert score(spec, same) == score(spec, same)  # pure: the same facts, the same verdict
    assert score(spec, same).passed  # type: ignore[union-attr]
    verdict = score(spec, changed)
    assert verdict is not None
    assert not verdict.passed
    assert verdict.reason == "b/c.txt differs"


def test_pass_at_k_and_pass_hat_k() -> None:
    assert pass_at_k(3, 0, 3) == 0.0
    assert pass_at_k(3, 1, 3) == 1.0
    assert pass_hat_k(3, 2, 3) == 0.0
    assert pass_hat_k(3, 3, 3) == 1.0
    assert pass_at_k(4, 2, 1) == pytest.approx(0.5)
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)


def _report(outcomes: dict[str, list[str]], cost: float = 0.01) -> EvalReport:
    trials = tuple(
        Trial(case=case, epoch=i + 1, outcome=o, cost=cost, elapsed=1.0)  # type: ignore[arg-type]
        for case, listed in outcomes.items()
        for i, o in enumerate(listed)
    )
    return EvalReport(dataset="d", eval_id="e", epochs=2, trials=trials)


def test_the_table_fits_80_columns_and_says_what_failed() -> None:
    report = _report({"a" * 70: ["passed", "failed"], "b": ["not_run", "diverged"]})
    lines = table(report, width=80)
    assert all(len(line) <= 80 for line in lines)
    assert "pass@2" in "\n".join(lines)
    assert "1/4 passed (25%, needed 100%): FAILED" in lines[-1]
    assert not report.ok
    assert report.with_min_pass(0.25).ok


def test_compare_names_the_cases_that_moved() -> None:
    a = _report({"x": ["passed", "passed"], "y": ["failed", "failed"], "z": ["passed"] * 2})
    b = _report({"x": ["passed", "failed"], "y": ["passed", "passed"], "w": ["passed"] * 2}, 0.02)
    moved = compare(a, b)
    assert moved.better == (("y", "0/2", "2/2"),)
    assert moved.worse == (("x", "2/2", "1/2"),)
    assert (moved.only_a, moved.only_b) == (("z",), ("w",))
    assert "cost: $0.0600 -> $0.1200 (+0.0600)" in moved.lines()


def test_a_report_round_trips_through_json() -> None:
    from ruizn.evals.report import report_from_json, report_to_json

    report = _report({"x": ["passed", "failed"]})
    again = report_from_json(json.loads(json.dumps(report_to_json(report))))
    assert again == report


def test_the_docs_example_dataset_reads_as_the_docs_say(tmp_path: Path) -> None:
    import re

    import yaml

    docs = (Path(__file__).parents[2] / "docs" / "eval.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"^```yaml\n(.*?)^```$", docs, re.MULTILINE | re.DOTALL)
    (tmp_path / "fixtures" / "rename").mkdir(parents=True)
    (tmp_path / "expected" / "rename").mkdir(parents=True)
    dataset = parse_dataset(yaml.safe_load(block), base=tmp_path)
    hello, polite, refactor = dataset.cases
    assert [s.kind for s in hello.scorers] == ["EqualsExpected", "MaxSteps"]
    assert polite.scorers[-1].args == {"rubric": "The answer is polite."}
    assert refactor.fixture == (tmp_path / "fixtures" / "rename").resolve()
    assert refactor.options == {"approval": "always", "max_steps": 8}
    assert [s.kind for s in refactor.scorers][2:] == ["FilesEqual", "CalledTool", "NeverRan"]
    never = refactor.scorers[-1]
    calls = (Call(name="shell", input={"command": "rm  -rf build"}),)
    verdict = score(never, facts(calls=calls))
    assert verdict is not None
    assert not verdict.passed
