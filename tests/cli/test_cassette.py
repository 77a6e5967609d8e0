"""The log as a cassette, through the real CLI against the local API server: `continue` a run
that ended, `fork` it at a point between steps, `rerun` it offline as a regression test, and
`diff` two runs; with each bad input refused in one line, exit 2, nothing written."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ruizn.reducers import rebuild
from ruizn.serde import decode, state_to_json
from tests.cli.approval_helpers import turns_model, write
from tests.cli.conftest import (
    live_run,
    normalise_stdout,
    offline_env,
    read_events,
    run_cli,
)
from tests.cli.planted import READ, plant, settings
from tests.fakeapi import HttpError, Stream, Text, ToolUse, Usage
from tests.golden.compare import check_golden
from tests.paths import TESTS

GOLDEN = TESTS / "golden" / "cli"
SHOUT = '''import ruizn


@ruizn.tool
def shout(text: str) -> str:
    """Shout a text."""
    return text.upper()
'''


def _shout(call_id: str, text: str) -> Stream:
    return Stream((Text("Shouting."), ToolUse(call_id, "shout", {"text": text})), "tool_use")


def _run_shouting(workspace: Path, server: Any, goal: str, *options: str) -> Any:
    """`ruizn run GOAL --tool my_tools.py:shout OPTIONS` with the shout tool in the workspace."""
    (workspace / "my_tools.py").write_text(SHOUT, encoding="utf-8")
    return run_cli(
        ["run", goal, *options, "--tool", "my_tools.py:shout"],
        workspace=workspace,
        base_url=server.base_url,
    )


def _runs(workspace: Path) -> list[Path]:
    return sorted((workspace / ".ruizn" / "runs").glob("*/events.jsonl"))


def _one_line_refusal(result: Any, *words: str) -> None:
    assert result.code == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("ruizn: error: ")
    for word in words:
        assert word in result.stderr, result.stderr


def _stable(text: str) -> str:
    """`text` with the n-th run id seen replaced by `RUN_n` padded to an id's width, so a
    golden keeps its columns and tells the runs apart."""
    seen: dict[str, str] = {}

    def name(found: re.Match[str]) -> str:
        return seen.setdefault(found.group(0), f"RUN_{len(seen) + 1}".ljust(22, "_"))

    return normalise_stdout(re.sub(r"\d{8}-\d{6}-[0-9a-f]{6}", name, text))


# -- continue -------------------------------------------------------------------------------


def test_continue_sends_the_whole_conversation_then_the_message(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("Hello there."),)), Stream((Text("More, then."),))])
    first = run_cli(["run", "say hello"], workspace=workspace, base_url=server.base_url)
    assert first.code == 0, first.stderr
    more = run_cli(
        ["continue", "last", "say", "more"], workspace=workspace, base_url=server.base_url
    )
    assert more.code == 0, more.stderr
    assert more.new_logs == ()  # the same log goes on
    assert "[user] say more\nMore, then.\n" in more.stdout
    sent = server.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"][0]["text"] == "Hello there."
    assert sent[2]["content"][-1]["text"] == "say more"
    events = first.events()
    kinds = [e["type"] for e in events]
    at = kinds.index("user_message")
    assert kinds[at - 1] == "run_resumed"
    assert events[at - 1]["max_steps"] == 1 + 20  # the default budget: the run's own limit
    assert events[at]["text"] == "say more"
    # the log alone gives the transcript both sessions printed
    replayed = run_cli(["replay", "last"], workspace=workspace)
    assert normalise_stdout(replayed.stdout) == normalise_stdout(first.stdout + more.stdout)


def test_continue_after_max_steps_takes_its_message_on_stdin_and_a_step_budget(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([_shout("toolu_1", "hi"), Stream((Text("Shouted: HI."),))])
    first = _run_shouting(workspace, server, "shout hi", "--max-steps", "1")
    assert first.code == 3, first.stderr
    done = run_cli(
        ["continue", "last", "--max-steps", "2"],
        workspace=workspace,
        base_url=server.base_url,
        input="now tell me what you shouted",
    )
    assert done.code == 0, done.stderr
    resumed = next(e for e in first.events() if e["type"] == "run_resumed")
    assert resumed["max_steps"] == 1 + 2  # the steps taken, plus the budget for the message
    last = server.requests[1].body["messages"][-1]
    # the results of the turn and the message, in one user message: roles alternate
    assert [b["type"] for b in last["content"]] == ["tool_result", "text"]
    assert last["content"][0]["content"] == "HI"
    assert last["content"][1]["text"] == "now tell me what you shouted"


def test_continue_of_a_run_waiting_for_approval_is_refused_and_says_what_to_do(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(turns_model([[write("toolu_w", "notes.txt", "x")]]))
    first = run_cli(["run", "write notes"], workspace=workspace, base_url=server.base_url)
    assert first.code == 4, first.stderr
    before, asked = first.log_path.read_bytes(), len(server.requests)
    refused = run_cli(["continue", "last", "and", "more"], workspace=workspace)
    _one_line_refusal(refused, "waits for a decision", "--approve")
    assert first.log_path.read_bytes() == before
    assert len(server.requests) == asked


def test_continue_bad_input_is_one_line_and_writes_nothing(
    workspace: Path, server_factory: Any
) -> None:
    _one_line_refusal(run_cli(["continue", "nosuchrun", "hi"], workspace=workspace), "no run")
    server = server_factory([Stream((Text("ok"),))])
    first = run_cli(["run", "say ok"], workspace=workspace, base_url=server.base_url)
    before = first.log_path.read_bytes()
    empty = run_cli(["continue", "last", " "], workspace=workspace)
    assert empty.code == 2
    assert "missing message" in empty.stderr
    untrusted = plant(workspace, settings(workspace))
    planted = untrusted.read_bytes()
    refused = run_cli(["continue", untrusted.parent.name, "go on"], workspace=workspace)
    _one_line_refusal(refused, "was not started by ruizn on this machine", "continue with --trust")
    assert untrusted.read_bytes() == planted
    assert first.log_path.read_bytes() == before


def test_continue_of_a_run_being_written_is_refused(workspace: Path, server_factory: Any) -> None:
    proc, log = live_run(workspace, server_factory)
    try:
        refused = run_cli(["continue", log.parent.name, "hurry"], workspace=workspace)
        _one_line_refusal(refused, f"process {proc.pid}")
    finally:
        proc.terminate()
        proc.wait(timeout=20)


# -- fork -----------------------------------------------------------------------------------


def test_fork_holds_the_parents_events_and_goes_on_from_there(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(
        [
            _shout("toolu_1", "hi"),
            Stream((Text("Shouted."),)),
            Stream((Text("Shouted again."),)),
            Stream((Text("Whispered."),)),
        ]
    )
    parent = _run_shouting(workspace, server, "shout hi")
    assert parent.code == 0, parent.stderr
    log = parent.log_path
    original = log.read_bytes()
    events = read_events(log)
    at = next(e["seq"] for e in events if e["type"] == "tool_call_finished")
    forked = run_cli(["fork", "last", "--at", str(at)], workspace=workspace)
    assert forked.code == 0, forked.stderr
    fork_id = forked.stdout.strip()
    assert len(forked.new_logs) == 1
    fork_log = forked.new_logs[0]
    assert fork_log.parent.name == fork_id
    assert log.read_bytes() == original  # the parent is never touched
    head = read_events(fork_log)[0]
    assert head["run_id"] == fork_id
    assert head["parent"] == {"run_id": log.parent.name, "seq": at, "kind": "fork"}
    # the new log alone rebuilds the parent's state at `at`
    parent_lines = original.decode().splitlines()
    expected = state_to_json(rebuild(decode(line) for line in parent_lines[:at]))
    rebuilt = json.loads(run_cli(["replay", fork_id, "--json"], workspace=workspace).stdout)
    assert rebuilt == {**expected, "run_id": fork_id}
    shown = run_cli(["show", fork_id], workspace=workspace).stdout
    assert f"forked:    from {log.parent.name} at seq {at}" in shown
    # resume asks the model again from there, with the history the parent had then
    resumed = run_cli(["resume", fork_id], workspace=workspace, base_url=server.base_url)
    assert resumed.code == 0, resumed.stderr
    assert server.requests[2].body["messages"] == server.requests[1].body["messages"]
    assert "Shouted again." in resumed.stdout
    again = run_cli(["continue", fork_id, "whisper"], workspace=workspace, base_url=server.base_url)
    assert again.code == 0, again.stderr
    assert server.requests[3].body["messages"][-1]["content"][-1]["text"] == "whisper"
    assert log.read_bytes() == original


def test_fork_inside_a_call_or_past_the_log_is_refused_naming_the_nearest_points(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([_shout("toolu_1", "hi"), Stream((Text("Shouted."),))])
    parent = _run_shouting(workspace, server, "shout hi")
    events = read_events(parent.log_path)
    token = next(e["seq"] for e in events if e["type"] == "llm_token")
    result = next(e["seq"] for e in events if e["type"] == "tool_call_finished")
    inside = run_cli(["fork", "last", "--at", str(token)], workspace=workspace)
    _one_line_refusal(inside, "inside a model call", f"fork at seq 1 or {result}")
    started = next(e["seq"] for e in events if e["type"] == "tool_call_started")
    turn = run_cli(["fork", "last", "--at", str(started)], workspace=workspace)
    _one_line_refusal(turn, "inside the tool turn", f"or {result}")
    past = run_cli(["fork", "last", "--at", str(len(events) + 1)], workspace=workspace)
    _one_line_refusal(past, "past the end", f"{len(events)} events")
    unknown = run_cli(["fork", "nosuchrun", "--at", "1"], workspace=workspace)
    _one_line_refusal(unknown, "no run")
    assert _runs(workspace) == [parent.log_path]


def test_a_fork_of_a_planted_log_is_not_trusted_unless_vouched_for(workspace: Path) -> None:
    planted = plant(workspace, settings(workspace))
    forked = run_cli(["fork", planted.parent.name, "--at", "1"], workspace=workspace)
    assert forked.code == 0, forked.stderr
    assert "neither was its fork" in forked.stderr
    fork_id = forked.stdout.strip()
    refused = run_cli(["resume", fork_id], workspace=workspace)
    _one_line_refusal(refused, "--trust")
    vouched = run_cli(["fork", planted.parent.name, "--at", "1", "--trust"], workspace=workspace)
    assert vouched.code == 0, vouched.stderr
    assert "neither" not in vouched.stderr
    resumed = run_cli(["resume", vouched.stdout.strip()], workspace=workspace)
    # it goes on without asking (the offline test model, one step: the planted limit)
    assert resumed.code == 3, resumed.stderr
    assert resumed.stdout.startswith("[run] resumed · max 1 step\n")


def test_fork_of_a_run_being_written_is_refused(workspace: Path, server_factory: Any) -> None:
    proc, log = live_run(workspace, server_factory)
    try:
        refused = run_cli(["fork", log.parent.name, "--at", "1"], workspace=workspace)
        _one_line_refusal(refused, f"process {proc.pid}")
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert len(_runs(workspace)) == 1


# -- rerun ----------------------------------------------------------------------------------


def _recorded_shout(workspace: Path, server_factory: Any) -> Any:
    server = server_factory([_shout("toolu_1", "one"), Stream((Text("Shouted ONE."),))])
    recorded = _run_shouting(workspace, server, "shout one")
    assert recorded.code == 0, recorded.stderr
    return recorded


def test_rerun_of_an_unchanged_run_is_identical_offline(
    workspace: Path, server_factory: Any
) -> None:
    recorded = _recorded_shout(workspace, server_factory)
    rec_id = recorded.log_path.parent.name
    again = run_cli(["rerun", rec_id], workspace=workspace, env=offline_env())
    assert again.code == 0, again.stderr
    assert again.stdout.count("\n") == 1
    assert again.stdout.startswith("identical: rerun ")
    assert f" of {rec_id} (2 model calls, 1 tool result, status success)" in again.stdout
    rerun_log = again.log_path
    assert read_events(rerun_log)[0]["parent"] == {
        "run_id": rec_id,
        "seq": len(read_events(recorded.log_path)),
        "kind": "rerun",
    }
    same = run_cli(["diff", rec_id, rerun_log.parent.name], workspace=workspace)
    assert same.code == 0, same.stdout
    assert same.stdout.startswith("no difference")
    shown = run_cli(["rerun", rec_id, "--show"], workspace=workspace, env=offline_env())
    assert normalise_stdout(shown.stdout).startswith(normalise_stdout(recorded.stdout))


def test_rerun_catches_a_changed_tool_naming_the_seq_the_call_and_the_tool(
    workspace: Path, server_factory: Any, update_goldens: bool
) -> None:
    recorded = _recorded_shout(workspace, server_factory)
    (workspace / "my_tools.py").write_text(SHOUT.replace(".upper()", ".lower()"), encoding="utf-8")
    changed = run_cli(["rerun", "last"], workspace=workspace, env=offline_env())
    assert changed.code == 1, changed.stderr
    result_seq = next(
        e["seq"] for e in read_events(recorded.log_path) if e["type"] == "tool_call_finished"
    )
    first = changed.stdout.splitlines()[0]
    assert f"diverged at seq {result_seq}: the result of toolu_1 (shout) differs" in first
    assert "-ONE\n+one\n" in changed.stdout
    check_golden(
        GOLDEN / "rerun_changed_tool" / "stdout.txt",
        _stable(changed.stdout),
        update=update_goldens,
    )
    stopped = read_events(changed.log_path)
    assert stopped[-1]["type"] == "run_finished"
    assert stopped[-1]["status"] == "error"
    assert "left its recording" in stopped[-1]["error"]


def test_rerun_serves_failed_attempts_resumes_and_continues_as_recorded(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(
        [
            HttpError(529, "overloaded_error", "Overloaded"),
            _shout("toolu_1", "a"),
            Stream((Text("Shouted A."),)),
            Stream((Text("And more."),)),
        ]
    )
    url = server.base_url
    recorded = _run_shouting(workspace, server, "shout a", "--max-steps", "1")
    assert recorded.code == 3, recorded.stderr
    assert (
        run_cli(["resume", "last", "--max-steps", "2"], workspace=workspace, base_url=url).code == 0
    )
    assert run_cli(["continue", "last", "more"], workspace=workspace, base_url=url).code == 0
    rec_id = recorded.log_path.parent.name
    asked = len(server.requests)
    again = run_cli(["rerun", rec_id], workspace=workspace, env=offline_env())
    assert again.code == 0, again.stdout + again.stderr
    assert "identical" in again.stdout
    assert len(server.requests) == asked
    kinds = [e["type"] for e in read_events(recorded.log_path)]
    assert "llm_call_failed" in kinds
    assert [e["type"] for e in read_events(again.log_path)] == kinds
    same = run_cli(["diff", rec_id, again.log_path.parent.name], workspace=workspace)
    assert same.code == 0, same.stdout


def test_rerun_bad_input_is_one_line_and_writes_nothing(
    workspace: Path, server_factory: Any, tmp_path: Path
) -> None:
    recorded = _recorded_shout(workspace, server_factory)
    # a workspace without the files the recording's tools come from
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    missing = run_cli(
        ["rerun", str(recorded.log_path), "--workspace", str(elsewhere)],
        workspace=elsewhere,
        env=offline_env(),
    )
    _one_line_refusal(missing, "my_tools.py")
    assert not (elsewhere / ".ruizn").exists()
    _one_line_refusal(run_cli(["rerun", "nosuchrun"], workspace=workspace), "no run")
    # a recording with no reply to serve
    failing = server_factory([HttpError(400, "invalid_request_error", "messages: bad")])
    bad = run_cli(["run", "fail"], workspace=workspace, base_url=failing.base_url)
    assert bad.code == 1
    before = _runs(workspace)
    empty = run_cli(["rerun", "last"], workspace=workspace, env=offline_env())
    _one_line_refusal(empty, "no model reply")
    assert _runs(workspace) == before


def test_rerun_of_a_planted_recording_imports_nothing_without_trust(workspace: Path) -> None:
    marker = workspace / "IMPORTED"
    (workspace / "evil.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n\ndef tool(x: int) -> int:\n    return x\n"
    )
    planted = plant(workspace, settings(workspace, tool_specs=("evil.py:tool",), tools=(READ,)))
    refused = run_cli(["rerun", planted.parent.name], workspace=workspace, env=offline_env())
    _one_line_refusal(refused, "was not started by ruizn on this machine", "rerun with --trust")
    assert not marker.exists()
    assert _runs(workspace) == [planted]


def test_rerun_of_a_recording_being_written_is_refused(
    workspace: Path, server_factory: Any
) -> None:
    proc, log = live_run(workspace, server_factory)
    try:
        refused = run_cli(["rerun", log.parent.name], workspace=workspace, env=offline_env())
        _one_line_refusal(refused, f"process {proc.pid}")
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert len(_runs(workspace)) == 1


# -- diff -----------------------------------------------------------------------------------


def test_diff_of_two_runs_names_where_they_part_and_what_each_came_to(
    workspace: Path, server_factory: Any, update_goldens: bool
) -> None:
    server = server_factory(
        [
            Stream((Text("The answer is 4."),), usage=Usage(120, 7)),
            Stream((Text("The answer is 4."),), usage=Usage(120, 7)),
            Stream((Text("The answer is five, I think."),), usage=Usage(120, 9)),
        ]
    )
    runs = [
        run_cli(["run", "what is 2 + 2?"], workspace=workspace, base_url=server.base_url)
        for _ in range(3)
    ]
    a, b, c = (r.log_path.parent.name for r in runs)
    same = run_cli(["diff", a, b], workspace=workspace)
    assert same.code == 0, same.stdout
    assert same.stdout == f"no difference ({len(read_events(runs[0].log_path))} events)\n"
    differ = run_cli(["diff", a, c], workspace=workspace)
    assert differ.code == 1, differ.stderr
    text_seq = next(e["seq"] for e in read_events(runs[0].log_path) if e["type"] == "llm_token")
    assert differ.stdout.startswith(f"runs differ: seq {text_seq} of A, seq {text_seq} of B\n")
    check_golden(
        GOLDEN / "diff_two_answers" / "stdout.txt",
        _stable(differ.stdout),
        update=update_goldens,
    )
    _one_line_refusal(run_cli(["diff", a, "nosuchrun"], workspace=workspace), "no run")


def test_diff_of_a_run_and_its_continuation_names_the_first_new_event(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory([Stream((Text("Hi."),)), Stream((Text("Again."),))])
    first = run_cli(["run", "say hi"], workspace=workspace, base_url=server.base_url)
    parent = first.log_path.parent.name
    end = len(read_events(first.log_path))
    fork = run_cli(["fork", parent, "--at", str(end)], workspace=workspace).stdout.strip()
    assert run_cli(["diff", parent, fork], workspace=workspace).code == 0
    assert (
        run_cli(["continue", fork, "again"], workspace=workspace, base_url=server.base_url).code
        == 0
    )
    differ = run_cli(["diff", parent, fork], workspace=workspace)
    assert differ.code == 1
    assert differ.stdout.startswith(f"runs differ: seq - of A, seq {end + 1} of B\n")
    assert "  A  (the run ends here)" in differ.stdout
    assert "  B  run_resumed" in differ.stdout
