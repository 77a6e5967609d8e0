"""Core goldens: reviewed logs in; the state, the next request and the next action out.

Each folder under core/ holds a hand-written `events.jsonl` (the reviewed input) and three
outputs generated from it and compared exactly, as text:

- `expected_state.json`: `state_to_json` of the replayed log;
- `expected_next_request.json`: `build_request` of the request state, the newest state
  before the run_finished that waits on the model (its last message is the user's): the
  body of the next model call (for plain_answer, the first request);
- `expected_next_action.txt`: `next_action` on the request state, on the state before the
  run_finished, and on the final state.

Re-bless with `pytest tests/golden --update-goldens` (never rewrites events.jsonl), then
review the `git diff` of the expected files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ruizn.decide import next_action
from ruizn.events import Event, RunFinished, RunStarted
from ruizn.reducers import rebuild, reduce, start
from ruizn.request import build_request
from ruizn.serde import decode, encode, state_to_json
from ruizn.state import ExecutionContext
from tests.golden.compare import check_golden

CORE = Path(__file__).parent / "core"
CASES = sorted(p.name for p in CORE.iterdir() if (p / "events.jsonl").is_file())
# The cases that existed when schema 2 was current have that log too (a feature added since,
# such as an output schema, has no version 2 form).
V2_CASES = sorted(c for c in CASES if (CORE / c / "events.v2.jsonl").is_file())
REQUIRED = {"plain_answer", "one_tool_call", "two_tools_one_failing", "thinking_and_max_steps"}


def _lines(case: str) -> list[bytes]:
    raw = (CORE / case / "events.jsonl").read_bytes()
    assert raw.endswith(b"\n"), "events.jsonl ends with a newline"
    return raw.split(b"\n")[:-1]  # split on \n only, as the log reader does


def _events(case: str) -> list[Event]:
    return [decode(line) for line in _lines(case)]


def _states(events: list[Event]) -> list[ExecutionContext]:
    """The state after each event, reduced one by one."""
    first = events[0]
    assert isinstance(first, RunStarted)
    states = [start(first)]
    for event in events[1:]:
        states.append(reduce(states[-1], event))
    return states


def _json(data: object) -> str:
    return json.dumps(data, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def test_the_core_goldens_cover_the_required_cases() -> None:
    assert set(CASES) >= REQUIRED


@pytest.mark.parametrize("case", CASES)
def test_events_jsonl_is_a_whole_run_written_as_the_writer_writes(case: str) -> None:
    events = _events(case)
    for line, event in zip(_lines(case), events, strict=True):
        assert encode(event).encode("utf-8") == line  # canonical: what a real run writes
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.ts for e in events] == sorted(e.ts for e in events)
    assert isinstance(events[-1], RunFinished)
    final = rebuild(events)
    assert events[-1].usage == final.usage  # the totals the run_finished line reports
    assert events[-1].steps == final.step


@pytest.mark.parametrize("case", CASES)
def test_core_golden(case: str, update_goldens: bool) -> None:
    events = _events(case)
    states = _states(events)
    final = states[-1]
    assert rebuild(events) == final
    before_finish = states[-2]
    k = max(i for i, s in enumerate(states[:-1]) if s.messages[-1].role == "user")
    request_state = states[k]
    folder = CORE / case
    check_golden(folder / "expected_state.json", _json(state_to_json(final)), update=update_goldens)
    check_golden(
        folder / "expected_next_request.json",
        _json(build_request(request_state)),
        update=update_goldens,
    )
    actions = (
        f"request state (after seq {events[k].seq}): {next_action(request_state)!r}\n"
        f"before run_finished: {next_action(before_finish)!r}\n"
        f"final: {next_action(final)!r}\n"
    )
    check_golden(folder / "expected_next_action.txt", actions, update=update_goldens)


@pytest.mark.parametrize("case", V2_CASES)
def test_a_version_2_log_reads_as_the_version_3_log_it_became(case: str) -> None:
    """`events.v2.jsonl` is the case as ruizn 0.1's schema 2 wrote it (run_started's settings
    flat, one field each); it must read as the same events, line by line."""
    old = (CORE / case / "events.v2.jsonl").read_bytes().split(b"\n")[:-1]
    assert [decode(line) for line in old] == _events(case)
