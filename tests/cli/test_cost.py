"""Cost and budgets over the real CLI and the test server: what a run cost (the `[run]` line,
`runs`, `show`, `replay --json`, the log), a budget that stops a run and one that goes on
across resumes, and a model with no known price."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.cli.conftest import read_events, run_cli
from tests.fakeapi import Reply, Stream, Text, ToolUse, Usage

# claude-sonnet-5-5 (the default): $2 per million input tokens, $10 per million output tokens.
STEP = Usage(input_tokens=150_000, output_tokens=15_000)  # $0.30 + $0.15


def reads_then_answers(reads: int, *, usage: Usage = STEP) -> Any:
    """read_file README.md `reads` times, then a final answer; every reply costs `usage`."""

    def reply(body: dict[str, Any], index: int) -> Reply:
        turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turns < reads:
            return Stream(
                (
                    Text("Reading."),
                    ToolUse(f"toolu_{turns:03d}", "read_file", {"path": "README.md"}),
                ),
                stop_reason="tool_use",
                usage=usage,
            )
        return Stream((Text("Done."),), usage=usage)

    return reply


def test_two_steps_of_150k_in_15k_out_on_sonnet_5_5_cost_90_cents(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(reads_then_answers(1))
    url = server.base_url
    result = run_cli(["run", "read the readme"], workspace=workspace, base_url=url)
    assert result.code == 0, result.stderr
    assert re.search(r"\[run\] success · 2 steps · .* · \$0\.90\n", result.stdout), result.stdout
    responses = [e for e in read_events(result.log_path) if e["type"] == "llm_response"]
    assert [r["cost"] for r in responses] == [0.45, 0.45]
    assert {r["priced_by"] for r in responses} == {"genai-prices 0.2.3"}
    finished = read_events(result.log_path)[-1]
    assert finished["type"] == "run_finished"
    assert finished["cost"] == 0.9
    run_id = result.log_path.parent.name

    listing = run_cli(["runs"], workspace=workspace)
    assert listing.code == 0, listing.stderr
    header, row = listing.stdout.splitlines()[:2]
    assert "COST" in header.split()
    assert row.split()[header.split().index("COST")] == "$0.90"

    shown = run_cli(["show", run_id], workspace=workspace)
    assert shown.code == 0, shown.stderr
    assert "cost:      $0.90\n" in shown.stdout
    steps = [line.split() for line in shown.stdout.splitlines() if "in 150,000" in line]
    assert [(s[0], s[1]) for s in steps] == [("1", "$0.45"), ("2", "$0.45")]

    state = json.loads(run_cli(["replay", run_id, "--json"], workspace=workspace).stdout)
    assert state["cost"] == 0.9
    assert state["cost_unknown"] == 0
    assert state["unpriced_steps"] == 0


def test_a_model_with_no_known_price_shows_the_cost_as_unknown_never_zero(
    workspace: Path,
) -> None:
    result = run_cli(["run", "--model", "test", "read README.md"], workspace=workspace)
    assert result.code == 0, result.stderr
    assert result.stdout.rstrip().endswith("· cost unknown")
    assert "$0.00" not in result.stdout
    listing = run_cli(["runs"], workspace=workspace)
    assert "unknown" in listing.stdout.splitlines()[1]
    assert "$0.00" not in listing.stdout
    shown = run_cli(["show", "last"], workspace=workspace)
    assert "cost:      unknown (no known price for the model)" in shown.stdout
    assert "$0.00" not in shown.stdout


def test_a_budget_on_a_model_with_no_known_price_is_refused_in_one_line(
    workspace: Path,
) -> None:
    result = run_cli(["run", "--model", "test", "--max-cost", "1", "hi"], workspace=workspace)
    assert result.code == 2
    assert result.stderr.strip().splitlines() == [
        "ruizn: error: no known price for model test (genai-prices 0.2.3): a --max-cost"
        " budget cannot be kept for it"
    ]
    assert not result.new_logs


def test_a_budget_stops_the_run_before_the_next_call_and_a_resume_goes_on_with_a_new_total(
    workspace: Path, server_factory: Any
) -> None:
    server = server_factory(reads_then_answers(3))
    url = server.base_url
    result = run_cli(
        ["run", "--max-cost", "0.5", "read it thrice"], workspace=workspace, base_url=url
    )
    # $0.45 after one call, under $0.50: a second call; $0.90 after it: no third.
    assert result.code == 3, result.stderr
    assert len(server.requests) == 2
    assert "[run] max_cost · 2 steps · " in result.stdout
    run_id = result.log_path.parent.name
    assert f"continue with: ruizn resume {run_id} --max-cost 1.40" in result.stderr
    assert read_events(result.log_path)[-1]["status"] == "max_cost"

    # Money is never added without being asked for: the stopped run needs a new total.
    again = run_cli(["resume", run_id], workspace=workspace, base_url=url)
    assert again.code == 2
    assert "resume with --max-cost N, a new total above $0.90" in again.stderr
    low = run_cli(["resume", run_id, "--max-cost", "0.8"], workspace=workspace, base_url=url)
    assert low.code == 2
    assert "--max-cost 0.8 leaves nothing to spend" in low.stderr
    assert len(server.requests) == 2

    # The budget is a total for the whole run: $0.90 spent, $1.30 allows one call more.
    more = run_cli(["resume", run_id, "--max-cost", "1.30"], workspace=workspace, base_url=url)
    assert more.code == 3, more.stderr
    assert len(server.requests) == 3
    log = read_events(result.log_path)
    resumed = [e for e in log if e["type"] == "run_resumed"]
    assert resumed[-1]["max_cost"] == 1.3
    assert log[-1]["status"] == "max_cost"
    assert log[-1]["cost"] == 1.35

    done = run_cli(["resume", run_id, "--max-cost", "5"], workspace=workspace, base_url=url)
    assert done.code == 0, done.stderr
    assert "[run] success · 4 steps · " in done.stdout
    assert "$1.80" in done.stdout
    state = json.loads(run_cli(["replay", run_id, "--json"], workspace=workspace).stdout)
    assert state["status"] == "success"
    assert state["cost"] == 1.8
    assert state["settings"]["max_cost"] == 5.0


def write_then_answer(body: dict[str, Any], index: int) -> Reply:
    turns = sum(1 for m in body["messages"] if m["role"] == "assistant")
    if turns == 0:
        call = ToolUse("toolu_w", "write_file", {"path": "out.txt", "content": "hello"})
        return Stream((call,), stop_reason="tool_use", usage=STEP)
    return Stream((Text("Written."),), usage=STEP)


def test_a_run_waiting_for_approval_spends_nothing(workspace: Path, server_factory: Any) -> None:
    server = server_factory(write_then_answer)
    url = server.base_url
    result = run_cli(["run", "--max-cost", "0.5", "write it"], workspace=workspace, base_url=url)
    # No terminal: the call waits for a decision, and the run has spent one call's cost.
    assert result.code == 4, result.stderr
    state = json.loads(run_cli(["replay", "last", "--json"], workspace=workspace).stdout)
    assert state["status"] == "awaiting_approval"
    assert state["cost"] == 0.45
    run_id = result.log_path.parent.name
    # The approval and the tool cost nothing: $0.45 is still under the budget, so the run
    # makes its second call.
    resumed = run_cli(["resume", run_id, "--approve", "all"], workspace=workspace, base_url=url)
    assert resumed.code == 0, resumed.stderr
    assert (workspace / "out.txt").read_text() == "hello"
    assert "[run] success · 2 steps · " in resumed.stdout
    assert "$0.90" in resumed.stdout
