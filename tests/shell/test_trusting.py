"""What `trust=True` vouches for in a fork of a run not started here: never a loosened
shell (commands unconfined, patterns approving them), as never an `always` approval; the
settings a resume goes on with are the ones its run_resumed makes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from attrs import evolve

from ruizn.events import RunResumed, RunStarted
from ruizn.limits import Limits
from ruizn.reducers import reduce, start
from ruizn.resuming import ResumePlan, ResumeRefused
from ruizn.settings import RunSettings
from ruizn.shell.trusting import accepted_fork, loosens_shell, resumed_settings
from ruizn.state import ExecutionContext


def _state(tmp_path: Path, **changes: Any) -> ExecutionContext:
    settings = evolve(RunSettings(model="test", workspace=str(tmp_path)), **changes)
    return start(RunStarted(seq=1, ts=1.0, run_id="r", goal="g", settings=settings))


@pytest.mark.parametrize("changes", [{"sandbox": False}, {"allow_commands": ("git *",)}])
def test_a_fork_vouched_for_never_carries_a_loosened_shell(
    tmp_path: Path, changes: dict[str, Any]
) -> None:
    state = _state(tmp_path, shell=True, **changes)
    assert loosens_shell(state)
    with pytest.raises(ResumeRefused, match="fork it without --trust"):
        accepted_fork(str(tmp_path), state)
    accepted_fork(str(tmp_path), _state(tmp_path, shell=True))  # a confined shell: fine


def test_a_confined_resume_goes_on_as_its_run_resumed_replays(tmp_path: Path) -> None:
    state = _state(tmp_path, shell=True, sandbox=False, allow_commands=("git *",))
    plan = ResumePlan(limits=Limits(max_steps=5), confine=True)
    settings = resumed_settings(state, plan)
    assert (settings.sandbox, settings.allow_commands) == (True, ())
    replayed = reduce(state, RunResumed(seq=2, ts=2.0, max_steps=5, confine=True))
    assert (replayed.settings.sandbox, replayed.settings.allow_commands) == (True, ())
    assert evolve(replayed.settings, max_steps=settings.max_steps) == settings
