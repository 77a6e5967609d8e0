"""`ruizn eval` through the real CLI against the local API: the table in 80 columns, the exit
code from --min-pass, --junit and --json, `show` on a trial's run, --rescore and `eval
compare` with no model call, and bad input refused in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from tests.cli.conftest import offline_env, run_cli
from tests.evals.test_eval import model

DATASET = """\
# yaml-language-server: $schema=eval_schema.json
name: greetings
cases:
- name: hello
  inputs: say hello
  expected_output: hello
- name: wrong
  inputs: say bye
  expected_output: hello
evaluators:
- EqualsExpected
- MaxSteps: 2
"""


def test_eval_at_the_terminal_and_for_ci(workspace: Path, server_factory: Any) -> None:
    server = server_factory(model)
    (workspace / "d.yaml").write_text(DATASET, encoding="utf-8")
    done = run_cli(
        ["eval", "d.yaml", "--epochs", "2", "--junit", "out.xml", "--html", "pages/eval.html"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert done.code == 1, done.stderr  # 2 of 4 passed; all are needed by default
    lines = done.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "2/4 passed (50%, needed 100%): FAILED" in done.stdout
    assert "EqualsExpected: output 'bye'" in done.stdout
    suite = ElementTree.parse(workspace / "out.xml").getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("4", "2")
    # The page links each trial to its run's own page, which exists.
    page = (workspace / "pages" / "eval.html").read_text(encoding="utf-8")
    hrefs = re.findall(r'href="([^"]+)"', page)
    assert len(hrefs) == 4
    for href in hrefs:
        assert "<!doctype html>" in (workspace / "pages" / href).read_text(encoding="utf-8").lower()
    passing = run_cli(
        ["eval", "d.yaml", "--min-pass", "0.5", "--json"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert passing.code == 0, passing.stderr
    report = json.loads(passing.stdout)
    assert report["summary"]["passed"] == 1
    trial = report["trials"][0]
    shown = run_cli(["show", trial["run_id"]], workspace=workspace, env=offline_env())
    assert shown.code == 0, shown.stderr
    assert "say hello" in shown.stdout
    # New scorers over the saved runs, and the two reports compared: no key, no server.
    calls = len(server.requests)
    saved = workspace / ".ruizn" / "evals" / report["eval_id"] / "report.json"
    (workspace / "d.yaml").write_text(DATASET.replace("- MaxSteps: 2", "- MaxSteps: 0"))
    rescored = run_cli(
        ["eval", "d.yaml", "--rescore", str(saved), "--min-pass", "0"],
        workspace=workspace,
        env=offline_env(),
    )
    assert rescored.code == 0, rescored.stderr
    assert "MaxSteps: 1 steps" in rescored.stdout
    assert rescored.stdout.splitlines()[-1].startswith("report: .ruizn/evals/")
    after = workspace / rescored.stdout.splitlines()[-1].removeprefix("report: ")
    assert after != saved
    compared = run_cli(["eval", "compare", str(saved), str(after)], workspace=workspace)
    assert compared.code == 1, compared.stderr
    assert "worse:  hello 1/1 -> 0/1" in compared.stdout
    assert len(server.requests) == calls


def test_bad_input_is_one_line(workspace: Path) -> None:
    (workspace / "bad.json").write_text('{"cases": [{"inputs": "a", "evaluators": ["Nope"]}]}')
    for args, words in (
        (["eval", "bad.json"], "unknown evaluator 'Nope'"),
        (["eval", "missing.yaml"], "cannot read dataset"),
        (["eval", "compare", "bad.json", "bad.json"], "not an eval report"),
        (["eval", "bad.json", "--db", "sqlite:///f.db", "--recordings", "r"], "not with --rescore"),
    ):
        done = run_cli(args, workspace=workspace, env=offline_env())
        assert done.code == 2, (args, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("ruizn: error: ")
        assert words in done.stderr
