"""The fleet writes a run's events.jsonl from its database (the export) like any writer of a
run folder: a planted link beside it is never written through."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ruizn.fleet.database import EventStore
from tests.cli.conftest import run_cli
from tests.conftest import PRECIOUS
from tests.fakeapi import Stream, Text


def test_export_replaces_a_planted_link_instead_of_writing_through_it(
    tmp_path: Path, precious: Path
) -> None:
    store = EventStore(f"sqlite:///{tmp_path / 'fleet.sqlite'}")
    store.append("r1", [(1, '{"seq":1}'), (2, '{"seq":2}')])
    folder = tmp_path / "runs" / "r1"
    folder.mkdir(parents=True)
    for name in ("events.jsonl", "events.jsonl.export"):  # the log, and the old temp name
        (folder / name).symlink_to(precious)
    assert store.export("r1", folder / "events.jsonl") == 2
    assert precious.read_text() == PRECIOUS
    assert not (folder / "events.jsonl").is_symlink()
    assert (folder / "events.jsonl").read_bytes() == b'{"seq":1}\n{"seq":2}\n'


def test_batch_into_a_planted_run_folder_changes_no_file_outside_it(
    workspace: Path, server_factory: Any, precious: Path
) -> None:
    server = server_factory([Stream((Text("done"),))])
    planted = workspace / ".ruizn" / "runs" / "planted"
    planted.mkdir(parents=True)
    (planted / "events.jsonl.export").symlink_to(precious)
    goals = workspace / "goals.jsonl"
    goals.write_text(json.dumps({"id": "planted", "goal": "x"}) + "\n", encoding="utf-8")
    done = run_cli(
        ["batch", str(goals), "--concurrency", "1"],
        workspace=workspace,
        base_url=server.base_url,
        timeout=120,
    )
    assert done.code == 0, done.stderr
    assert precious.read_text() == PRECIOUS
    lines = (planted / "events.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[-1])["status"] == "success"
