"""`ruizn.eval` end to end, in-process, against the local Messages API (the real SDK): a
dataset run over epochs at once, scored (a failing case, a rubric, a function, files), a
budget spent part-way, the same eval re-driven offline from its recordings (then after a
tool change), and saved runs re-scored with no model call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import junitparser
import pytest

import ruizn
from ruizn.evals.api import load_report
from ruizn.evals.report import to_junit
from tests.cli.conftest import API_KEY
from tests.fakeapi import Reply, Stream, Text, ToolUse


def _first_text(body: dict[str, Any]) -> str:
    content = body["messages"][0]["content"]
    return str(content if isinstance(content, str) else content[0]["text"])


def _last_result(body: dict[str, Any]) -> str:
    last = body["messages"][-1]["content"]
    found = next(b for b in last if b.get("type") == "tool_result")
    content = found["content"]
    return str(content if isinstance(content, str) else content[0]["text"])


def model(body: dict[str, Any], index: int) -> Reply:
    """Stateless, so runs at once each get the reply their own history calls for."""
    goal = _first_text(body)
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if goal.startswith("Rubric:"):  # an LLMJudge's question
        polite = "please" in goal.split("The agent's output:")[1]
        return Stream((Text("PASS\nIt asks nicely." if polite else "FAIL\nIt is curt."),))
    if goal.startswith(("write ", "shout ")):
        word = goal.split()[1]
        if turns == 0:
            call = (
                ToolUse("toolu_w1", "write_file", {"path": "out.txt", "content": word + "\n"})
                if goal.startswith("write ")
                else ToolUse("toolu_s1", "shout", {"text": word})
            )
            return Stream((Text("On it."), call), stop_reason="tool_use")
        return Stream((Text(f"done: {_last_result(body)}"),))
    # Slow enough that runs started together are seen at once by the server.
    return Stream((Text(goal.removeprefix("say ")),), token_delay=0.02)


def most_at_once(server: Any) -> int:
    """The most requests the server was answering at one moment."""
    edges = sorted(
        [(t.request_line, 1) for t in server.timings] + [(t.last_byte, -1) for t in server.timings]
    )
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@pytest.fixture
def api(server_factory: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    server = server_factory(model)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    return server


SCORER = """
def said_hello(result, events):
    kinds = {type(event).__name__ for event in events}
    return ("hello" in result.output and "RunFinished" in kinds, "no hello")
"""


def _dataset_path(tmp_path: Path) -> Path:
    return tmp_path / "six.json"


def _dataset(tmp_path: Path) -> Path:
    (tmp_path / "fixture").mkdir()
    (tmp_path / "fixture" / "keep.txt").write_text("kept\n", encoding="utf-8")
    (tmp_path / "want").mkdir()
    (tmp_path / "want" / "out.txt").write_text("hi\n", encoding="utf-8")
    (tmp_path / "want" / "keep.txt").write_text("kept\n", encoding="utf-8")
    (tmp_path / "my_scorers.py").write_text(SCORER, encoding="utf-8")
    data = {
        "name": "six",
        "cases": [
            {"name": "hello", "inputs": "say hello", "expected_output": "hello"},
            {
                "name": "json",
                "inputs": 'say {"n": 1}',
                "evaluators": [{"JsonSchema": {"schema": {"required": ["n"]}}}],
            },
            {
                "name": "files",
                "inputs": "write hi",
                "metadata": {"ruizn": {"fixture": "fixture", "approval": "always"}},
                "evaluators": [
                    {"FilesEqual": "want"},
                    {"CalledTool": {"tool": "write_file", "arguments": {"path": "out.txt"}}},
                    {"NeverRan": "rm -rf"},
                ],
            },
            {"name": "wrong", "inputs": "say bye", "expected_output": "hello"},
            {
                "name": "polite",
                "inputs": "say please sit",
                "evaluators": [{"LLMJudge": {"rubric": "The answer is polite."}}],
            },
            {
                "name": "function",
                "inputs": "say hello there",
                "evaluators": [{"Function": "my_scorers:said_hello"}],
            },
        ],
        "evaluators": [{"MaxSteps": 3}, "EqualsExpected"],
    }
    path = tmp_path / "six.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_six_cases_three_epochs_three_at_once(tmp_path: Path, api: Any) -> None:
    seen: list[Any] = []
    report = ruizn.eval(
        _dataset(tmp_path),
        epochs=3,
        concurrency=3,
        workspace=tmp_path,
        on_trial=seen.append,
    )
    assert isinstance(report, ruizn.EvalReport)
    assert len(report.trials) == len(seen) == 18
    by_case = {s.case: s for s in report.cases()}
    assert {name: s.passed for name, s in by_case.items()} == {
        "hello": 3,
        "json": 3,
        "files": 3,
        "wrong": 0,
        "polite": 3,
        "function": 3,
    }
    assert (by_case["wrong"].pass_at_k, by_case["hello"].pass_hat_k) == (0.0, 1.0)
    assert report.pass_rate == pytest.approx(15 / 18)
    assert 2 <= most_at_once(api) <= 3
    assert not report.ok  # --min-pass is all by default
    wrong = next(t for t in report.trials if t.case == "wrong")
    assert wrong.outcome == "failed"
    assert wrong.why() == "EqualsExpected: output 'bye'"
    polite = next(t for t in report.trials if t.case == "polite")
    (judged,) = [v for v in polite.verdicts if v.scorer.startswith("LLMJudge")]
    assert judged.passed
    assert "It asks nicely." in (judged.reason or "")
    judge_run = (judged.reason or "").split()[2].rstrip(":")
    assert ruizn.replay(tmp_path / ".ruizn" / "runs" / judge_run / "events.jsonl").cost > 0
    assert report.judge_cost > 0
    # Each trial is a normal run, in a fresh copy of its fixture.
    files = [t for t in report.trials if t.case == "files"]
    assert len({t.workspace for t in files}) == 3
    for trial in report.trials:
        assert trial.log_path is not None
        assert ruizn.replay(trial.log_path).run_id == trial.run_id
        assert trial.cost is not None
        assert trial.cost > 0
    assert (Path(files[0].workspace or "") / "out.txt").read_text(encoding="utf-8") == "hi\n"
    # JUnit XML, as a CI system reads it.
    xml = junitparser.JUnitXml.fromstring(to_junit(report))
    suites = list(xml) if isinstance(xml, junitparser.JUnitXml) else [xml]
    (suite,) = suites
    assert (suite.tests, suite.failures, suite.errors) == (18, 3, 0)
    failed = [case for case in suite if case.result]
    assert {case.name for case in failed} == {f"wrong [epoch {n}]" for n in (1, 2, 3)}
    # The report was saved; it reads back whole.
    saved = tmp_path / ".ruizn" / "evals" / report.eval_id / "report.json"
    assert load_report(saved) == report
    # Scoring is a function of the saved runs: the same scorers give the same verdicts again
    # (the judge's kept from the report), with no model call.
    import anyio

    from ruizn.evals.dataset import load_dataset
    from ruizn.evals.rescore import rescore_async

    calls = len(api.requests)
    again = anyio.run(rescore_async, load_dataset(_dataset_path(tmp_path)), report)
    assert [(t.outcome, t.verdicts) for t in again.trials] == [
        (t.outcome, t.verdicts) for t in report.trials
    ]
    assert again.eval_id != report.eval_id
    # A judge changed in any way is not answered by the old verdict.
    path = _dataset_path(tmp_path)
    path.write_text(path.read_text().replace("is polite.", "is polite, and short."))
    changed = anyio.run(rescore_async, load_dataset(path), report)
    rejudged = [t for t in changed.trials if t.case == "polite"]
    assert [t.outcome for t in rejudged] == ["failed"] * 3
    assert "not judged" in (rejudged[0].why() or "")
    assert len(api.requests) == calls


def _budget_dataset(tmp_path: Path) -> Path:
    data = {
        "cases": [
            {"name": "one", "inputs": "write a", "metadata": {"ruizn": {"approval": "always"}}},
            {"name": "two", "inputs": "say b"},
            {"name": "three", "inputs": "say c"},
        ]
    }
    path = tmp_path / "d.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_the_budget_spent_part_way_stops_the_eval_cleanly(tmp_path: Path, api: Any) -> None:
    report = ruizn.eval(_budget_dataset(tmp_path), max_cost=1e-9, workspace=tmp_path)
    assert [t.outcome for t in report.trials] == ["stopped", "not_run", "not_run"]
    assert report.budget_note is not None
    assert "1 runs stopped, 2 not run" in report.budget_note
    assert report.trials[0].status == "max_cost"
    log = Path(report.trials[0].log_path or "")
    assert '"type":"budget_spent"' in log.read_text(encoding="utf-8")
    assert len(api.requests) == 1  # no call after the budget was spent


def test_the_budget_spent_on_the_fleet_stops_the_eval_cleanly(tmp_path: Path, api: Any) -> None:
    # Two at once go through the fleet's queue: the eval's budget is the batch's.
    report = ruizn.eval(_budget_dataset(tmp_path), max_cost=1e-9, concurrency=2, workspace=tmp_path)
    outcomes = [t.outcome for t in report.trials]
    # A one-call case started before the spend may end well; the two-call case never does.
    assert set(outcomes) <= {"stopped", "not_run", "passed"}
    assert outcomes[0] in ("stopped", "not_run")
    stopped = [t for t in report.trials if t.outcome == "stopped"]
    for trial in stopped:
        assert trial.status == "max_cost"
        log = Path(trial.log_path or "")
        assert '"type":"budget_spent"' in log.read_text(encoding="utf-8")
        assert ruizn.replay(log).run_id == trial.run_id  # a normal run folder
    for trial in report.trials:
        if trial.outcome == "not_run":
            assert (trial.run_id, trial.reason) == (None, "budget spent")
    assert report.budget_note is not None
    not_run = outcomes.count("not_run")
    assert f"{len(stopped)} runs stopped, {not_run} not run" in report.budget_note
    started = [t for t in report.trials if t.run_id is not None]
    # Checked before each call: each run that started made at most the one call in flight.
    assert len(api.requests) == sum(t.steps or 0 for t in started) <= len(started)


@ruizn.tool
def shout(text: str) -> str:
    """Shout a text."""
    return text.upper()


@ruizn.tool(name="shout")
def mumble(text: str) -> str:
    """Shout a text."""
    return text.lower()


def test_offline_from_recordings_then_a_tool_change_then_rescore(
    tmp_path: Path, api: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = {"name": "shout", "inputs": "shout hi", "expected_output": "done: HI"}
    data: dict[str, Any] = {"cases": [{**case, "evaluators": ["EqualsExpected"]}]}
    path = tmp_path / "d.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    online = ruizn.eval(path, tools=[shout], workspace=tmp_path, runs=tmp_path / "recorded")
    assert online.ok
    calls = len(api.requests)
    # No key, no server: the replies come from the recordings.
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    offline = ruizn.eval(
        path, tools=[shout], workspace=tmp_path, recordings=tmp_path / "recorded", epochs=2
    )
    assert offline.offline
    assert [t.outcome for t in offline.trials] == ["passed", "passed"]
    assert offline.trials[0].run_id != online.trials[0].run_id
    # Recordings this user's ruizn did not make (another state folder: another machine) are
    # obeyed only with trust.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "elsewhere"))
    refused = ruizn.eval(path, tools=[shout], workspace=tmp_path, recordings=tmp_path / "recorded")
    (untrusted,) = refused.trials
    assert untrusted.outcome == "error"
    assert untrusted.run_id is None  # nothing ran
    assert "run the eval with --trust" in (untrusted.reason or "")
    trusted = ruizn.eval(
        path, tools=[shout], workspace=tmp_path, recordings=tmp_path / "recorded", trust=True
    )
    assert trusted.ok
    changed = ruizn.eval(
        path, tools=[mumble], workspace=tmp_path, recordings=tmp_path / "recorded", trust=True
    )
    (trial,) = changed.trials
    assert trial.outcome == "diverged"
    assert "toolu_s1" in (trial.reason or "")
    assert "shout" in (trial.reason or "")
    assert not changed.ok
    # New scorers over the saved runs: no model call.
    data["cases"][0]["evaluators"] = [{"Contains": "HI"}, {"Regex": "^nope"}]
    path.write_text(json.dumps(data), encoding="utf-8")
    import anyio

    from ruizn.evals.dataset import load_dataset
    from ruizn.evals.rescore import rescore_async

    again = anyio.run(rescore_async, load_dataset(path), online)
    (rescored,) = again.trials
    assert rescored.outcome == "failed"
    assert [v.scorer for v in rescored.verdicts] == ["Contains", "Regex"]
    assert [v.passed for v in rescored.verdicts] == [True, False]
    assert rescored.run_id == online.trials[0].run_id
    assert len(api.requests) == calls


def test_what_the_fleets_workers_cannot_honour_is_refused_before_anything_is_queued(
    tmp_path: Path,
) -> None:
    # (Workers on a database running an eval: tests/fleet/test_budget.py.)
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"cases": [{"inputs": "say hi"}]}), encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'fleet.sqlite'}"
    for how, words in (
        ({"tools": [shout]}, "--tool MODULE:ATTR"),
        ({"concurrency": 2}, "the workers' --concurrency"),
        ({"model": lambda messages: "hi"}, "give the model as a model id"),
    ):
        with pytest.raises(ruizn.ConfigError, match=words):
            ruizn.eval(path, db=db, workspace=tmp_path, **how)
    assert not (tmp_path / "fleet.sqlite").exists()
