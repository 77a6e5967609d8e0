"""Hypothesis against the log reader: whatever bytes a log holds, reading it either gives
the state of its whole lines (reporting a torn tail: a last line without its newline, and
nothing else) or one LogError, never a crash."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from ruizn.effects.runlog.reader import LogError, replay_file
from ruizn.reducers import rebuild
from ruizn.serde import encode
from tests.properties.runs import json_values, runs_settings, simulate

FUZZ = runs_settings(70)


def _read(data: bytes) -> object:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "events.jsonl"
        path.write_bytes(data)
        try:
            return replay_file(path)
        except LogError as exc:
            error = exc
    assert "\n" not in str(error)  # one line
    return error


@FUZZ
@given(st.data())
def test_a_log_cut_at_any_byte_replays_to_its_last_whole_event(data: st.DataObject) -> None:
    run = simulate(data, max_steps=3)
    lines = [(encode(e) + "\n").encode() for e in run.events]
    blob = b"".join(lines)
    cut = data.draw(st.integers(1, len(blob)), label="cut")
    outcome = _read(blob[:cut])
    whole = blob[:cut].count(b"\n")
    if whole == 0:
        assert isinstance(outcome, LogError)
        return
    assert not isinstance(outcome, LogError), outcome
    assert outcome.state == run.states[whole - 1]  # type: ignore[attr-defined]
    assert (outcome.torn is None) == (cut == sum(map(len, lines[:whole])))  # type: ignore[attr-defined]


@FUZZ
@given(
    st.data(),
    st.one_of(
        st.binary(max_size=60),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.dictionaries(st.sampled_from(["v", "type", "seq", "ts", "text", "id"]), json_values).map(
            lambda d: json.dumps({"v": 1, **d}).encode()
        ),
    ),
)
def test_a_random_line_anywhere_is_refused_or_skipped_never_crashes(
    data: st.DataObject, junk: bytes
) -> None:
    run = simulate(data, max_steps=2)
    lines = [(encode(e) + "\n").encode() for e in run.events]
    at = data.draw(st.integers(0, len(lines)), label="at")
    blob = b"".join([*lines[:at], junk.replace(b"\n", b" ") + b"\n", *lines[at:]])
    outcome = _read(blob)
    if not isinstance(outcome, LogError):
        # accepted only if the junk line happened to be a valid next event: a whole line,
        # the last one too, is never called torn
        assert outcome.torn is None  # type: ignore[attr-defined]
        assert outcome.state.last_seq >= run.final.last_seq  # type: ignore[attr-defined]
        if at < len(lines):
            assert outcome.state == rebuild(run.events)  # type: ignore[attr-defined]
