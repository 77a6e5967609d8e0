"""invoke_tool never raises (except cancellation): every failure is a result the model reads."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ruizn.effects.read_file import ReadFileTool
from ruizn.effects.tools import (
    DEFAULT_TIMEOUT,
    BaseTool,
    BlockingTool,
    ToolInputError,
    ToolRegistry,
    invoke_tool,
)
from ruizn.state import ToolCall, ToolResult

pytestmark = pytest.mark.anyio

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}


class Raising(BaseTool):
    name = "raising"
    description = "Raises what it is given."
    input_schema = SCHEMA

    def __init__(self, exc: BaseException | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.exc = exc

    async def invoke(self, input: dict[str, Any]) -> ToolResult | str:
        if self.exc is not None:
            raise self.exc
        return f"n={input['n']}"


class Sleepy(BaseTool):
    name = "sleepy"
    description = "Sleeps."
    input_schema = SCHEMA

    async def invoke(self, input: dict[str, Any]) -> ToolResult | str:
        await anyio.sleep(input["n"])
        return "woke"


class Stuck(BlockingTool):
    name = "stuck"
    description = "Blocks in time.sleep."
    input_schema = SCHEMA

    def run(self, input: dict[str, Any]) -> ToolResult | str:
        time.sleep(input["n"])
        return "unstuck"


async def _call(tool: BaseTool, tool_input: Any) -> ToolResult:
    return await invoke_tool(
        ToolRegistry([tool]), ToolCall(id="t", name=tool.name, input=tool_input)
    )


async def test_ok_content_is_returned() -> None:
    assert await _call(Raising(), {"n": 3}) == ToolResult.ok("n=3")


async def test_unknown_tool_lists_the_known_ones() -> None:
    result = await invoke_tool(
        ToolRegistry([Raising(), Sleepy()]), ToolCall(id="t", name="nope", input={})
    )
    assert result.error_type == "unknown_tool"
    assert result.content == "unknown tool 'nope'; the tools are: raising, sleepy"


async def test_missing_required_field_is_invalid_input() -> None:
    result = await _call(Raising(), {})
    assert result.error_type == "invalid_input"
    assert "'n' is a required property" in result.content


async def test_wrong_type_names_the_field() -> None:
    result = await _call(Raising(), {"n": "three"})
    assert result.content == "invalid input for raising at n: 'three' is not of type 'integer'"


async def test_extra_property_is_refused() -> None:
    result = await _call(Raising(), {"n": 1, "rm": True})
    assert result.error_type == "invalid_input"
    assert "'rm'" in result.content


async def test_async_tool_over_its_timeout_times_out() -> None:
    result = await _call(Sleepy(timeout=0.2), {"n": 30})
    assert result == ToolResult(
        content="sleepy timed out after 0.2s", is_error=True, error_type="timeout"
    )


async def test_blocking_tool_stuck_in_sleep_times_out_and_the_loop_keeps_running() -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await anyio.sleep(0.01)

    began = time.monotonic()
    async with anyio.create_task_group() as group:
        group.start_soon(tick)
        result = await _call(Stuck(timeout=0.3), {"n": 30})
        group.cancel_scope.cancel()
    assert result.error_type == "timeout"
    assert time.monotonic() - began < 2
    assert ticks >= 10  # the event loop was not blocked


@pytest.mark.parametrize(
    ("exc", "kind", "says"),
    [
        (
            PermissionError(13, "Permission denied", "secret.txt"),
            "permission_error",
            "Permission denied: secret.txt",
        ),
        (FileNotFoundError(2, "No such file or directory", "gone.txt"), "not_found", "gone.txt"),
        (ToolInputError("n must be odd"), "invalid_input", "n must be odd"),
        (ValueError("bad value"), "runtime_error", "ValueError: bad value"),
        (TimeoutError(), "timeout", "timed out"),
    ],
)
async def test_exceptions_map_to_error_types(exc: Exception, kind: str, says: str) -> None:
    result = await _call(Raising(exc), {"n": 1})
    assert result.is_error
    assert result.error_type == kind
    assert says in result.content


async def test_a_returned_tool_result_passes_through() -> None:
    class Custom(Raising):
        async def invoke(self, input: dict[str, Any]) -> ToolResult | str:
            return ToolResult(content="partial", is_error=True, error_type="runtime_error")

    assert (await _call(Custom(), {"n": 1})).content == "partial"


async def test_cancellation_is_never_turned_into_a_result() -> None:
    results: list[ToolResult] = []
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:

            async def cancel_soon() -> None:
                await anyio.sleep(0.05)
                scope.cancel()

            group.start_soon(cancel_soon)
            results.append(await _call(Sleepy(), {"n": 30}))
    assert scope.cancelled_caught
    assert results == []


def test_default_timeout_is_ten_seconds() -> None:
    assert DEFAULT_TIMEOUT == 10.0
    assert Sleepy().timeout == 10.0


def test_registry_refuses_duplicate_names() -> None:
    with pytest.raises(ValueError, match="two tools are named 'sleepy'"):
        ToolRegistry([Sleepy(), Sleepy()])


def test_tool_schemas_are_in_api_format_and_registration_order(tmp_path: Any) -> None:
    registry = ToolRegistry([Sleepy(), ReadFileTool(tmp_path)])
    schemas = registry.tool_schemas()
    assert [s["name"] for s in schemas] == ["sleepy", "read_file"]
    assert all(set(s) == {"name", "description", "input_schema"} for s in schemas)
    assert schemas[1]["input_schema"]["required"] == ["path"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.one_of(
        st.dictionaries(st.text(), _json, max_size=4), st.fixed_dictionaries({"path": _json}), _json
    )
)
def test_read_file_never_raises_whatever_the_input(tmp_path: Any, tool_input: Any) -> None:
    (tmp_path / "a.txt").write_text("hello")
    registry = ToolRegistry([ReadFileTool(tmp_path)])

    async def call() -> ToolResult:
        return await invoke_tool(registry, ToolCall(id="t", name="read_file", input=tool_input))

    result = anyio.run(call)
    assert isinstance(result, ToolResult)
    assert result.is_error or isinstance(tool_input, dict)
