"""Core goldens: reviewed logs in, the state and the next request out, compared exactly.

Each folder under core/ holds a hand-written `events.jsonl` (the reviewed input) and the
expected outputs generated from it. Re-bless with `pytest tests/golden --update-goldens`,
then review the `git diff` of the expected files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ruizn.decide import next_action
from ruizn.reducers import reduce, start
from ruizn.request import build_request
from ruizn.serde import decode, state_to_json
from ruizn.state import ExecutionContext
from tests.golden.compare import check_golden

CORE = Path(__file__).parent / "core"
CASES = sorted(p.name for p in CORE.iterdir() if (p / "events.jsonl").is_file())


def _states(case: str) -> list[ExecutionContext]:
    lines = (CORE / case / "events.jsonl").read_text(encoding="utf-8").splitlines()
    events = [decode(line) for line in lines]
    states = [start(events[0])]  # type: ignore[arg-type]
    for event in events[1:]:
        states.append(reduce(states[-1], event))
    return states


def _json(data: object) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def test_there_are_at_least_three_core_goldens() -> None:
    assert {"plain_answer", "one_tool_call", "two_tools_one_failing"} <= set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_core_golden(case: str, update_goldens: bool) -> None:
    states = _states(case)
    final = states[-1]
    # The request the next model call sends: from the newest state that waits on the model.
    waiting = [s for s in states[:-1] if s.messages[-1].role == "user"][-1]
    folder = CORE / case
    check_golden(folder / "expected_state.json", _json(state_to_json(final)), update=update_goldens)
    check_golden(
        folder / "expected_next_request.json", _json(build_request(waiting)), update=update_goldens
    )
    actions = f"before run_finished: {next_action(states[-2])!r}\nfinal: {next_action(final)!r}\n"
    check_golden(folder / "expected_next_action.txt", actions, update=update_goldens)
