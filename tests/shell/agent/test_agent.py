"""`import ruizn` as a library user meets it: Agent, @tool, FunctionModel, stream, replay."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

import ruizn
from ruizn.effects.models.provider import ModelReply
from ruizn.events import ToolCallFinished, ToolCallStarted
from ruizn.state import TextBlock, ToolUseBlock, Usage
from tests.conftest import run_python
from tests.paths import TESTS


@ruizn.tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def _asks(*calls: tuple[str, dict[str, Any]]) -> Any:
    """A model that asks for `calls` in one turn, then answers with the results it got."""

    def model(request: dict[str, Any]) -> ModelReply | str:
        last = request["messages"][-1]["content"]
        results = [b["content"] for b in last if b.get("type") == "tool_result"]
        if results:
            return "results: " + ", ".join(results)
        blocks = tuple(
            ToolUseBlock(id=f"toolu_{i}", name=name, input=args)
            for i, (name, args) in enumerate(calls)
        )
        return ModelReply(content=blocks, stop_reason="tool_use", usage=Usage(output_tokens=3))

    return model


def test_the_readme_example_runs_a_typed_tool_and_the_log_rebuilds_the_result(
    tmp_path: Path,
) -> None:
    agent = ruizn.Agent(model=_asks(("add", {"a": 2, "b": 3})), tools=[add], workspace=tmp_path)
    result = agent.run("What is 2 + 3?")
    assert result.status == "success"
    assert result.output == "results: 5"
    assert result.log_path is not None
    assert result.log_path.parent.name == result.run_id
    assert ruizn.replay(result.log_path) == result.state
    assert add(1, 1) == 2  # the decorated function is still a function


def test_invalid_input_is_an_invalid_input_result_naming_the_field(tmp_path: Path) -> None:
    agent = ruizn.Agent(model=_asks(("add", {"a": 2, "b": "x"})), tools=[add], workspace=tmp_path)
    result = agent.run("add badly")
    assert result.status == "success"
    assert "invalid" in result.output
    assert "b" in result.output


def test_stream_yields_the_logged_events_in_order(tmp_path: Path) -> None:
    agent = ruizn.Agent(model=_asks(("add", {"a": 1, "b": 1})), tools=[add], workspace=tmp_path)

    async def collect() -> list[Any]:
        return [event async for event in agent.stream("1 + 1?")]

    events = anyio.run(collect)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[0].TAG == "run_started"
    assert events[-1].TAG == "run_finished"


def test_the_offline_test_model_reads_a_file(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# hello\n")
    result = ruizn.Agent(model="test", workspace=tmp_path).run("read README.md")
    assert result.status == "success"
    assert "README.md" in result.output


def test_two_slow_calls_of_one_turn_run_side_by_side_and_merge_in_tool_use_order(
    tmp_path: Path,
) -> None:
    @ruizn.tool
    async def nap(label: str) -> str:
        """Sleep a second, then say the label."""
        await anyio.sleep(1)
        return label

    model = _asks(("nap", {"label": "first"}), ("nap", {"label": "second"}))
    agent = ruizn.Agent(model=model, tools=[nap], workspace=tmp_path, builtins=False)
    began = time.monotonic()
    result = agent.run("nap twice")
    took = time.monotonic() - began
    assert result.output == "results: first, second"  # tool_use order, however they finished
    assert took < 1.8, f"two 1 s calls took {took:.2f} s: they did not run side by side"


def test_a_sequential_tool_runs_alone(tmp_path: Path) -> None:
    @ruizn.tool(sequential=True)
    def step(n: int) -> int:
        """One step that must not overlap another."""
        time.sleep(0.05)
        return n

    model = _asks(("step", {"n": 1}), ("step", {"n": 2}), ("step", {"n": 3}))
    agent = ruizn.Agent(model=model, tools=[step], workspace=tmp_path, builtins=False)
    result = agent.run("three steps")
    assert result.log_path is not None
    events = [
        e
        for e in ruizn.replay_events(result.log_path)
        if isinstance(e, ToolCallStarted | ToolCallFinished)
    ]
    # started, finished, started, finished...: never two in flight, in the order asked
    assert [type(e).__name__ for e in events] == ["ToolCallStarted", "ToolCallFinished"] * 3
    assert [e.id for e in events[::2]] == ["toolu_0", "toolu_1", "toolu_2"]


def test_importing_ruizn_loads_no_heavy_module() -> None:
    code = (
        "import sys, ruizn; ruizn.__version__;"
        " print(sorted(m for m in ('anyio','anthropic','pydantic') if m in sys.modules))"
    )
    out = run_python("-c", code, check=True)
    assert out.stdout.strip() == "[]"


def test_every_public_name_resolves() -> None:
    for name in ruizn.__all__:
        assert getattr(ruizn, name) is not None
    with pytest.raises(AttributeError):
        _ = ruizn.no_such_name  # type: ignore[attr-defined]


def test_a_function_model_text_reply_is_the_output(tmp_path: Path) -> None:
    result = ruizn.Agent(model=lambda request: "hi", workspace=tmp_path).run("say hi")
    assert result.output == "hi"
    assert result.state.messages[-1].content == (TextBlock(text="hi"),)


def test_an_agent_offers_an_mcp_servers_tools_and_stops_the_server(tmp_path: Path) -> None:
    demo = TESTS / "mcp_servers" / "demo.py"
    server = ruizn.MCPServer.stdio("demo", sys.executable, [str(demo)])
    model = _asks(("mcp__demo__echo", {"text": "hi"}))
    agent = ruizn.Agent(model=model, mcp=[server], workspace=tmp_path, builtins=False)
    result = agent.run("echo hi")
    assert result.status == "success", result.error
    assert "hi" in result.output
    assert result.state.settings.mcp_servers[0]["name"] == "demo"
    assert ruizn.replay(result.log_path or "") == result.state


def test_a_new_run_records_where_each_tool_came_from_and_whether_it_only_reads(
    tmp_path: Path,
) -> None:
    """What resume and trust rely on: run_started names every tool's source and flag."""
    result = ruizn.Agent(model="test", workspace=tmp_path).run("list the files")
    sources = {s.tool: s for s in result.state.settings.tool_sources}
    assert set(sources) == {t["name"] for t in result.state.settings.tools}
    assert sources["read_file"].read_only
    assert not sources["write_file"].read_only


def _priced_steps(steps: int) -> Any:
    """A function model: `steps - 1` tool calls, then an answer; each reply 100k in, 10k out."""

    def reply(request: dict[str, Any]) -> ModelReply:
        turns = sum(1 for m in request["messages"] if m["role"] == "assistant")
        usage = Usage(input_tokens=100_000, output_tokens=10_000)
        if turns < steps - 1:
            call = ToolUseBlock(id=f"t{turns}", name="add", input={"a": 1, "b": 2})
            return ModelReply(content=(call,), stop_reason="tool_use", usage=usage)
        return ModelReply(content=(TextBlock(text="3"),), stop_reason="end_turn", usage=usage)

    return reply


def test_a_budget_stops_a_library_run_and_resume_goes_on_with_a_new_total(
    tmp_path: Path,
) -> None:
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    # $3 in and $15 out per million tokens: each call costs $0.45.
    prices = ruizn.FixedPrices({"function": (3.0, 15.0, 3.75, 0.3)})
    agent = ruizn.Agent(
        _priced_steps(4), tools=[add], workspace=tmp_path, pricer=prices, max_cost=1.0
    )
    result = agent.run("add")
    assert result.status is ruizn.Status.MAX_COST
    assert result.cost == pytest.approx(1.35)
    assert result.state.step == 3
    with pytest.raises(ruizn.ResumeRefused, match="new total above"):
        agent.resume(result.run_id)
    done = agent.resume(result.run_id, limits=ruizn.Limits(max_cost=3.0))
    assert done.status is ruizn.Status.SUCCESS
    assert done.cost == pytest.approx(1.8)
    assert ruizn.replay(done.log_path).cost == done.cost


def test_a_budget_for_a_model_with_no_price_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ruizn.ConfigError, match="no known price for model function"):
        ruizn.Agent(lambda request: "hi", workspace=tmp_path, max_cost=1.0).run("hi")
    result = ruizn.Agent(lambda request: "hi", workspace=tmp_path).run("hi")
    assert result.cost is None
