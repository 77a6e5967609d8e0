"""The fleet is an extra: `ruizn --help` and single runs never load DBOS or SQLAlchemy; an
offline batch never loads the SDK."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import cli_env, modules_after
from tests.conftest import run_python


def test_help_lists_the_fleet_commands_without_importing_dbos() -> None:
    proc = run_python("-X", "importtime", "-m", "ruizn", "--help", check=True)
    for command in ("batch", "worker", "submit"):
        assert f"  {command} " in proc.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()}
    assert "click" in imported  # the import log was read
    assert "dbos" not in imported
    assert "sqlalchemy" not in imported


def test_an_offline_batch_never_imports_the_sdk(tmp_path: Path) -> None:
    # Importing `anthropic` costs a CPU-second and more; a batch of `--model test` runs
    # has no use for it. (A batch of real models loads it once, before its first runs:
    # tests/fleet/test_batch.py runs those.)
    goals = tmp_path / "goals.jsonl"
    goals.write_text('{"goal": "read README.md"}\n{"goal": "list the files"}\n')
    (tmp_path / "README.md").write_text("# hello\n")
    env = cli_env(None, RUIZN_STATE_DIR=str(tmp_path / "state"))
    out, modules = modules_after(["batch", str(goals), "--model", "test"], cwd=tmp_path, env=env)
    assert "batch: 2 runs: 2 success" in out
    assert "dbos" in modules  # the check sees the batch's imports
    assert "anthropic" not in modules
