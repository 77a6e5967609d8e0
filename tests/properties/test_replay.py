"""Law 3: the log is the truth. Replaying it gives the state the loop had, at the end and
after every event, in one go or in pieces, from the events or from their encoded lines."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ruizn.reducers import fold, rebuild, reduce
from ruizn.serde import decode, encode, state_from_json, state_to_json
from tests.properties.runs import runs_settings, simulate

RUNS = runs_settings(60)


@RUNS
@given(st.data(), st.integers(1, 8), st.booleans())
def test_replay_of_the_log_is_the_final_state_of_the_loop(
    data: st.DataObject, max_steps: int, errors: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=errors)
    assert rebuild(run.events) == run.final


@RUNS
@given(st.data(), st.integers(1, 8), st.booleans())
def test_replay_of_every_prefix_is_the_state_the_loop_had_then(
    data: st.DataObject, max_steps: int, errors: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=errors)
    for k in range(1, len(run.events) + 1):
        assert rebuild(run.events[:k]) == run.states[k - 1]


@RUNS
@given(st.data(), st.integers(1, 8), st.booleans())
def test_replay_of_a_prefix_then_reducing_the_suffix_is_replay_of_the_whole(
    data: st.DataObject, max_steps: int, errors: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=errors)
    cut = data.draw(st.integers(1, len(run.events)), label="cut")
    state = rebuild(run.events[:cut])
    for event in run.events[cut:]:
        state = reduce(state, event)
    assert state == rebuild(run.events) == run.final
    # fold (which batches runs of tokens) is reduce applied one by one
    assert fold(rebuild(run.events[:cut]), run.events[cut:]) == run.final


@RUNS
@given(st.data(), st.integers(1, 8), st.booleans())
def test_replay_of_the_decoded_lines_is_the_state_of_the_original_events(
    data: st.DataObject, max_steps: int, errors: bool
) -> None:
    run = simulate(data, max_steps=max_steps, errors=errors)
    lines = [encode(e) for e in run.events]
    assert rebuild(decode(line) for line in lines) == run.final
    log = "".join(line + "\n" for line in lines).encode("utf-8")
    assert rebuild(decode(raw) for raw in log.split(b"\n")[:-1]) == run.final
    # the state's own JSON form (`ruizn replay --json`) reads back to the same state
    for state in run.states:
        assert state_from_json(state_to_json(state)) == state
