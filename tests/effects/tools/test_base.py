"""invoke_tool never raises (except cancellation): every failure is a result the model reads."""

from __future__ import annotations

import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import anyio
import jsonschema.exceptions
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ruizn.defaults import DEFAULT_TOOL_TIMEOUT
from ruizn.effects.tools.base import (
    BaseTool,
    BlockingTool,
    ToolInputError,
    ToolRegistry,
    invoke_tool,
)
from ruizn.effects.tools.read import ReadFileTool
from ruizn.state import ErrorType, JsonObject, ToolCall, ToolResult
from tests.conftest import run_python
from tests.effects.tools.conftest import ticking_while

pytestmark = pytest.mark.anyio

SCHEMA: JsonObject = {
    "type": "object",
    "properties": {"n": {"type": "number"}},
    "required": ["n"],
    "additionalProperties": False,
}


class Raising(BaseTool):
    """Raises the exception it was built with, or answers `n=<n>`."""

    name = "raising"
    description = "Raises what it is given."
    input_schema: ClassVar[JsonObject] = SCHEMA

    def __init__(self, exc: BaseException | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.exc = exc

    async def invoke(self, input: JsonObject) -> ToolResult | str:
        if self.exc is not None:
            raise self.exc
        return f"n={input['n']}"


class Sleepy(BaseTool):
    name = "sleepy"
    description = "Sleeps n seconds, cooperatively."
    input_schema: ClassVar[JsonObject] = SCHEMA

    async def invoke(self, input: JsonObject) -> ToolResult | str:
        await anyio.sleep(input["n"])
        return "woke"


class Stuck(BlockingTool):
    """Blocks its worker thread for n seconds, like time.sleep(n), without yielding.

    It waits on an Event rather than calling time.sleep so the test can end the abandoned
    thread at teardown instead of leaving it running for the rest of the session.
    """

    name = "stuck"
    description = "Blocks in its thread."
    input_schema: ClassVar[JsonObject] = SCHEMA

    def __init__(self, release: threading.Event, **kw: Any) -> None:
        super().__init__(**kw)
        self.release = release

    def run(self, input: JsonObject) -> ToolResult | str:
        self.release.wait(input["n"])
        return "unstuck"


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


async def _call(tool: BaseTool, tool_input: Any) -> ToolResult:
    return await invoke_tool(
        ToolRegistry([tool]), ToolCall(id="t", name=tool.name, input=tool_input)
    )


# --- results that pass through ----------------------------------------------------------------


async def test_str_content_becomes_an_ok_result() -> None:
    assert await _call(Raising(), {"n": 3}) == ToolResult.ok("n=3")


async def test_a_returned_tool_result_passes_through_unchanged() -> None:
    made = ToolResult(content="partial output", is_error=True, error_type="runtime_error")

    class Custom(Raising):
        async def invoke(self, input: JsonObject) -> ToolResult | str:
            return made

    assert await _call(Custom(), {"n": 1}) is made


# --- unknown tool and schema violations --------------------------------------------------------


async def test_unknown_tool_lists_the_known_ones() -> None:
    registry = ToolRegistry([Raising(), Sleepy()])
    result = await invoke_tool(registry, ToolCall(id="t", name="nope", input={}))
    assert result == ToolResult.error(
        ErrorType.UNKNOWN_TOOL,
        "unknown tool 'nope'; the tools are: raising, sleepy",
    )


async def test_unknown_tool_in_an_empty_registry_says_there_are_none() -> None:
    result = await invoke_tool(ToolRegistry([]), ToolCall(id="t", name="nope", input={}))
    assert result.error_type == "unknown_tool"
    assert result.content == "unknown tool 'nope'; the tools are: none"


async def test_missing_required_field_is_invalid_input_naming_it() -> None:
    result = await _call(Raising(), {})
    assert result.is_error
    assert result.error_type == "invalid_input"
    assert result.content == "invalid input for raising: 'n' is a required property"


async def test_wrong_type_names_the_field_and_the_problem() -> None:
    result = await _call(Raising(), {"n": "three"})
    assert result.error_type == "invalid_input"
    assert result.content == "invalid input for raising at n: 'three' is not of type 'number'"


async def test_wrong_type_deep_inside_names_the_nested_location() -> None:
    class Nested(Raising):
        name = "nested"
        input_schema: ClassVar[JsonObject] = {
            "type": "object",
            "properties": {
                "edits": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"line": {"type": "integer"}}},
                }
            },
        }

    result = await _call(Nested(), {"edits": [{"line": 1}, {"line": "two"}]})
    assert result.error_type == "invalid_input"
    assert (
        result.content
        == "invalid input for nested at edits[1].line: 'two' is not of type 'integer'"
    )


async def test_an_extra_property_is_refused_by_name() -> None:
    result = await _call(Raising(), {"n": 1, "rm": True})
    assert result.error_type == "invalid_input"
    assert "Additional properties are not allowed ('rm' was unexpected)" in result.content


async def test_a_non_object_input_is_invalid_input() -> None:
    result = await _call(Raising(), ["n", 1])
    assert result.error_type == "invalid_input"
    assert "is not of type 'object'" in result.content


async def test_input_nested_too_deep_to_check_is_invalid_input_not_a_crash() -> None:
    # jsonschema quotes the value in its message; repr of a list 5000 deep overflows the stack.
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    result = await _call(Raising(), {"n": deep})
    assert result == ToolResult.error(
        ErrorType.INVALID_INPUT,
        "invalid input for raising: it could not be checked (RecursionError)",
    )


async def test_a_huge_wrong_value_is_elided_to_a_short_message() -> None:
    result = await _call(Raising(), {"n": "y" * 100_000})
    assert result.error_type == "invalid_input"
    assert len(result.content) <= 300
    assert result.content.startswith("invalid input for raising at n: 'yyy")
    assert result.content.endswith("yyy' is not of type 'number'")
    assert " ... " in result.content


async def test_a_huge_unknown_name_is_elided_but_every_known_tool_is_listed() -> None:
    class Named(Raising):
        name = "tool_with_a_rather_long_name_" + "x" * 300

    registry = ToolRegistry([Named(), Sleepy()])
    result = await invoke_tool(registry, ToolCall(id="t", name="z" * 10_000, input={}))
    assert result.error_type == "unknown_tool"
    assert result.content.endswith(f"; the tools are: {Named.name}, sleepy")
    assert len(result.content) < 100 + len(f"unknown tool ; the tools are: {Named.name}, sleepy")


# --- timeouts ----------------------------------------------------------------------------------


async def test_async_tool_over_its_timeout_is_a_timeout_result() -> None:
    began = time.monotonic()
    result = await _call(Sleepy(timeout=0.3), {"n": 30})
    assert result == ToolResult(
        content="sleepy timed out after 0.3s", is_error=True, error_type="timeout"
    )
    assert time.monotonic() - began < 10  # the timeout, not the tool's 30 s


async def test_blocking_tool_stuck_in_its_thread_times_out_and_the_loop_keeps_running(
    release: threading.Event,
) -> None:
    began = time.monotonic()
    result, ticks = await ticking_while(lambda: _call(Stuck(release, timeout=0.3), {"n": 30}))
    elapsed = time.monotonic() - began
    assert result == ToolResult(
        content="stuck timed out after 0.3s", is_error=True, error_type="timeout"
    )
    assert elapsed < 10  # the timeout, not the tool's 30 s
    assert ticks >= 15  # ~30 in 0.3 s: the event loop was never blocked


def test_an_abandoned_blocking_tool_does_not_keep_the_process_alive() -> None:
    script = textwrap.dedent(
        """
        import time, anyio
        from ruizn.effects.tools.base import BlockingTool, ToolRegistry, invoke_tool
        from ruizn.state import ToolCall

        class Stuck(BlockingTool):
            name = "stuck"
            description = "d"
            input_schema = {"type": "object"}
            def run(self, input):
                time.sleep(10)
                return "x"

        async def main():
            call = ToolCall(id="t", name="stuck", input={})
            print((await invoke_tool(ToolRegistry([Stuck(timeout=0.1)]), call)).error_type)

        anyio.run(main)
        """
    )
    try:
        done = run_python("-c", script, timeout=2)
    except subprocess.TimeoutExpired:
        pytest.fail("the process was still alive 2 s after its run ended")
    assert done.stdout.strip() == "timeout"


async def test_a_tool_that_turns_the_cancellation_into_its_own_error_still_timed_out() -> None:
    class Wrapping(Sleepy):
        name = "wrapping"

        async def invoke(self, input: JsonObject) -> ToolResult | str:
            try:
                await anyio.sleep(input["n"])
            except anyio.get_cancelled_exc_class():
                raise RuntimeError("connection aborted") from None
            return "woke"

    result = await _call(Wrapping(timeout=0.1), {"n": 30})
    assert result == ToolResult.error(ErrorType.TIMEOUT, "wrapping timed out after 0.1s")


# --- exceptions raised by a tool ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "kind", "content"),
    [
        pytest.param(
            PermissionError(13, "Permission denied", "secret.txt"),
            "permission_error",
            "Permission denied: secret.txt",
            id="PermissionError",
        ),
        pytest.param(
            PermissionError("absolute paths are not allowed"),
            "permission_error",
            "absolute paths are not allowed",
            id="PermissionError-message-only",
        ),
        pytest.param(
            FileNotFoundError(2, "No such file or directory", "gone.txt"),
            "not_found",
            "No such file or directory: gone.txt",
            id="FileNotFoundError",
        ),
        pytest.param(FileNotFoundError(), "not_found", "FileNotFoundError", id="bare-FNF"),
        pytest.param(
            ToolInputError("n must be odd"), "invalid_input", "n must be odd", id="ToolInputError"
        ),
        pytest.param(ValueError("bad value"), "runtime_error", "ValueError: bad value", id="VE"),
        pytest.param(KeyError("k"), "runtime_error", "KeyError: 'k'", id="KeyError"),
        pytest.param(
            ExceptionGroup("several", [ValueError("a")]),
            "runtime_error",
            "ExceptionGroup: several (1 sub-exception)",
            id="ExceptionGroup",
        ),
    ],
)
async def test_exceptions_map_to_error_types(exc: Exception, kind: str, content: str) -> None:
    result = await _call(Raising(exc), {"n": 1})
    assert result == ToolResult(content=content, is_error=True, error_type=kind)


async def test_a_runtime_error_from_a_blocking_tool_names_the_exception_type() -> None:
    class Boom(BlockingTool):
        name = "boom"
        description = "Raises in its thread."
        input_schema: ClassVar[JsonObject] = SCHEMA

        def run(self, input: JsonObject) -> ToolResult | str:
            raise ZeroDivisionError("division by zero")

    result = await _call(Boom(), {"n": 1})
    assert result.error_type == "runtime_error"
    assert result.content == "ZeroDivisionError: division by zero"


async def test_a_timeout_error_raised_by_the_tool_does_not_claim_the_limit_elapsed() -> None:
    result = await _call(Raising(TimeoutError("connect timed out")), {"n": 1})
    assert result.is_error
    assert "after 10s" not in result.content


async def test_an_exception_whose_str_fails_is_still_a_runtime_error() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str for you")

    result = await _call(Raising(Broken()), {"n": 1})
    assert result == ToolResult.error(ErrorType.RUNTIME_ERROR, "Broken")


async def test_a_long_exception_message_is_elided() -> None:
    result = await _call(Raising(ValueError("v" * 10_000 + " the end")), {"n": 1})
    assert result.error_type == "runtime_error"
    assert len(result.content) <= 300
    assert result.content.startswith("ValueError: vvv")
    assert result.content.endswith("the end")


# --- cancellation ------------------------------------------------------------------------------


@pytest.mark.parametrize("blocking", [False, True], ids=["async", "blocking"])
async def test_cancellation_propagates_and_no_result_is_returned(
    blocking: bool, release: threading.Event
) -> None:
    tool: BaseTool = Stuck(release) if blocking else Sleepy()
    results: list[ToolResult] = []
    began = time.monotonic()
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:

            async def cancel_soon() -> None:
                await anyio.sleep(0.05)
                scope.cancel()

            group.start_soon(cancel_soon)
            results.append(await _call(tool, {"n": 30}))
    assert scope.cancelled_caught
    assert results == []
    assert time.monotonic() - began < 10  # the timeout, not the tool's 30 s


# --- registry ----------------------------------------------------------------------------------


def test_the_default_timeout_is_ten_seconds(tmp_path: Path) -> None:
    assert DEFAULT_TOOL_TIMEOUT == 10.0
    assert Sleepy().timeout == 10.0
    assert ReadFileTool(tmp_path).timeout == 10.0
    assert Sleepy(timeout=0.3).timeout == 0.3


def test_a_tool_with_its_own_init_still_has_the_default_timeout() -> None:
    class OwnInit(Sleepy):
        def __init__(self) -> None:  # does not call super().__init__
            self.ready = True

    tool = OwnInit()
    assert tool.timeout == 10.0
    tool.timeout = 0.3  # overridable per instance, as tests do
    assert tool.timeout == 0.3
    assert OwnInit.timeout == 10.0


def test_registry_rejects_duplicate_names() -> None:
    with pytest.raises(ValueError, match="two tools are named 'sleepy'"):
        ToolRegistry([Sleepy(), Raising(), Sleepy()])


def test_registry_rejects_an_invalid_schema() -> None:
    class Bad(Raising):
        name = "bad"
        input_schema: ClassVar[JsonObject] = {"type": "objekt"}

    with pytest.raises(jsonschema.exceptions.SchemaError):
        ToolRegistry([Bad()])


def test_tool_schemas_are_in_the_api_format_and_registration_order(
    tmp_path: Path, release: threading.Event
) -> None:
    tools: list[BaseTool] = [Sleepy(), ReadFileTool(tmp_path), Raising(), Stuck(release)]
    registry = ToolRegistry(tools)
    schemas = registry.tool_schemas()
    assert isinstance(schemas, tuple)
    assert schemas == tuple(
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in tools
    )
    assert [s["name"] for s in schemas] == ["sleepy", "read_file", "raising", "stuck"]
    assert registry.names == ("sleepy", "read_file", "raising", "stuck")
    assert len(registry) == 4
    assert list(registry) == tools


# --- property: read_file never raises, whatever the model sends -------------------------------

# Any text, lone surrogates included: JSON "\ud800" parses to one, so the model can send it.
_text = st.text(st.characters(exclude_categories=()), max_size=12)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
# Paths made of pieces that mean something here, and long names near the OS limits.
_path = st.lists(
    st.sampled_from(["a.txt", "sub", "..", ".", "", "loop", "\n", "x" * 255]) | _text,
    min_size=1,
    max_size=8,
).map("/".join)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    tool_input=st.one_of(
        st.fixed_dictionaries({"path": _json}),
        st.fixed_dictionaries({"path": _text}),
        st.fixed_dictionaries({"path": _path}),
        st.dictionaries(_text, _json, max_size=4),
        _json,  # not a dict at all: the provider would pass it on as it came
    )
)
def test_read_file_returns_a_result_and_never_raises_whatever_the_input(
    tmp_path: Path, tool_input: Any
) -> None:
    (tmp_path / "a.txt").write_text("hello")
    (tmp_path / "sub").mkdir(exist_ok=True)
    if not (tmp_path / "loop").is_symlink():
        (tmp_path / "loop").symlink_to("loop")
    registry = ToolRegistry([ReadFileTool(tmp_path)])

    async def call() -> ToolResult:
        with anyio.fail_after(5):
            return await invoke_tool(registry, ToolCall(id="t", name="read_file", input=tool_input))

    result = anyio.run(call)
    assert isinstance(result, ToolResult)
    well_formed = (
        isinstance(tool_input, dict)
        and set(tool_input) == {"path"}
        and isinstance(tool_input["path"], str)
    )
    if not well_formed:  # the schema refuses it before the tool runs
        assert result.error_type == "invalid_input"
        assert result.content.startswith("invalid input for read_file")
    if result.is_error:  # for the model: one short line
        assert "\n" not in result.content
        assert len(result.content) <= 300
    else:
        assert result.content == "hello"
