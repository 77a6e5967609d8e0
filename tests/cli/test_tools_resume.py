"""Tools across stops, through the CLI: resume loads the run's own tools (or refuses in one line
when one is gone); Ctrl-C during parallel calls leaves a log that replays and resumes; and the
stop reasons pause_turn and model_context_window_exceeded end as named outcomes."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

from tests.cli.conftest import read_events, run_cli, start_cli
from tests.fakeapi import Stream, Text, ToolUse

SHOUT = '''import ruizn


@ruizn.tool
def shout(text: str) -> str:
    """Shout a text."""
    return text.upper()
'''

NAP = '''import anyio
import ruizn


@ruizn.tool
async def nap(label: str) -> str:
    """Sleep long, then say the label."""
    await anyio.sleep(30)
    return label
'''


def _calls(name: str, *inputs: dict[str, Any]) -> Stream:
    return Stream(
        tuple(ToolUse(f"toolu_{name}_{i}", name, args) for i, args in enumerate(inputs)),
        stop_reason="tool_use",
    )


def test_resume_loads_the_runs_own_tool_again(workspace: Path, server_factory: Any) -> None:
    (workspace / "my_tools.py").write_text(SHOUT, encoding="utf-8")
    server = server_factory(
        [_calls("shout", {"text": "one"}), _calls("shout", {"text": "two"}), Stream((Text("ok"),))]
    )
    first = run_cli(
        ["run", "--goal", "shout", "--max-steps", "1", "--tool", "my_tools.py:shout"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert first.code == 3, first.stderr  # max_steps, after the tool ran
    resumed = run_cli(
        ["resume", "last", "--max-steps", "5"], workspace=workspace, base_url=server.base_url
    )
    assert resumed.code == 0, resumed.stderr
    results = [e["result"] for e in first.events() if e["type"] == "tool_call_finished"]
    assert [r["content"] for r in results] == ["ONE", "TWO"]


def test_resume_of_a_run_whose_tool_is_gone_is_one_line_before_any_call(
    workspace: Path, server_factory: Any
) -> None:
    (workspace / "my_tools.py").write_text(SHOUT, encoding="utf-8")
    server = server_factory([_calls("shout", {"text": "one"})])
    first = run_cli(
        ["run", "--goal", "shout", "--max-steps", "1", "--tool", "my_tools.py:shout"],
        workspace=workspace,
        base_url=server.base_url,
    )
    assert first.code == 3, first.stderr
    (workspace / "my_tools.py").unlink()
    size = first.log_path.stat().st_size
    asked = len(server.requests)
    resumed = run_cli(["resume", "last"], workspace=workspace, base_url=server.base_url)
    assert resumed.code == 2
    assert resumed.stderr.count("\n") == 1
    assert "'shout'" in resumed.stderr
    assert first.log_path.stat().st_size == size
    assert len(server.requests) == asked


def test_ctrl_c_during_parallel_calls_leaves_a_log_that_replays_and_resumes(
    workspace: Path, server_factory: Any
) -> None:
    (workspace / "slow_tools.py").write_text(NAP, encoding="utf-8")
    server = server_factory(
        [_calls("nap", {"label": "a"}, {"label": "b"}, {"label": "c"}), Stream((Text("ok"),))]
    )
    proc = start_cli(
        ["run", "--goal", "nap", "--tool", "slow_tools.py:nap"],
        workspace=workspace,
        base_url=server.base_url,
    )
    deadline = time.monotonic() + 30
    log = None
    while time.monotonic() < deadline:
        found = list((workspace / ".ruizn" / "runs").glob("*/events.jsonl"))
        if found and found[0].read_text(encoding="utf-8").count('"tool_call_started"') == 3:
            log = found[0]
            break
        time.sleep(0.05)
    assert log is not None, "the three calls never started side by side"
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode == 130
    state = json.loads(run_cli(["replay", str(log), "--json"], workspace=workspace).stdout)
    assert state["status"] == "cancelled"
    assert sorted(state["tools_in_flight"]) == ["toolu_nap_0", "toolu_nap_1", "toolu_nap_2"]
    resumed = run_cli(["resume", "last"], workspace=workspace, base_url=server.base_url)
    assert resumed.code == 0, resumed.stderr
    events = read_events(log)
    answers = [e for e in events if e["type"] == "tool_call_finished"]
    # not read-only: never run again, each answered `interrupted` exactly once
    assert sorted(a["id"] for a in answers) == ["toolu_nap_0", "toolu_nap_1", "toolu_nap_2"]
    assert {a["result"]["error_type"] for a in answers} == {"interrupted"}


def test_pause_turn_continues_the_same_turn(workspace: Path, server_factory: Any) -> None:
    server = server_factory(
        [Stream((Text("Part one."),), stop_reason="pause_turn"), Stream((Text(" Part two."),))]
    )
    result = run_cli(["run", "--goal", "long"], workspace=workspace, base_url=server.base_url)
    assert result.code == 0, result.stderr
    second = server.requests[1].body["messages"]
    assert second[-1] == {"role": "assistant", "content": [{"type": "text", "text": "Part one."}]}
    state = json.loads(run_cli(["replay", "last", "--json"], workspace=workspace).stdout)
    assert [m["role"] for m in state["messages"]] == ["user", "assistant"]
    assert [b["text"] for b in state["messages"][1]["content"]] == ["Part one.", " Part two."]


def test_context_window_exceeded_ends_with_a_clear_error(
    workspace: Path, server_factory: Any
) -> None:
    # With compaction off: a full window ends the run (with it on, the history is compacted
    # and the run goes on: tests/shell/agent/test_compaction.py).
    server = server_factory([Stream((Text("..."),), stop_reason="model_context_window_exceeded")])
    result = run_cli(
        ["run", "--compact", "off", "--goal", "huge"], workspace=workspace, base_url=server.base_url
    )
    assert result.code == 1
    assert "no longer fits the model's context window" in result.stdout
    assert result.events()[-1]["status"] == "error"
