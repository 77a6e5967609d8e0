"""The trust law: a log whose run_started was edited, in any field, is not the run ruizn
started, so `resume` refuses it without `trust=True` and acts on nothing: no line written,
no tool run, no model asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ruizn
from ruizn.effects.runlog.trust import TrustStore
from ruizn.resuming import UntrustedRun
from ruizn.serde import DecodeError, decode
from tests.properties.runs import json_values

# Every field of run_started a person could edit (the settings' too), by JSON path.
FIELDS = [
    ("run_id",),
    ("goal",),
    ("ruizn_version",),
    ("parent",),  # optional (a fork's, a rerun's): adding one is an edit too
    *(("settings", f.name) for f in attrs.fields(ruizn.RunSettings)),
]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(field=st.sampled_from(FIELDS), value=json_values)
def test_an_edited_run_started_is_refused_and_nothing_acts(
    tmp_path_factory: pytest.TempPathFactory, field: tuple[str, ...], value: Any
) -> None:
    tmp = tmp_path_factory.mktemp("trust")
    store = TrustStore(tmp / "state")
    calls: list[str] = []

    def model(request: dict[str, Any]) -> ruizn.ModelReply:
        calls.append("model")
        call = ruizn.ToolUseBlock(id=f"toolu_{len(calls)}", name="ping", input={})
        return ruizn.ModelReply(content=(call,), stop_reason="tool_use", usage=ruizn.Usage())

    def ping() -> str:
        """Answer pong."""
        return "pong"

    agent = ruizn.Agent(
        model, tools=[ping], workspace=tmp, max_steps=1, trust_store=store, builtins=False
    )
    first = agent.run("say something")
    assert first.status is ruizn.Status.MAX_STEPS  # a run that can go on
    assert first.log_path is not None
    log = first.log_path
    lines = log.read_text(encoding="utf-8").splitlines(keepends=True)
    original = lines[0]
    started = json.loads(original)
    target = started
    for key in field[:-1]:
        target = target[key]
    if target.get(field[-1]) == value:
        return  # not an edit
    target[field[-1]] = value
    lines[0] = json.dumps(started, ensure_ascii=False) + "\n"
    log.write_text("".join(lines), encoding="utf-8")
    before = log.read_bytes()
    calls.clear()
    try:
        edited = decode(lines[0])
    except DecodeError:
        refusal: type[Exception] = ruizn.LogError  # not even a ruizn log any more
    else:
        if edited == decode(original):
            return  # the same event written another way (60 for 60.0): not an edit
        refusal = UntrustedRun
    with pytest.raises(refusal):
        agent.resume(log, limits=ruizn.Limits(max_steps=5))
    assert log.read_bytes() == before
    assert calls == []


def test_the_same_run_unedited_resumes(tmp_path: Path) -> None:
    """The control: without an edit, the law's run goes on (so the refusals above are the
    trust boundary at work, not a resume that could never succeed)."""
    calls: list[str] = []

    def model(request: dict[str, Any]) -> ruizn.ModelReply | str:
        calls.append("model")
        if len(calls) > 1:
            return "done"
        call = ruizn.ToolUseBlock(id="toolu_1", name="ping", input={})
        return ruizn.ModelReply(content=(call,), stop_reason="tool_use", usage=ruizn.Usage())

    def ping() -> str:
        """Answer pong."""
        return "pong"

    store = TrustStore(tmp_path / "state")
    agent = ruizn.Agent(
        model, tools=[ping], workspace=tmp_path, max_steps=1, trust_store=store, builtins=False
    )
    first = agent.run("say something")
    assert first.status is ruizn.Status.MAX_STEPS
    assert (
        agent.resume(first.run_id, limits=ruizn.Limits(max_steps=5)).status is ruizn.Status.SUCCESS
    )
    assert calls == ["model", "model"]
