"""Runs that cannot be lost: replay, resume, Ctrl-C, kill -9 and torn logs, via the real CLI."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from ruizn.effects.runlog.reader import replay_file
from tests.cli.conftest import (
    read_events,
    run_cli,
    slow_answer,
    start_cli,
    wait_for_tokens,
)
from tests.fakeapi import HttpError, Reply, Stream, Text, ToolUse, tool_loop


class Switch:
    """A script whose reply can be changed between processes (e.g. slow, then normal)."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply

    def __call__(self, body: dict[str, Any], index: int) -> Reply:
        reply: Reply = self.reply(body, index) if callable(self.reply) else self.reply
        return reply


def _valid_history(body: dict[str, Any]) -> None:
    messages = body["messages"]
    assert [m["role"] for m in messages] == [
        "user" if i % 2 == 0 else "assistant" for i in range(len(messages))
    ]
    for i, message in enumerate(messages):
        asked = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        if asked:
            answered = [b["tool_use_id"] for b in messages[i + 1]["content"]]
            assert answered == asked


SCENARIOS = {
    "plain": lambda: [Stream((Text("Plain answer, 你好."),))],
    "one-tool": lambda: tool_loop(1),
    "two-tools-one-failing": lambda: [
        Stream(
            (
                Text("Both."),
                ToolUse("a", "read_file", {"path": "nope.txt"}),
                ToolUse("b", "read_file", {"path": "README.md"}),
            ),
            stop_reason="tool_use",
        ),
        Stream((Text("Done."),)),
    ],
    "max-steps": lambda: tool_loop(10),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_replay_prints_the_live_transcript_and_the_live_state(
    name: str, workspace: Path, server_factory: Any
) -> None:
    server = server_factory(SCENARIOS[name]())
    live = run_cli(
        ["run", "--goal", "go", "--max-steps", "3"], workspace=workspace, base_url=server.base_url
    )
    assert live.code in (0, 3), live.stderr
    replayed = run_cli(["replay", str(live.log_path)], workspace=workspace)
    assert replayed.code == 0, replayed.stderr
    assert replayed.stdout == live.stdout  # byte for byte
    as_json = run_cli(["replay", "--json", live.log_path.parent.name], workspace=workspace)
    state = json.loads(as_json.stdout)
    final = read_events(live.log_path)[-1]
    assert state["status"] == final["status"]
    assert state["step"] == final["steps"]
    assert state["usage"] == final["usage"]
    # the history the state holds is exactly what the last request sent plus the answer
    last_request = server.requests[-1].body["messages"]
    assert len(state["messages"]) >= len(last_request)
    for sent, kept in zip(last_request, state["messages"], strict=False):
        assert sent["role"] == kept["role"]


def test_sigint_while_streaming_cancels_cleanly_and_resume_completes(
    workspace: Path, server_factory: Any
) -> None:
    script = Switch(slow_answer())
    server = server_factory(script)
    proc = start_cli(["run", "--goal", "talk"], workspace=workspace, base_url=server.base_url)
    log = wait_for_tokens(workspace / ".ruizn" / "runs", 5, proc)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    events = read_events(log)
    assert events[-1]["type"] == "run_finished"
    assert events[-1]["status"] == "cancelled"
    streamed = "".join(e["text"] for e in events if e["type"] == "llm_token")
    assert streamed.startswith("word word")  # the partial text is kept in the log
    assert stdout.endswith("\n")
    assert stdout.splitlines()[-1].startswith("[run] cancelled · 0 steps")
    # resume against the server, now answering normally
    script.reply = Stream((Text("Finished after all."),))
    before = log.read_bytes()
    resumed = run_cli(["resume", log.parent.name], workspace=workspace, base_url=server.base_url)
    assert resumed.code == 0, resumed.stderr
    assert log.read_bytes().startswith(before)  # appended, nothing rewritten
    _valid_history(server.requests[-1].body)
    after = read_events(log)
    assert [e["seq"] for e in after] == list(range(1, len(after) + 1))
    assert any(e["type"] == "run_resumed" for e in after)
    assert after[-1]["status"] == "success"


def test_second_sigint_exits_at_once_and_the_log_still_replays(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(Switch(slow_answer()))
    proc = start_cli(["run", "--goal", "talk"], workspace=workspace, base_url=server.base_url)
    log = wait_for_tokens(workspace / ".ruizn" / "runs", 3, proc)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=20)
    assert proc.returncode == 130
    replay = run_cli(["replay", str(log)], workspace=workspace)
    assert replay.code == 0, replay.stderr


def test_sigkill_mid_stream_then_replay_and_resume(workspace: Path, server_factory: Any) -> None:
    script = Switch(slow_answer())
    server = server_factory(script)
    proc = start_cli(["run", "--goal", "talk"], workspace=workspace, base_url=server.base_url)
    log = wait_for_tokens(workspace / ".ruizn" / "runs", 5, proc)
    proc.kill()
    proc.communicate(timeout=20)
    before = log.read_bytes()
    replay = run_cli(["replay", "--json", str(log)], workspace=workspace)
    assert replay.code == 0, replay.stderr
    assert json.loads(replay.stdout)["status"] == "running"
    script.reply = Stream((Text("Recovered."),))
    resumed = run_cli(["resume", str(log)], workspace=workspace, base_url=server.base_url)
    assert resumed.code == 0, resumed.stderr
    assert log.read_bytes()[: len(before.rsplit(b"\n", 1)[0])] == before.rsplit(b"\n", 1)[0]
    assert read_events(log)[-1]["status"] == "success"


def _cut_points(lines: list[bytes]) -> dict[str, int]:
    """Byte offsets at which a kill -9 could have left the log."""
    offsets, total = {}, 0
    for raw in lines:
        event = json.loads(raw)
        total += len(raw)
        kind = event["type"]
        if kind == "llm_token" and "mid-token" not in offsets:
            offsets["mid-token"] = total
        if kind == "tool_call_started" and "mid-tool" not in offsets:
            offsets["mid-tool"] = total
        if kind == "tool_call_finished" and "between-steps" not in offsets:
            offsets["between-steps"] = total
    return offsets


@pytest.mark.parametrize("point", ["mid-token", "mid-tool", "between-steps", "random-byte"])
def test_a_log_cut_by_kill_9_replays_to_its_last_whole_event_and_resumes(
    point: str, workspace: Path, server_factory: Any
) -> None:
    server = server_factory(tool_loop(2))
    whole = run_cli(["run", "--goal", "loop"], workspace=workspace, base_url=server.base_url)
    assert whole.code == 0, whole.stderr
    source = whole.log_path
    data = source.read_bytes()
    lines = data.splitlines(keepends=True)
    if point == "random-byte":
        cut = random.Random(len(data)).randrange(len(lines[0]) + 1, len(data) - 1)
    else:
        cut = _cut_points(lines)[point]
    run_dir = workspace / ".ruizn" / "runs" / f"20990101-000000-{point.replace('-', '')[:6]}"
    run_dir.mkdir()
    log = run_dir / "events.jsonl"
    log.write_bytes(data[:cut])
    whole_lines = data[: data.rfind(b"\n", 0, cut) + 1]
    expected = replay_file(source)  # sanity: the full log is fine
    assert expected.torn is None
    replay = run_cli(["replay", "--json", str(log)], workspace=workspace)
    assert replay.code == 0, replay.stderr
    if cut != len(whole_lines):
        assert "torn" in replay.stderr
    state = json.loads(replay.stdout)
    assert state["last_seq"] == whole_lines.count(b"\n")
    # The cut log is a copy of a finished run's, not what a kill -9 left behind: ruizn's
    # record says that run closed whole, so accepting the copy takes --trust.
    resumed = run_cli(
        ["resume", str(log), "--trust"], workspace=workspace, base_url=server.base_url
    )
    assert resumed.code == 0, resumed.stderr
    new = log.read_bytes()
    assert new.startswith(whole_lines)  # no whole line before the cut changed
    _valid_history(server.requests[-1].body)
    assert read_events(log)[-1]["status"] == "success"


def test_resume_after_max_steps_continues_with_a_new_limit(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(tool_loop(3))
    first = run_cli(
        ["run", "--goal", "loop", "--max-steps", "2"], workspace=workspace, base_url=server.base_url
    )
    assert first.code == 3
    resumed = run_cli(
        ["resume", first.log_path.parent.name, "--max-steps", "10"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert resumed.code == 0, resumed.stderr
    events = read_events(first.log_path)
    assert events[-1]["status"] == "success"
    assert events[-1]["steps"] == 4
    _valid_history(server.requests[-1].body)


def test_resume_of_a_successful_run_does_nothing(workspace: Path, server_factory: Any) -> None:
    server = server_factory([Stream((Text("done"),))])
    first = run_cli(["run", "--goal", "x"], workspace=workspace, base_url=server.base_url)
    before = first.log_path.read_bytes()
    again = run_cli(["resume", str(first.log_path)], workspace=workspace, base_url=server.base_url)
    assert again.code == 0
    assert "already finished with success" in again.stdout
    assert len(server.requests) == 1
    assert first.log_path.read_bytes() == before


def test_resume_of_a_missing_run_is_a_one_line_error(workspace: Path) -> None:
    result = run_cli(["resume", "20990101-000000-000000"], workspace=workspace)
    assert result.code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "no run" in result.stderr


def test_runs_and_show_list_every_kind_of_run(workspace: Path, server_factory: Any) -> None:
    ok = server_factory([Stream((Text("fine"),))])
    run_cli(["run", "--goal", "a success"], workspace=workspace, base_url=ok.base_url)
    bad = server_factory([HttpError(400, "invalid_request_error", "messages: bad")])
    errored = run_cli(["run", "--goal", "an error"], workspace=workspace, base_url=bad.base_url)
    assert errored.code == 1
    slow = server_factory(Switch(slow_answer()))
    proc = start_cli(
        ["run", "--goal", "a cancelled one"], workspace=workspace, base_url=slow.base_url
    )
    wait_for_tokens(workspace / ".ruizn" / "runs", 3, proc)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=20)
    torn_dir = workspace / ".ruizn" / "runs" / "20000101-000000-torn00"
    source = sorted((workspace / ".ruizn" / "runs").glob("*/events.jsonl"))[0]
    torn_dir.mkdir()
    (torn_dir / "events.jsonl").write_bytes(source.read_bytes()[:-7])
    junk_dir = workspace / ".ruizn" / "runs" / "20000101-000000-junk00"
    junk_dir.mkdir()
    (junk_dir / "events.jsonl").write_text("this is not a log\n{}\n")
    listing = run_cli(["runs"], workspace=workspace)
    assert listing.code == 0, listing.stderr
    rows = listing.stdout.splitlines()[1:]
    assert len(rows) == 5

    # newest start first (the ts of a log's first line; ties and unreadable logs by run id):
    # two runs started in the same second need not sort by their ids' random tails
    def started(run_id: str) -> float:
        first = (workspace / ".ruizn" / "runs" / run_id / "events.jsonl").open().readline()
        try:
            return float(json.loads(first)["ts"])
        except (ValueError, KeyError, TypeError):
            return -1.0

    listed = [r.split()[0] for r in rows]
    assert listed == sorted(listed, key=lambda i: (started(i), i), reverse=True)
    assert listed[-1] == junk_dir.name  # a log that cannot be read lists last
    statuses = {row.split()[1] for row in rows}
    assert {"success", "error", "cancelled", "unreadable"} <= statuses
    assert any(s.endswith("+torn") for s in statuses)
    assert any(row.endswith(" a cancelled one") for row in rows)
    show = run_cli(["show", torn_dir.name], workspace=workspace)
    assert show.code == 0, show.stderr
    assert "torn" in show.stderr
    assert "goal:" in show.stdout
    assert "cache hit:" in show.stdout
    shown = run_cli(["show", str(errored.log_path)], workspace=workspace)
    assert "status:    error · invalid request: messages: bad" in shown.stdout
    junk = run_cli(["show", junk_dir.name], workspace=workspace)
    assert junk.code == 2
    assert "line 1" in junk.stderr
    shutil.rmtree(junk_dir)
    assert os.path.exists(torn_dir)


def test_runs_piped_prints_each_goal_whole(workspace: Path, server_factory: Any) -> None:
    goal = "a goal " + "that goes on " * 20 + "to its end"
    ok = server_factory([Stream((Text("fine"),))])
    run_cli(["run", "--goal", goal], workspace=workspace, base_url=ok.base_url)
    listing = run_cli(["runs"], workspace=workspace)
    assert listing.code == 0, listing.stderr
    assert listing.stdout.splitlines()[1].endswith(goal)  # grep finds it, never cut to 100
