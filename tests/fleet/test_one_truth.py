"""One truth per fleet run (#28): `show --db` names the fleet's own command, a local resume
of a run the database owns is refused, and an approved call runs once whichever of the two
commands comes first. `last` works with --db, and exit codes agree with the local commands.
`ruizn batch` on SQLite, the real CLI, the fake API."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cli.conftest import cli_env
from tests.fleet.conftest import SUBPROCESS_PATH, batch_db, log_of, of_type, ruizn, writes_model

pytestmark = pytest.mark.slow


def awaiting(workspace: Path, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    goals = workspace / "goals.jsonl"
    goals.write_text('{"goal": "approve", "id": "approve-me"}\n')
    return ruizn(["batch", str(goals), "--approval", "ask"], workspace, environ)


@pytest.mark.parametrize("order", ["local-first", "db-first"])
def test_an_approved_fleet_call_runs_once_whatever_the_order(
    workspace: Path, server_factory: Any, order: str
) -> None:
    server = server_factory(writes_model)
    environ = cli_env(server.base_url, PYTHONPATH=SUBPROCESS_PATH)
    first = awaiting(workspace, environ)
    assert first.returncode == 4, first.stdout + first.stderr
    db = batch_db(workspace)
    shown = ruizn(["show", "--db", db, "approve-me"], workspace, environ)
    assert shown.returncode == 0, shown.stderr
    assert f"(ruizn resume --db {db} approve-me --approve ID|all" in shown.stdout
    local = ["resume", "approve-me", "--approve", "all", "--trust"]
    fleet = ["resume", "--db", db, "approve-me", "--approve", "all"]
    if order == "local-first":
        refused = ruizn(local, workspace, environ)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert refused.stderr.count("\n") == 1, refused.stderr
        assert f"ruizn resume --db {db} approve-me" in refused.stderr
        assert not (workspace / "approved.txt").exists()
        queued = ruizn(fleet, workspace, environ)
        assert queued.returncode == 0, queued.stderr
        again = awaiting(workspace, environ)
        assert again.returncode == 0, again.stdout + again.stderr
    else:
        queued = ruizn(fleet, workspace, environ)
        assert queued.returncode == 0, queued.stderr
        again = awaiting(workspace, environ)
        assert again.returncode == 0, again.stdout + again.stderr
        late = ruizn(local, workspace, environ)
        assert late.returncode == 2, late.stdout + late.stderr
        assert "--db" in late.stderr
    assert (workspace / "approved.txt").read_text() == "yes"
    log = log_of(db, "approve-me")
    assert [e["id"] for e in of_type(log, "tool_call_started")] == ["toolu_w1"]
    # The local copy is the database's, line for line.
    copy = workspace / ".ruizn" / "runs" / "approve-me" / "events.jsonl"
    assert len(copy.read_text().splitlines()) == len(log)
    # A finished run: "nothing to resume", exit 0, as a local resume says it; `last` too.
    done = ruizn(["resume", "--db", db, "last"], workspace, environ)
    assert (done.returncode, done.stdout) == (
        0,
        "run approve-me already finished with success; nothing to resume\n",
    ), done.stderr
    assert ruizn(["show", "--db", db, "last"], workspace, environ).returncode == 0
    # A run id's start names the run, with --db too.
    start = ruizn(["resume", "--db", db, "approve-m"], workspace, environ)
    assert start.stdout == "run approve-me already finished with success; nothing to resume\n", (
        start.stderr
    )
