"""Compaction over the real CLI: a kill -9 in the middle of a compaction request, then
resume; `ruizn compact RUN` by hand, and what `show` says of each compaction."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.cli.conftest import read_events, run_cli, start_cli
from tests.fakeapi import Compacted, Hang, Reply
from tests.fakeapi.compaction import counting_loop

README = "# Demo\n\n" + "A line of the readme.\n" * 60


class HangingCompaction:
    """counting_loop, whose compaction requests hang until `hang` is turned off."""

    def __init__(self, turns: int) -> None:
        self.loop = counting_loop(turns)
        self.hang = True

    def __call__(self, body: dict[str, Any], index: int) -> Reply:
        if "compaction" in body and self.hang:
            return Hang(60)
        reply = self.loop(body, index)
        return Compacted() if "compaction" in body else reply


def _wait_for_compaction_call(root: Path, proc: Any, server: Any) -> Path:
    """The log once the compaction request is at the server (and hangs there)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if any("compaction" in r.body for r in server.requests):
            (log,) = root.glob("*/events.jsonl")
            return log
        time.sleep(0.02)
    raise AssertionError("no compaction request came")


def test_kill_9_during_a_compaction_then_resume_compacts_once_and_loses_nothing(
    workspace: Path, server_factory: Any
) -> None:
    (workspace / "README.md").write_text(README)
    script = HangingCompaction(12)
    server = server_factory(script)
    args = ["run", "--compact-at", "3000", "--goal", "read it twelve times"]
    proc = start_cli(args, workspace=workspace, base_url=server.base_url)
    log = _wait_for_compaction_call(workspace / ".ruizn" / "runs", proc, server)
    proc.kill()
    proc.communicate(timeout=20)
    cut = [r.body for r in server.requests if "compaction" in r.body]
    assert len(cut) == 1
    assert [e["type"] for e in read_events(log)][-1] == "llm_call_started"
    script.hang = False
    resumed = run_cli(["resume", str(log)], workspace=workspace, base_url=server.base_url)
    assert resumed.code == 0, resumed.stderr
    events = read_events(log)
    assert events[-1]["status"] == "success"
    # The unfinished compaction was simply made again, from the same history: once.
    assert sum(e["type"] == "context_compacted" for e in events) >= 1
    redone = [r.body for r in server.requests if "compaction" in r.body][1]
    assert redone["messages"] == cut[0]["messages"]
    starts = [e for e in events if e["type"] == "llm_call_started" and e.get("compaction")]
    done = [e for e in events if e["type"] == "context_compacted"]
    assert len(starts) == len(done) + 1  # the one the kill cut, and no other


def test_compact_by_hand_and_show_lists_it(workspace: Path, server_factory: Any) -> None:
    (workspace / "README.md").write_text(README)
    server = server_factory(HangingCompaction(2))
    server.script.hang = False
    url = server.base_url
    ran = run_cli(["run", "--goal", "read it twice"], workspace=workspace, base_url=url)
    assert ran.code == 0, ran.stderr
    run_id = ran.log_path.parent.name
    compacted = run_cli(
        ["compact", run_id, "--instructions", "keep the file names"],
        workspace=workspace,
        base_url=url,
    )
    assert compacted.code == 0, compacted.stderr
    assert "[context] compacted" in compacted.stdout
    assert f"ruizn continue {run_id}" in compacted.stderr
    shown = run_cli(["show", run_id], workspace=workspace)
    assert shown.code == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("compacted:"))
    assert "->" in line
    assert "the API's compaction (server, manual)" in line
    assert "$" in line
    again = run_cli(["compact", "no-such-run"], workspace=workspace, base_url=url)
    assert again.code == 2
    assert again.stderr.startswith("ruizn: error:")
