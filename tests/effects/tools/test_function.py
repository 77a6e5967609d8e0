"""`@tool`: a typed function becomes a tool whose schema, descriptions and input checks come
from its signature and docstring, and which runs through `invoke_tool` like any other."""

from __future__ import annotations

import datetime
import enum
import functools
import threading
from collections.abc import Iterator
from typing import Annotated, Any, Literal

import anyio
import anyio.lowlevel
import pydantic
import pytest

from ruizn.effects.tools.base import ToolInputError, ToolRegistry, invoke_tool
from ruizn.effects.tools.function import FunctionTool, ToolDefinitionError, tool
from ruizn.effects.tools.read import ReadFileTool
from ruizn.state import ErrorType, ToolCall, ToolResult
from tests.effects.tools.conftest import ticking_while

pytestmark = pytest.mark.anyio


class Colour(enum.Enum):
    """A paint colour."""

    RED = "red"
    BLUE = "blue"


class Point(pydantic.BaseModel):
    x: int
    y: int = 0


class Shape(pydantic.BaseModel):
    name: str
    corners: list[Point]


async def _call(t: FunctionTool[..., Any], tool_input: Any) -> ToolResult:
    return await invoke_tool(ToolRegistry([t]), ToolCall(id="t", name=t.name, input=tool_input))


# --- schema derivation ------------------------------------------------------------------------


def test_scalar_types_become_their_json_schema_types_all_required() -> None:
    @tool
    def f(count: int, ratio: float, label: str, flag: bool) -> str:
        """Scalars."""
        return ""

    assert f.input_schema == {
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "label": {"type": "string"},
            "flag": {"type": "boolean"},
        },
        "required": ["count", "ratio", "label", "flag"],
        "additionalProperties": False,
    }


def test_enum_literal_and_list_types() -> None:
    @tool
    def f(colour: Colour, mode: Literal["fast", "slow"], ids: list[int]) -> str:
        """Choices."""
        return ""

    schema = f.input_schema
    assert schema["properties"]["colour"] == {"$ref": "#/$defs/Colour"}
    assert schema["$defs"]["Colour"]["enum"] == ["red", "blue"]
    assert schema["properties"]["mode"] == {"type": "string", "enum": ["fast", "slow"]}
    assert schema["properties"]["ids"] == {"type": "array", "items": {"type": "integer"}}
    assert schema["required"] == ["colour", "mode", "ids"]


def test_optional_and_defaulted_parameters_are_not_required_and_show_their_default() -> None:
    @tool
    def f(path: str, must: int | None, limit: int = 10, owner: str | None = None) -> str:
        """Defaults."""
        return ""

    props = f.input_schema["properties"]
    assert props["limit"] == {"type": "integer", "default": 10}
    assert props["owner"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    # Optional without a default: may be null, but must be given.
    assert props["must"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert f.input_schema["required"] == ["path", "must"]


def test_nested_models_are_referenced_definitions() -> None:
    @tool
    def f(shape: Shape) -> str:
        """Nested."""
        return ""

    schema = f.input_schema
    assert schema["properties"]["shape"] == {"$ref": "#/$defs/Shape"}
    assert schema["$defs"]["Shape"]["properties"]["corners"] == {
        "type": "array",
        "items": {"$ref": "#/$defs/Point"},
    }
    assert schema["$defs"]["Point"]["required"] == ["x"]


def test_a_parameter_may_share_a_name_with_a_pydantic_model_attribute() -> None:
    @tool
    def f(schema: str, model_config: int, json: bool = False) -> str:
        """Awkward names."""
        return f"{schema}-{model_config}-{json}"

    assert list(f.input_schema["properties"]) == ["schema", "model_config", "json"]


async def test_a_parameter_named_like_a_pydantic_attribute_still_reaches_the_function() -> None:
    @tool
    def f(schema: str, model_config: int) -> str:
        """Awkward names."""
        return f"{schema}-{model_config}"

    assert await _call(f, {"schema": "s", "model_config": 3}) == ToolResult.ok("s-3")


def test_annotated_field_constraints_and_descriptions_reach_the_schema() -> None:
    @tool
    def f(
        n: Annotated[int, pydantic.Field(ge=1, le=9, description="From Field.")],
        m: int = pydantic.Field(default=2, ge=0),
    ) -> str:
        """Constraints.

        Args:
            n: From the docstring, which Field's own description overrides.
            m: From the docstring.
        """
        return ""

    props = f.input_schema["properties"]
    assert props["n"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 9,
        "description": "From Field.",
    }
    assert props["m"] == {
        "type": "integer",
        "minimum": 0,
        "default": 2,
        "description": "From the docstring.",
    }


GOOGLE = """Find files by pattern.

    Looks under the workspace only.

    Args:
        pattern: The glob pattern.
        limit: Most results to return.

    Returns:
        The paths, one a line.
    """
NUMPY = """Find files by pattern.

    Looks under the workspace only.

    Parameters
    ----------
    pattern : str
        The glob pattern.
    limit : int
        Most results to return.

    Returns
    -------
    str
        The paths, one a line.
    """
SPHINX = """Find files by pattern.

    Looks under the workspace only.

    :param pattern: The glob pattern.
    :param limit: Most results to return.
    :returns: The paths, one a line.
    """


@pytest.mark.parametrize("doc", [GOOGLE, NUMPY, SPHINX], ids=["google", "numpy", "sphinx"])
def test_descriptions_come_from_each_docstring_style(doc: str) -> None:
    def find(pattern: str, limit: int = 5) -> str:
        return ""

    find.__doc__ = doc
    made = tool(find)
    assert made.description == "Find files by pattern.\n\nLooks under the workspace only."
    props = made.input_schema["properties"]
    assert props["pattern"] == {"type": "string", "description": "The glob pattern."}
    assert props["limit"] == {
        "type": "integer",
        "default": 5,
        "description": "Most results to return.",
    }


def test_no_docstring_gives_an_empty_description_and_no_parameter_descriptions() -> None:
    @tool
    def bare(x: int) -> int:
        return x

    assert bare.description == ""
    assert bare.input_schema["properties"] == {"x": {"type": "integer"}}


def test_options_override_name_and_description_and_set_the_policies() -> None:
    @tool(
        name="plus",
        description="Adds.",
        read_only=True,
        timeout=3,
        sequential=True,
        needs_approval=lambda given: given["a"] > 10,
    )
    def add(a: int, b: int) -> int:
        """Not this text."""
        return a + b

    assert add.schema() == {
        "name": "plus",
        "description": "Adds.",
        "input_schema": add.input_schema,
    }
    assert (add.read_only, add.timeout, add.sequential) == (True, 3, True)
    assert add.approval_required({"a": 11, "b": 0})
    assert not add.approval_required({"a": 1, "b": 0})


def test_bare_decorator_keeps_todays_defaults() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    assert (add.name, add.read_only, add.timeout, add.sequential) == ("add", False, 10.0, False)
    assert not add.approval_required({"a": 1, "b": 2})


def test_base_tools_keep_todays_behaviour_for_the_new_attributes(tmp_path: Any) -> None:
    read_file = ReadFileTool(tmp_path)
    assert read_file.sequential is False
    assert read_file.approval_required({"path": "x"}) is False


def test_the_decorated_function_is_still_a_function() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    assert add(2, 3) == 5
    assert add.__name__ == "add"
    assert add.__doc__ == "Add two integers."
    assert add.origin == f"{__name__}:test_the_decorated_function_is_still_a_function.<locals>.add"


async def test_a_decorated_coroutine_function_is_still_awaitable() -> None:
    @tool
    async def double(n: int) -> int:
        """Double."""
        return 2 * n

    assert await double(4) == 8


def test_origin_names_module_and_qualname() -> None:
    assert module_level_tool.origin == f"{__name__}:module_level_tool"


@tool
def module_level_tool(n: int) -> int:
    """Echo n."""
    return n


# --- definition errors ------------------------------------------------------------------------


def test_star_args_cannot_be_tool_parameters() -> None:
    def f(*names: str) -> str:
        return ""

    with pytest.raises(ToolDefinitionError, match=r"^tool f: \*names or \*\*names cannot be"):
        tool(f)


def test_a_lambda_needs_a_name() -> None:
    with pytest.raises(ToolDefinitionError, match="'<lambda>' is not a valid tool name"):
        tool(lambda x: x)


def test_a_type_pydantic_cannot_describe_is_a_one_line_definition_error() -> None:
    class Opaque:
        pass

    def f(handle: Opaque) -> str:
        return ""

    with pytest.raises(ToolDefinitionError) as info:
        tool(f)
    assert str(info.value).startswith("tool f: ")
    assert "\n" not in str(info.value)


def test_a_hint_that_cannot_be_resolved_is_a_definition_error() -> None:
    def f(x: NoSuchType) -> str:  # type: ignore[name-defined]  # noqa: F821
        return ""

    with pytest.raises(
        ToolDefinitionError, match=r"tool f: cannot read the type hints \(NameError"
    ):
        tool(f)


# --- input validation -------------------------------------------------------------------------


def _ascending(values: list[int]) -> list[int]:
    if values != sorted(values):
        raise ValueError("steps must ascend")
    return values


@tool
def plan(
    when: datetime.date,
    colour: Colour,
    steps: Annotated[list[int], pydantic.AfterValidator(_ascending)],
    shape: Shape | None = None,
) -> dict[str, Any]:
    """Plan something."""
    return {"when": when, "colour": colour, "steps": steps, "shape": shape}


GOOD = {"when": "2026-12-03", "colour": "red", "steps": [1, 2]}


async def test_valid_input_reaches_the_function_as_the_declared_types() -> None:
    seen: list[tuple[object, ...]] = []

    @tool
    def f(when: datetime.date, colour: Colour, shape: Shape) -> str:
        """Typed."""
        seen.append((when, colour, shape))
        return "ok"

    given = {"when": "2026-12-03", "colour": "blue", "shape": {"name": "t", "corners": [{"x": 1}]}}
    assert await _call(f, given) == ToolResult.ok("ok")
    assert seen == [
        (datetime.date(2026, 12, 3), Colour.BLUE, Shape(name="t", corners=[Point(x=1)]))
    ]


async def test_a_missing_field_is_invalid_input_naming_it() -> None:
    result = await _call(plan, {"colour": "red", "steps": []})
    assert result == ToolResult.error(
        ErrorType.INVALID_INPUT, "invalid input for plan: 'when' is a required property"
    )


async def test_a_wrong_type_deep_in_a_nested_model_names_its_path() -> None:
    bad = {**GOOD, "shape": {"name": "t", "corners": [{"x": 1}, {"x": "two"}]}}
    result = await _call(plan, bad)
    assert result.error_type == "invalid_input"
    assert result.content.startswith("invalid input for plan at shape")
    assert "'two' is not of type 'integer'" in result.content


async def test_an_unknown_argument_is_refused_by_name() -> None:
    result = await _call(plan, {**GOOD, "rm": True})
    assert result.error_type == "invalid_input"
    assert "'rm' was unexpected" in result.content


async def test_what_only_pydantic_can_check_is_invalid_input_naming_field_and_problem() -> None:
    # The JSON schema says "a string in date format"; jsonschema does not check formats.
    result = await _call(plan, {**GOOD, "when": "someday"})
    assert result.error_type == "invalid_input"
    assert result.content.startswith("invalid input for plan at when: Input should be a valid date")
    assert "\n" not in result.content
    # A validator of the user's own.
    result = await _call(plan, {**GOOD, "steps": [3, 1]})
    assert result == ToolResult.error(
        ErrorType.INVALID_INPUT, "invalid input for plan at steps: Value error, steps must ascend"
    )


async def test_the_function_model_checks_input_even_without_the_registry() -> None:
    with pytest.raises(ToolInputError) as info:
        await plan.invoke({"when": "2026-12-03", "colour": "green", "steps": "x"})
    assert str(info.value) == (
        "invalid input for plan at colour: Input should be 'red' or 'blue' (and 1 more)"
    )


async def test_a_left_out_default_is_the_functions_own_default() -> None:
    calls: list[tuple[int, list[int] | None]] = []

    @tool
    def f(n: int = 7, into: list[int] | None = None) -> str:
        """Defaults."""
        calls.append((n, into))
        return "ok"

    await _call(f, {})
    await _call(f, {"n": 1, "into": None})
    assert calls == [(7, None), (1, None)]


async def test_positional_only_parameters_are_passed_by_position() -> None:
    @tool
    def f(a: int, /, b: int) -> int:
        """Positional."""
        return a * 10 + b

    assert await _call(f, {"a": 1, "b": 2}) == ToolResult.ok("12")


# --- results ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "content"),
    [
        ("plain text", "plain text"),
        (5, "5"),
        (2.5, "2.5"),
        (True, "true"),
        (None, "null"),
        ({"b": [1, 2], "é": "ü"}, '{"b":[1,2],"é":"ü"}'),
        ([Point(x=1)], '[{"x":1,"y":0}]'),
        (Colour.RED, '"red"'),
    ],
)
async def test_a_json_serialisable_return_value_is_sent_as_json_text(
    value: object, content: str
) -> None:
    @tool
    def f() -> object:
        """Give the value."""
        return value

    assert await _call(f, {}) == ToolResult.ok(content)


async def test_a_returned_tool_result_passes_through() -> None:
    made = ToolResult.error(ErrorType.NOT_FOUND, "nothing here")

    @tool
    def f() -> ToolResult:
        """Give a result."""
        return made

    assert await _call(f, {}) is made


async def test_a_value_that_is_not_json_is_a_runtime_error_naming_its_type() -> None:
    class Handle:
        pass

    @tool
    def f() -> object:
        """Give a handle."""
        return Handle()

    assert await _call(f, {}) == ToolResult.error(
        ErrorType.RUNTIME_ERROR,
        "f returned a Handle, which is not text, an Image, a ToolResult or JSON-serialisable",
    )


# --- running: async, blocking, raising --------------------------------------------------------


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


async def test_an_async_tool_runs_on_the_event_loop() -> None:
    threads: list[threading.Thread] = []

    @tool
    async def f(n: int) -> str:
        """Sleep a little."""
        threads.append(threading.current_thread())
        await anyio.lowlevel.checkpoint()
        return f"slept {n}"

    assert await _call(f, {"n": 1}) == ToolResult.ok("slept 1")
    assert threads == [threading.current_thread()]


async def test_a_blocking_tool_runs_off_the_loop_which_keeps_running(
    release: threading.Event,
) -> None:
    threads: list[threading.Thread] = []

    @tool
    def wait(seconds: float) -> str:
        """Block."""
        threads.append(threading.current_thread())
        release.wait(seconds)
        return "done"

    result, ticks = await ticking_while(lambda: _call(wait, {"seconds": 0.3}))
    assert result == ToolResult.ok("done")
    assert threads[0] is not threading.current_thread()
    assert threads[0].daemon
    assert ticks >= 5  # the loop went on while the function blocked


async def test_a_stuck_blocking_tool_times_out(release: threading.Event) -> None:
    @tool(timeout=0.2)
    def stuck() -> str:
        """Block for long."""
        release.wait(30)
        return "never seen"

    assert await _call(stuck, {}) == ToolResult.error(
        ErrorType.TIMEOUT, "stuck timed out after 0.2s"
    )


async def test_a_slow_async_tool_times_out() -> None:
    @tool(timeout=0.1)
    async def slow() -> str:
        """Sleep for long."""
        await anyio.sleep(30)
        return "never seen"

    assert await _call(slow, {}) == ToolResult.error(ErrorType.TIMEOUT, "slow timed out after 0.1s")


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (
            ValueError("bad value"),
            ToolResult.error(ErrorType.RUNTIME_ERROR, "ValueError: bad value"),
        ),
        (ToolInputError("n too big"), ToolResult.error(ErrorType.INVALID_INPUT, "n too big")),
        (
            FileNotFoundError(2, "no such file", "a.txt"),
            ToolResult.error(ErrorType.NOT_FOUND, "no such file: a.txt"),
        ),
    ],
)
async def test_a_raising_tool_becomes_an_error_result(
    is_async: bool, exc: Exception, expected: ToolResult
) -> None:
    if is_async:

        async def boom() -> str:
            raise exc

        made: FunctionTool[..., Any] = tool(boom)
    else:

        def boom_sync() -> str:
            raise exc

        made = tool(name="boom")(boom_sync)
    assert await _call(made, {}) == expected


async def test_cancellation_of_an_async_tool_is_not_turned_into_a_result() -> None:
    started = anyio.Event()

    @tool
    async def hang() -> str:
        """Hang."""
        started.set()
        await anyio.sleep(30)
        return "never"

    results: list[ToolResult] = []
    async with anyio.create_task_group() as group:

        async def run() -> None:
            results.append(await _call(hang, {}))

        group.start_soon(run)
        await started.wait()
        group.cancel_scope.cancel()
    assert results == []


async def test_an_object_with_an_async_call_runs_on_the_loop() -> None:
    class Greeter:
        """Greet someone."""

        __name__ = "greet"

        async def __call__(self, who: str) -> str:
            await anyio.lowlevel.checkpoint()
            return f"hello {who}"

    greet = tool(Greeter())
    assert await _call(greet, {"who": "ann"}) == ToolResult.ok("hello ann")


async def test_a_partial_keeps_the_hints_of_what_it_has_not_bound() -> None:
    def scale(factor: int, n: int) -> int:
        """Scale n."""
        return factor * n

    triple = tool(name="triple")(functools.partial(scale, 3))
    assert triple.input_schema["properties"] == {"n": {"type": "integer"}}
    assert await _call(triple, {"n": 4}) == ToolResult.ok("12")
