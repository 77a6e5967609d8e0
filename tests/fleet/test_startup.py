"""The fleet is an extra: `ruizn --help` and single runs never load DBOS or SQLAlchemy."""

from __future__ import annotations

from tests.conftest import run_python


def test_help_lists_the_fleet_commands_without_importing_dbos() -> None:
    proc = run_python("-X", "importtime", "-m", "ruizn", "--help", check=True)
    for command in ("batch", "worker", "submit"):
        assert f"  {command} " in proc.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()}
    assert "click" in imported  # the import log was read
    assert "dbos" not in imported
    assert "sqlalchemy" not in imported
