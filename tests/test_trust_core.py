"""Whom a resume trusts, decided in the core (resuming.trusted_plan, fork_refusal), stated
as laws: a log nobody vouches for grants nothing until a person accepts it, and even then
never an `always` approval, a loosened shell or the log's own approvals they did not accept;
what `trust=True` vouches for in a fork; the settings a resume goes on with are the ones its
run_resumed makes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from attrs import evolve
from hypothesis import given
from hypothesis import strategies as st

from ruizn.events import RunResumed, RunStarted
from ruizn.limits import Limits
from ruizn.reducers import reduce, start
from ruizn.resuming import (
    ResumePlan,
    ResumeRefused,
    TrustAnswer,
    TrustFacts,
    UntrustedRun,
    fork_refusal,
    loosens_shell,
    resumed_settings,
    trusted_plan,
)
from ruizn.settings import RunSettings
from ruizn.state import ExecutionContext


def _state(tmp_path: Path, **changes: Any) -> ExecutionContext:
    settings = evolve(RunSettings(model="test", workspace=str(tmp_path)), **changes)
    return start(RunStarted(seq=1, ts=1.0, run_id="r", goal="g", settings=settings))


@pytest.mark.parametrize(
    "changes",
    [{"sandbox": False}, {"allow_commands": ("git *",)}, {"shell_allow_domains": ("pypi.org",)}],
)
def test_a_fork_vouched_for_never_carries_a_loosened_shell(
    tmp_path: Path, changes: dict[str, Any]
) -> None:
    state = _state(tmp_path, shell=True, **changes)
    assert loosens_shell(state)
    facts = TrustFacts(problem="was not started here", here="/w", recorded="/w")
    assert "fork it without --trust" in (fork_refusal(state, facts) or "")
    assert fork_refusal(_state(tmp_path, shell=True), facts) is None  # a confined shell: fine


def test_a_confined_resume_goes_on_as_its_run_resumed_replays(tmp_path: Path) -> None:
    state = _state(
        tmp_path,
        shell=True,
        sandbox=False,
        allow_commands=("git *",),
        shell_allow_domains=("*.github.com",),
    )
    plan = ResumePlan(limits=Limits(max_steps=5), confine=True)
    settings = resumed_settings(state, plan)
    assert (settings.sandbox, settings.allow_commands, settings.shell_allow_domains) == (
        True,
        (),
        (),
    )
    replayed = reduce(state, RunResumed(seq=2, ts=2.0, max_steps=5, confine=True))
    assert replayed.settings.shell_allow_domains == ()
    assert (replayed.settings.sandbox, replayed.settings.allow_commands) == (True, ())
    assert evolve(replayed.settings, max_steps=settings.max_steps) == settings


_SETTINGS = st.fixed_dictionaries(
    {
        "approval": st.sampled_from(["ask", "always", "never"]),
        "shell": st.booleans(),
        "sandbox": st.booleans(),
        "allow_commands": st.sampled_from([(), ("git status*",)]),
        "shell_allow_domains": st.sampled_from([(), ("pypi.org", "*.github.com")]),
    }
)
_ANSWERS = st.builds(
    TrustAnswer,
    approval=st.sampled_from([None, "ask", "always", "never"]),
    accepted=st.booleans(),
    keep_approvals=st.booleans(),
    keep_shell=st.booleans(),
)
_PLAN = ResumePlan(limits=Limits(max_steps=5))


@given(settings=_SETTINGS, answer=_ANSWERS, elsewhere=st.booleans())
def test_a_log_nobody_vouches_for_grants_only_what_a_person_accepts_now(
    settings: dict[str, Any], answer: TrustAnswer, elsewhere: bool
) -> None:
    state = _state(Path("/w"), **settings)
    facts = TrustFacts(
        problem="was not started here", here="/w", recorded="/x" if elsewhere else "/w"
    )
    if not answer.accepted:
        with pytest.raises(UntrustedRun):
            trusted_plan(_PLAN, state, facts, answer)
        return
    if elsewhere:
        with pytest.raises(ResumeRefused, match="names the workspace"):
            trusted_plan(_PLAN, state, facts, answer)
        return
    plan = trusted_plan(_PLAN, state, facts, answer)
    going_on = resumed_settings(state, plan)
    # never an `always` the person did not give now
    assert going_on.approval != "always" or answer.approval == "always"
    # never a loosened shell they did not accept
    if not answer.keep_shell:
        assert not loosens_shell(evolve(state, settings=going_on))
    assert plan.workspace == "/w"


@given(settings=_SETTINGS, answer=_ANSWERS)
def test_a_run_started_here_goes_on_as_recorded(
    settings: dict[str, Any], answer: TrustAnswer
) -> None:
    state = _state(Path("/w"), **settings)
    plan = trusted_plan(_PLAN, state, TrustFacts(problem=None, here="/y", recorded="/w"), answer)
    assert plan == evolve(_PLAN, approval=answer.approval)
    assert resumed_settings(state, plan).sandbox == state.settings.sandbox


def test_the_grant_shows_the_hosts_a_log_lets_commands_reach(tmp_path: Path) -> None:
    from ruizn.grant import grant_of

    state = _state(tmp_path, shell=True, shell_allow_domains=("pypi.org", "*.github.com"))
    grant = grant_of(state.settings, state)
    assert grant.allow_domains == ("pypi.org", "*.github.com")
    assert (
        "shell: bash commands in bubblewrap, without network, except through a proxy to"
        " pypi.org, *.github.com"
    ) in grant.lines()
    assert (
        grant_of(_state(tmp_path, shell_allow_domains=("pypi.org",)).settings).allow_domains == ()
    )
