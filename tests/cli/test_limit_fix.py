"""A run stopped by a limit names the fix that applies to it, and the fix works."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import offline_env, run_cli
from tests.fakeapi import Stream, Text

OK = Stream((Text("The rest of it."),))

pytestmark = pytest.mark.slow


def test_a_user_set_max_context_names_resume_with_a_larger_one(workspace: Path) -> None:
    (workspace / "big.txt").write_text("word " * 3000, encoding="utf-8")
    stopped = run_cli(
        ["run", "--model", "test", "--max-context", "1000", "--goal", "read big.txt"],
        workspace=workspace,
        env=offline_env(),
    )
    assert stopped.code == 1, stopped.stderr
    run_id = stopped.log_path.parent.name
    error = stopped.events()[-1]["error"]
    assert "larger context window" not in error  # the limit was the user's, not the model's
    found = re.search(r"resume the run with --max-context (\d+) to go on$", error)
    assert found, error
    assert f"[run] error: {error}" in stopped.stdout
    # The last line says the whole command, with the run's id (the log's words hold none,
    # so a rerun or a fork of the run comes to the same error).
    assert stopped.stderr.splitlines()[-1] == (
        f"continue with: ruizn resume {run_id} --max-context {found.group(1)}"
    )
    # The command it names goes on, and the run ends well.
    resumed = run_cli(
        ["resume", run_id, "--max-context", found.group(1)], workspace=workspace, env=offline_env()
    )
    assert resumed.code == 0, resumed.stderr
    assert "[run] success" in resumed.stdout


def test_an_answer_cut_at_max_tokens_names_resume_with_more(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(
        [Stream((Text("a long answer that is cut"),), stop_reason="max_tokens"), OK]
    )
    stopped = run_cli(
        ["run", "--max-tokens", "100", "--goal", "write a lot"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert stopped.code == 1, stopped.stderr
    run_id = stopped.log_path.parent.name
    assert stopped.events()[-1]["error"] == (
        "the answer was cut off at max_tokens (100): resume the run with --max-tokens 200"
        " to let it go on"
    )
    assert stopped.stderr.splitlines()[-1] == (
        f"continue with: ruizn resume {run_id} --max-tokens 200"
    )
    resumed = run_cli(
        ["resume", run_id, "--max-tokens", "200"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert resumed.code == 0, resumed.stderr
