"""A run stopped by a limit names the fix that applies to it, and the fix works."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.shell.cli.conftest import cli_env, run_cli

pytestmark = pytest.mark.slow


def _offline() -> dict[str, str]:
    env = cli_env(None)
    env.pop("ANTHROPIC_API_KEY")
    return env


def test_a_user_set_max_context_names_resume_with_a_larger_one(workspace: Path) -> None:
    (workspace / "big.txt").write_text("word " * 3000, encoding="utf-8")
    stopped = run_cli(
        ["run", "--model", "test", "--max-context", "1000", "--goal", "read big.txt"],
        workspace=workspace,
        env=_offline(),
    )
    assert stopped.code == 1, stopped.stderr
    run_id = stopped.log_path.parent.name
    error = stopped.events()[-1]["error"]
    assert "larger context window" not in error  # the limit was the user's, not the model's
    found = re.search(rf"ruizn resume {run_id} --max-context (\d+)$", error)
    assert found, error
    assert f"[run] error: {error}" in stopped.stdout
    # The command it names goes on, and the run ends well.
    resumed = run_cli(
        ["resume", run_id, "--max-context", found.group(1)], workspace=workspace, env=_offline()
    )
    assert resumed.code == 0, resumed.stderr
    assert "[run] success" in resumed.stdout
