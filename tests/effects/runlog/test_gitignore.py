"""Run logs (file contents, command output) stay out of git: the `.ruizn/` ruizn makes
carries a `.gitignore` of `*`; one the person already has is left alone. Real git."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cli.conftest import run_cli


def _git(workspace: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=workspace, capture_output=True, text=True, check=True, timeout=30
    )
    return done.stdout


def test_git_status_stays_clean_after_a_run(workspace: Path) -> None:
    _git(workspace, "init", "-q")
    _git(workspace, "add", "README.md")
    _git(workspace, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    result = run_cli(["run", "--model", "test", "summarise README.md"], workspace=workspace)
    assert result.code == 0, result.stderr
    assert (workspace / ".ruizn" / "runs").is_dir()
    assert _git(workspace, "status", "--porcelain", "--untracked-files=all") == ""
    _git(workspace, "add", "-A")  # `git add -A` commits no transcript
    assert _git(workspace, "diff", "--cached", "--name-only") == ""


def test_a_ruizn_folder_the_person_made_is_left_as_it_is(workspace: Path) -> None:
    (workspace / ".ruizn").mkdir()
    (workspace / ".ruizn" / "config.toml").write_text('model = "test"\n', encoding="utf-8")
    result = run_cli(["run", "--model", "test", "hi"], workspace=workspace)
    assert result.code == 0, result.stderr
    assert not (workspace / ".ruizn" / ".gitignore").exists()
