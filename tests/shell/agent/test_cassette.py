"""The cassette as a library user meets it: `ruizn.Cassette(path)` as the model of an
`ruizn.Agent` in their own tests, `agent.continue_run`, `agent.fork`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ruizn
from ruizn.effects.models.provider import ModelReply
from ruizn.state import ToolUseBlock, Usage


def _adder(request: dict[str, Any]) -> ModelReply | str:
    """Asks for add(2, 3), then answers with what it got."""
    last = request["messages"][-1]["content"]
    results = [b["content"] for b in last if b.get("type") == "tool_result"]
    if results:
        return "the sum is " + results[0]
    call = ToolUseBlock(id="toolu_add", name="add", input={"a": 2, "b": 3})
    return ModelReply(content=(call,), stop_reason="tool_use", usage=Usage(output_tokens=3))


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _recording(tmp_path: Path, expect: ruizn.Status = ruizn.Status.SUCCESS, **options: Any) -> Path:
    result = ruizn.Agent(_adder, tools=[add], workspace=tmp_path, **options).run("2 + 3?")
    assert result.status is expect
    assert result.log_path is not None
    return result.log_path


def test_a_cassette_replays_the_recording_for_the_same_agent(tmp_path: Path) -> None:
    recording = _recording(tmp_path)
    cassette = ruizn.Cassette(recording)
    assert cassette.goal == "2 + 3?"
    again = ruizn.Agent(cassette, tools=[add], workspace=tmp_path).run(cassette.goal)
    assert again.status is ruizn.Status.SUCCESS
    assert again.output == "the sum is 5"
    assert again.state.messages == ruizn.replay(recording).messages
    assert cassette.served == 2


def test_a_changed_tool_raises_at_the_request_that_shows_it(tmp_path: Path) -> None:
    recording = _recording(tmp_path)

    def add(a: int, b: int) -> int:  # the same tool, changed
        """Add two integers."""
        return a + b + 1

    agent = ruizn.Agent(ruizn.Cassette(recording), tools=[add], workspace=tmp_path)
    with pytest.raises(ruizn.ReplayDiverged) as left:
        agent.run("2 + 3?")
    divergence = left.value.divergence
    finished = [e for e in ruizn.replay_events(recording) if e.TAG == "tool_call_finished"]
    assert (divergence.seq, divergence.call_id, divergence.tool) == (
        finished[0].seq,
        "toolu_add",
        "add",
    )
    assert (divergence.recorded, divergence.now) == ("5", "6")
    assert divergence.lines()[-2:] == ["-5", "+6"]
    # the re-drive's own log ends the run, error, and rebuilds it
    runs = tmp_path / ".ruizn" / "runs"
    (redriven,) = (p for p in runs.iterdir() if p.name != recording.parent.name)
    state = ruizn.replay(redriven / "events.jsonl")
    assert state.status is ruizn.Status.ERROR
    assert "left its recording" in (state.error or "")


def test_another_system_prompt_raises_at_the_first_request(tmp_path: Path) -> None:
    recording = _recording(tmp_path)
    agent = ruizn.Agent(
        ruizn.Cassette(recording), tools=[add], workspace=tmp_path, system="Be terse."
    )
    with pytest.raises(ruizn.ReplayDiverged, match="system prompt") as left:
        agent.run("2 + 3?")
    assert left.value.divergence.seq == 1  # run_started recorded the prompt
    assert left.value.divergence.now == "Be terse."


def test_a_run_that_goes_past_its_recording_raises_no_reply_left(tmp_path: Path) -> None:
    recording = _recording(tmp_path, ruizn.Status.MAX_STEPS, max_steps=1)  # after the call
    agent = ruizn.Agent(ruizn.Cassette(recording), tools=[add], workspace=tmp_path, max_steps=5)
    with pytest.raises(ruizn.ReplayDiverged, match="no reply left for step 2"):
        agent.run("2 + 3?")


def test_a_recording_without_a_reply_is_refused(tmp_path: Path) -> None:
    def broken(request: dict[str, Any]) -> str:
        raise ruizn.ProviderError("bad request", error_type="invalid_request_error")

    failed = ruizn.Agent(broken, workspace=tmp_path).run("anything")
    assert failed.status is ruizn.Status.ERROR
    assert failed.log_path is not None
    with pytest.raises(ruizn.RecordingError, match="no model reply"):
        ruizn.Cassette(failed.log_path)
    with pytest.raises(ruizn.LogError):
        ruizn.Cassette(tmp_path / "nothing-here.jsonl")


def test_continue_run_adds_a_message_to_a_finished_run(tmp_path: Path) -> None:
    seen: list[list[dict[str, Any]]] = []

    def model(request: dict[str, Any]) -> str:
        seen.append(request["messages"])
        return f"answer {len(seen)}"

    agent = ruizn.Agent(model, workspace=tmp_path)
    first = agent.run("hello")
    more = agent.continue_run(first.run_id, "and again", limits=ruizn.Limits(max_steps=1))
    assert more.status is ruizn.Status.SUCCESS
    assert more.output == "answer 2"
    assert [m["role"] for m in seen[1]] == ["user", "assistant", "user"]
    assert seen[1][-1]["content"][-1]["text"] == "and again"
    assert more.state.settings.max_steps == 1 + 1
    assert ruizn.replay(first.log_path) == more.state  # type: ignore[arg-type]
    with pytest.raises(ruizn.ResumeRefused, match="empty"):
        agent.continue_run(first.run_id, "  ")


def test_fork_writes_a_new_run_that_resumes_from_the_point_it_names(tmp_path: Path) -> None:
    recording = _recording(tmp_path)
    events = list(ruizn.replay_events(recording))
    at = next(e.seq for e in events if e.TAG == "tool_call_finished")
    agent = ruizn.Agent(lambda request: "a new ending", tools=[add], workspace=tmp_path)
    fork = agent.fork(recording.parent.name, at=at)
    assert fork.run_id != recording.parent.name
    assert fork.log_path is not None
    assert fork.state.messages == ruizn.replay(recording).messages[:3]
    resumed = agent.resume(fork.run_id)
    assert resumed.output == "a new ending"
    with pytest.raises(ruizn.ForkRefused, match=f"fork at seq 1 or {at}"):
        agent.fork(recording.parent.name, at=at - 1)
