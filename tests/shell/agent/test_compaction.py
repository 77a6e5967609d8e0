"""Runs longer than the window: compaction against the local Messages API (tests/fakeapi),
through the real SDK, in process. Both forms: the API's compaction request for a model whose
Models API entry takes it (claude-sonnet-5-5), ruizn's own summary for one that does not
(claude-sonnet-4-6)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import ruizn
from ruizn.cassette.rerun import rerun_async
from ruizn.effects.runlog.reader import iter_events
from ruizn.events import ContextCompacted, LlmCallFailed, LlmCallStarted, LlmResponse
from ruizn.settings import HookSpec
from ruizn.shell.compacting import CompactionFailed
from ruizn.state import CompactionBlock, Status
from tests.fakeapi import FakeAnthropic, Hang, HttpError, Reply, Stream, Text
from tests.fakeapi.cache import boundaries
from tests.fakeapi.compaction import compaction_stream, counting_loop, progress, summarizing

SERVER_FORM = "claude-sonnet-5-5"
CLIENT_FORM = "claude-sonnet-4-6"


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Starts a fake API for a script and points the SDK at it (the provider reads the
    process environment, as a user's ruizn does)."""
    started: list[FakeAnthropic] = []

    def make(script: Any) -> FakeAnthropic:
        server = FakeAnthropic(script).start()
        started.append(server)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-compaction")
        return server

    yield make
    for server in started:
        server.stop()


def _agent(workspace: Path, model: str, **options: Any) -> ruizn.Agent:
    # A file whose every reading adds a few hundred tokens: the history grows fast.
    (workspace / "README.md").write_text("# Demo\n\n" + "A line of the readme.\n" * 60)
    return ruizn.Agent(
        model,
        workspace=str(workspace),
        environ={"ANTHROPIC_API_KEY": "sk-ant-test-compaction"},
        retry_base_delay=0.0,
        **options,
    )


def _tokens(body: dict[str, Any]) -> int:
    """The request's input tokens as the fake API counts them."""
    marks = boundaries(body)
    return marks[-1].tokens if marks else 0


def _compactions(path: Path | None) -> list[ContextCompacted]:
    assert path is not None
    return [e for e in iter_events(path) if isinstance(e, ContextCompacted)]


@pytest.mark.parametrize(("model", "turns"), [(SERVER_FORM, 300), (CLIENT_FORM, 60)])
def test_a_long_run_compacts_again_and_again_and_ends_success(
    api: Any, workspace: Path, model: str, turns: int
) -> None:
    server = api(counting_loop(turns))
    agent = _agent(workspace, model, compact_at=3_000, max_steps=turns + 5)
    result = agent.run("read the readme again and again")
    assert result.status is Status.SUCCESS, result.error
    assert result.output == "Done."
    compactions = _compactions(result.log_path)
    assert len(compactions) >= 3
    source = "server" if model == SERVER_FORM else "client"
    assert {c.source for c in compactions} == {source}
    # Every request of a step stays under --compact-at; only a compaction request carries
    # the history that passed it.
    steps = [r.body for r in server.requests if "compaction" not in r.body]
    if source == "client":
        steps = [b for b in steps if "summary of this conversation" not in str(b["messages"][-1])]
    assert max(map(_tokens, steps)) <= 3_000
    assert max(map(_tokens, (r.body for r in server.requests))) > 3_000
    # Nothing the summaries stand for was lost: the fake's summary counts the calls made.
    assert result.state.step == turns + 1
    # Each compaction is priced, in the run's cost and in the state's own tally.
    assert all(c.cost is not None and c.cost > 0 for c in compactions)
    responses = [e for e in iter_events(result.log_path) if isinstance(e, LlmResponse)]
    assert result.cost == pytest.approx(
        sum(r.cost or 0 for r in responses) + sum(c.cost or 0 for c in compactions)
    )
    assert result.state.compaction_cost == pytest.approx(sum(c.cost or 0 for c in compactions))
    # The log is the truth: replay is the final state, and a rerun is identical.
    assert result.log_path is not None
    assert ruizn.replay(result.log_path) == result.state
    redo = anyio.run(lambda: rerun_async(agent, result.run_id))
    assert redo.divergence is None
    assert redo.state.status is Status.SUCCESS


def test_the_api_block_goes_back_verbatim_first_in_messages(api: Any, workspace: Path) -> None:
    server = api(counting_loop(8))
    result = _agent(workspace, SERVER_FORM, compact_at=3_000).run("read it")
    assert result.status is Status.SUCCESS, result.error
    first = _compactions(result.log_path)[0]
    assert isinstance(first.block, CompactionBlock)
    assert first.block.signature
    after = next(
        r
        for r in server.requests
        if r.body["messages"][0]["content"][0].get("type") == "compaction"
    )
    sent = after.body["messages"][0]
    assert sent["role"] == "assistant"
    assert sent["content"] == [
        {
            "type": "compaction",
            "content": first.block.content,
            "encrypted_content": first.block.encrypted_content,
            "signature": first.block.signature,
            "tool_changes": [],
        }
    ]
    assert "compact-2026-09-04" in after.headers["anthropic-beta"]
    # The task stays, word for word, right after the summary; the system prompt is sent
    # whole, never summarised.
    assert "read it" in after.body["messages"][1]["content"][0]["text"]
    assert after.body["system"] == server.requests[0].body["system"]


def test_a_budget_the_compactions_exhaust_stops_the_run(api: Any, workspace: Path) -> None:
    loop = counting_loop(50)

    def script(body: dict[str, Any], index: int) -> Reply:
        if "compaction" in body:
            # A compaction of a million input tokens: $2 on claude-sonnet-5-5, all of it in
            # usage.iterations (the top-level counts are 0).
            return compaction_stream(body, (1_000_000, 0, 0))
        return loop(body, index)

    api(script)
    result = _agent(workspace, SERVER_FORM, compact_at=3_000, max_cost=1.0, max_steps=60).run(
        "read it"
    )
    assert result.status is Status.MAX_COST
    compactions = _compactions(result.log_path)
    assert len(compactions) == 1
    assert compactions[0].cost is not None
    assert compactions[0].cost >= 2.0
    assert result.cost is not None
    assert result.cost >= 2.0
    assert result.state.step < 50


def test_an_old_model_gets_ruizns_own_summary_sent_as_text(api: Any, workspace: Path) -> None:
    server = api(counting_loop(8))
    result = _agent(workspace, CLIENT_FORM, compact_at=3_000).run("read it")
    assert result.status is Status.SUCCESS, result.error
    asked = [r.body for r in server.requests if "Stop the task here" in str(r.body["messages"])]
    assert asked
    assert all("compaction" not in body for body in asked)
    # Same system prompt and tools as every step: the prompt cache is read.
    assert asked[0]["system"] == server.requests[0].body["system"]
    assert asked[0]["tools"] == server.requests[0].body["tools"]
    later = server.requests[-1].body["messages"][0]
    assert later["role"] == "user"
    assert later["content"][0]["text"].startswith("<conversation_summary>")


def test_a_full_window_compacts_once_and_calls_again(api: Any, workspace: Path) -> None:
    """stop_reason model_context_window_exceeded, and later a 400 "prompt is too long":
    each is followed by one compaction and the call again; the run ends success."""
    loop = counting_loop(8)
    given: list[str] = []

    def script(body: dict[str, Any], index: int) -> Reply:
        done = progress(body)
        if done == 2 and "exceeded" not in given:
            given.append("exceeded")
            return Stream((Text("I was cut"),), stop_reason="model_context_window_exceeded")
        if done == 5 and "too long" not in given:
            given.append("too long")
            return HttpError(400, "invalid_request_error", "prompt is too long: 9 > 8")
        return loop(body, index)

    api(summarizing(script))
    result = _agent(workspace, SERVER_FORM).run("read it")
    assert result.status is Status.SUCCESS, result.error
    assert given == ["exceeded", "too long"]
    assert [c.trigger for c in _compactions(result.log_path)] == ["auto", "auto"]


def test_a_window_a_fresh_summary_cannot_fit_ends_the_run_naming_compact_at(
    api: Any, workspace: Path
) -> None:
    loop = counting_loop(8)

    def script(body: dict[str, Any], index: int) -> Reply:
        if index == 0:
            return loop(body, index)
        return HttpError(400, "invalid_request_error", "prompt is too long: 9 > 8")

    api(summarizing(script))
    result = _agent(workspace, SERVER_FORM).run("read it")
    assert result.status is Status.ERROR
    assert result.error is not None
    assert "--compact-at" in result.error
    assert len(_compactions(result.log_path)) == 1  # one compaction, then the run ends


def test_compact_by_hand_then_continue(api: Any, workspace: Path) -> None:
    server = api(counting_loop(3))
    agent = _agent(workspace, CLIENT_FORM)
    done = agent.run("read it thrice")
    assert done.status is Status.SUCCESS
    compacted = agent.compact(done.run_id, instructions="keep the file names")
    assert compacted.status is Status.SUCCESS  # the run keeps its status
    (made,) = _compactions(done.log_path)
    assert made.trigger == "manual"
    assert made.instructions == "keep the file names"
    assert "keep the file names" in str(server.requests[-1].body["messages"][-1])
    again = agent.continue_run(done.run_id, "say it once more")
    assert again.status is Status.SUCCESS
    first = server.requests[-1].body["messages"][0]["content"][0]["text"]
    assert first.startswith("<conversation_summary>")
    assert done.log_path is not None
    assert ruizn.replay(done.log_path) == again.state


def test_compaction_off_keeps_the_old_ending(api: Any, workspace: Path) -> None:
    api([Stream((Text("..."),), stop_reason="model_context_window_exceeded")])
    result = _agent(workspace, SERVER_FORM, compact_at=0).run("talk")
    assert result.status is Status.ERROR
    assert result.error is not None
    assert "narrower goal" in result.error
    starts = [e for e in iter_events(result.log_path) if isinstance(e, LlmCallStarted)]
    assert all(e.compaction is None for e in starts)


def test_precompact_hooks_add_instructions_and_postcompact_hooks_see_the_summary(
    api: Any, workspace: Path
) -> None:
    """Claude Code's contract: PreCompact (matcher auto/manual) is told the trigger, may add
    instructions (plain stdout) or block (exit 2); PostCompact sees the summary."""
    server = api(counting_loop(8))
    seen = workspace / "post.json"
    hooks = (
        HookSpec(event="PreCompact", matcher="auto", command="echo keep every path"),
        HookSpec(event="PreCompact", matcher="manual", command="exit 2"),
        HookSpec(event="PostCompact", command=f"cat > {seen}"),
    )
    result = _agent(workspace, SERVER_FORM, compact_at=3_000, hooks=hooks).run("read it")
    assert result.status is Status.SUCCESS, result.error
    first = _compactions(result.log_path)[0]
    assert first.instructions == "keep every path"
    asked = next(r.body for r in server.requests if "compaction" in r.body)
    assert asked["compaction"] == {"type": "summarize", "instructions": "keep every path"}
    told = json.loads(seen.read_text())
    assert told["hook_event_name"] == "PostCompact"
    assert told["trigger"] == "auto"
    assert "tool calls so far" in told["compact_summary"]
    # By hand, the "manual" PreCompact hook blocks: nothing is compacted.
    before = len(_compactions(result.log_path))
    agent = _agent(workspace, SERVER_FORM, compact_at=3_000, hooks=hooks)
    with pytest.raises(CompactionFailed, match="blocked by a PreCompact hook"):
        agent.compact(result.run_id)
    assert len(_compactions(result.log_path)) == before
    assert ruizn.replay(result.log_path).status is Status.SUCCESS


def test_a_compaction_cut_by_ctrl_c_leaves_the_run_to_go_on(api: Any, workspace: Path) -> None:
    loop = counting_loop(1)
    hang = [True]
    arrived = threading.Event()

    def script(body: dict[str, Any], index: int) -> Reply:
        if "compaction" in body and hang[0]:
            arrived.set()
            return Hang(30)
        return loop(body, index)

    server = api(script)
    agent = _agent(workspace, SERVER_FORM)
    done = agent.run("read it once")

    async def cut() -> None:  # what Ctrl-C does: the call, at the API, is cancelled
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: agent.compact_async(done.run_id))
            await anyio.to_thread.run_sync(arrived.wait, 30)
            group.cancel_scope.cancel()

    anyio.run(cut)
    assert done.log_path is not None
    failed = [e for e in iter_events(done.log_path) if isinstance(e, LlmCallFailed)]
    assert [(e.error_type, e.will_retry) for e in failed] == [("cancelled", False)]
    hang[0] = False
    again = agent.continue_run(done.run_id, "and now?")  # not refused: not inside a call
    assert again.status is Status.SUCCESS
    assert "compaction" not in server.requests[-1].body
    assert ruizn.replay(done.log_path) == again.state
