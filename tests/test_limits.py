"""`Limits`, the one record of a resume's limits: what it applies, says and reads back from
the log's flat `run_resumed` fields."""

from __future__ import annotations

import pytest

from ruizn.events import RunResumed
from ruizn.limits import Limits
from ruizn.serde import decode, encode
from ruizn.settings import RunSettings


def test_only_the_limits_given_change_the_settings() -> None:
    settings = RunSettings(max_steps=20, max_tokens=4000, max_cost=None, max_context=9000)
    applied = Limits(max_steps=40, max_cost=2.5).over(settings)
    assert (applied.max_steps, applied.max_tokens, applied.max_cost, applied.max_context) == (
        40,
        4000,
        2.5,
        9000,
    )
    assert Limits().over(settings) == settings
    assert Limits(max_context=0).over(settings).max_context == 0  # 0 (off) is a value, not None


def test_a_limit_the_settings_refuse_is_refused() -> None:
    with pytest.raises(ValueError, match="max_steps must be a whole number >= 1"):
        Limits(max_steps=0).over(RunSettings())


def test_given_and_summary_name_the_set_limits_in_order() -> None:
    limits = Limits(max_steps=40, max_tokens=8000, max_cost=3.0, max_context=0)
    assert limits.given() == {
        "max_steps": 40,
        "max_tokens": 8000,
        "max_cost": 3.0,
        "max_context": 0,
    }
    assert limits.summary() == "max_steps 40, max_tokens 8000, max_cost 3, max_context 0"
    assert Limits(max_steps=7, max_cost=0.25).summary() == "max_steps 7, max_cost 0.25"
    assert Limits().given() == {}
    assert Limits().summary() == ""


def test_run_resumed_keeps_its_flat_fields_and_reads_them_as_limits() -> None:
    event = RunResumed(seq=5, ts=1.0, max_steps=30, max_cost=2.0)
    line = encode(event)
    assert '"max_steps":30' in line.replace(" ", "")
    assert "limits" not in line
    again = decode(line)
    assert isinstance(again, RunResumed)
    assert again.limits == Limits(max_steps=30, max_cost=2.0)
