"""The pure decisions made from the Models API's facts (ruizn.modelfacts) and the request
keys they lead to (ruizn.request): thinking and output_config."""

from __future__ import annotations

import pytest

from ruizn.modelfacts import (
    ModelFacts,
    ModelRefused,
    check,
    choice_problem,
    closest,
    current_generation,
    deprecation_line,
    fitted,
    not_found_line,
)
from ruizn.request import MessagesRequest, head_json, output_config, thinking_config
from ruizn.settings import RunSettings

CLAUDE5 = ModelFacts(
    id="claude-sonnet-5-5",
    context_window=1_000_000,
    max_output=128_000,
    thinking_types=("adaptive", "disabled"),
    effort_levels=("low", "medium", "high", "xhigh", "max"),
)


def test_closest_first() -> None:
    ids = ("claude-opus-5-5", "claude-haiku-5-5", "claude-sonnet-5-5", "claude-sonnet-4-6")
    assert set(closest("claude-sonnet-4-5", ids)[:2]) == {"claude-sonnet-4-6", "claude-sonnet-5-5"}
    line = not_found_line("claude-sonet-5-5", ids)
    assert line.startswith(
        "model not found: 'claude-sonet-5-5'; this key can use: claude-sonnet-5-5,"
    )


def test_an_unknown_model_passes_and_a_described_one_is_filled_in() -> None:
    settings = RunSettings(model="claude-sonnet-5-5")
    assert fitted(settings, None) == settings
    check(settings, None, ())
    filled = fitted(settings, CLAUDE5)
    assert (filled.thinking, filled.context_window) == ("adaptive", 1_000_000)
    # A choice made is kept: off stays off.
    assert fitted(RunSettings(thinking="off"), CLAUDE5).thinking == "off"


def test_refused_choices_are_one_line() -> None:
    no_thinking = ModelFacts(id="m", thinking_types=("disabled",), effort_levels=())
    assert choice_problem(RunSettings(thinking="adaptive"), no_thinking) == (
        "m does not support --thinking adaptive (it takes: off)"
    )
    assert choice_problem(RunSettings(effort="low"), no_thinking) == (
        "m does not support --effort low (it takes: none)"
    )
    assert choice_problem(RunSettings(effort="max", thinking="off"), CLAUDE5) is None
    retired = ModelFacts(id="old", lifecycle="retired", retires_at="2026-05-01")
    with pytest.raises(
        ModelRefused, match=r"^model retired on 2026-05-01: 'old'; this key can use: new$"
    ):
        check(RunSettings(), retired, (ModelFacts(id="new"), retired))


def test_a_deprecation_warning_names_the_date() -> None:
    assert deprecation_line(CLAUDE5) is None
    old = ModelFacts(id="claude-opus-4-8", lifecycle="deprecated", retires_at="2027-05-01")
    line = deprecation_line(old)
    assert line is not None
    assert line.startswith("warning: claude-opus-4-8 is deprecated and retires on 2027-05-01;")


def test_thinking_and_effort_in_the_request_head() -> None:
    assert thinking_config(RunSettings()) is None
    assert output_config(RunSettings()) is None
    shown = RunSettings(thinking="adaptive", show_thinking=True)
    assert thinking_config(shown) == {"type": "adaptive", "display": "summarized"}
    hidden = RunSettings(thinking="adaptive")
    assert thinking_config(hidden) == {"type": "adaptive", "display": "omitted"}
    assert thinking_config(RunSettings(thinking="off")) == {"type": "disabled"}
    config = output_config(RunSettings(effort="high"))
    assert config == {"effort": "high"}
    head = head_json(
        MessagesRequest(
            model="m",
            max_tokens=10,
            system="",
            tools=(),
            messages=(),
            marked=frozenset(),
            thinking={"type": "disabled"},
            output_config=config,
        )
    )
    assert head == {
        "model": "m",
        "max_tokens": 10,
        "thinking": {"type": "disabled"},
        "output_config": {"effort": "high"},
    }


def test_the_current_generation_is_the_newest_major_of_todays_naming() -> None:
    ids = (
        "claude-2",
        "claude-v1",
        "claude-3-5-sonnet",
        "claude-opus-4-8",
        "claude-sonnet-5",
        "claude-sonnet-5-5",
        "claude-haiku-4-5",
    )
    assert current_generation(ids) == ("claude-sonnet-5", "claude-sonnet-5-5")
    assert current_generation(("claude-2",)) == ()
