"""What a person types first: `ruizn GOAL`, `-m`, a run id's start, `resume` and `continue`
without RUN; and the library's missing key as a `ruizn.ConfigError`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import ruizn
from tests.cli.conftest import run_cli


def test_a_goal_as_the_first_words_is_a_run_and_m_is_model(workspace: Path) -> None:
    result = run_cli(["-m", "test", "summarise README.md"], workspace=workspace)
    assert result.code == 0, result.stderr
    first = result.events()[0]
    assert (first["goal"], first["settings"]["model"]) == ("summarise README.md", "test")
    words = run_cli(["--model", "test", "summarise", "README.md"], workspace=workspace)
    assert words.code == 0, words.stderr
    assert words.events()[0]["goal"] == "summarise README.md"


def test_a_command_name_or_a_typo_of_one_is_never_taken_for_a_goal(workspace: Path) -> None:
    typo = run_cli(["reusme"], workspace=workspace)
    assert typo.code == 2
    assert typo.stderr == (
        "ruizn: error: no such command 'reusme' (did you mean resume?);"
        " for the goal 'reusme': ruizn run reusme\n"
    )
    lone = run_cli(["show"], workspace=workspace)
    assert lone.code == 2
    assert "(for the goal 'show': ruizn run show)" in lone.stderr
    assert not (workspace / ".ruizn").exists()  # no run started


def test_a_run_ids_start_names_it_and_an_ambiguous_one_lists_the_matches(
    workspace: Path,
) -> None:
    first = run_cli(["run", "-m", "test", "one"], workspace=workspace)
    assert first.code == 0, first.stderr
    run_id = first.log_path.parent.name
    twin = first.log_path.parent.with_name(run_id[:-6] + "zzzzzz")
    shutil.copytree(first.log_path.parent, twin)
    shown = run_cli(["show", run_id[:-5]], workspace=workspace)  # one id starts so
    assert shown.code == 0, shown.stderr
    assert f"run:       {run_id}" in shown.stdout
    both = run_cli(["show", run_id[:-6]], workspace=workspace)
    assert both.code == 2
    assert f"is the start of 2 run ids: {run_id}, {twin.name}" in both.stderr


def test_resume_and_continue_without_run_take_the_newest_and_name_it(workspace: Path) -> None:
    none = run_cli(["resume"], workspace=workspace)
    assert none.code == 2
    assert "no runs" in none.stderr
    first = run_cli(["run", "-m", "test", "hello"], workspace=workspace)
    assert first.code == 0, first.stderr
    run_id = first.log_path.parent.name
    resumed = run_cli(["resume"], workspace=workspace)
    assert resumed.stderr.startswith(f"ruizn: going on with {run_id}, the newest run here\n")
    assert f"run {run_id} already finished with success; nothing to resume" in resumed.stdout
    more = run_cli(["continue", "now say more"], workspace=workspace)
    assert more.code == 0, more.stderr
    assert more.stderr.startswith(f"ruizn: going on with {run_id}, the newest run here\n")
    assert "[user] now say more" in more.stdout


def test_a_missing_key_in_the_library_is_a_config_error() -> None:
    agent = ruizn.Agent(model="claude-sonnet-5-5", environ={})
    with pytest.raises(ruizn.ConfigError, match="ANTHROPIC_API_KEY is not set"):
        agent.run("hi")
    assert issubclass(ruizn.ProviderConfigError, ruizn.ConfigError)
