"""`@tool`: a typed Python function (plain or `async`) becomes a tool.

The input schema comes from the type hints through pydantic (a model is built from the
signature with `create_model`; pydantic writes the JSON schema), the descriptions from the
docstring (Google, NumPy or Sphinx style, read by `docstring_parser`). The same pydantic
model validates each call's input before the function runs, so the function gets the
types it declared: an Enum member, a nested model, a list of ints.

The decorated function stays a function: `add(2, 3)` still returns 5.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Awaitable, Callable
from typing import Any, Generic, ParamSpec, TypeVar, overload

import docstring_parser
import pydantic
import pydantic_core
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema

from ruizn.defaults import DEFAULT_TOOL_TIMEOUT
from ruizn.effects.tools.base import (
    ApprovalPolicy,
    BaseTool,
    ToolInputError,
    run_blocking,
)
from ruizn.media import returned
from ruizn.state import ErrorType, JsonObject, ToolResult

P = ParamSpec("P")
R = TypeVar("R")

# The Messages API's rule for tool names.
_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


class ToolDefinitionError(TypeError):
    """A function that cannot be a tool (a bad name, `*args`, a type with no JSON schema)."""


class _NoFieldTitles(GenerateJsonSchema):
    # pydantic titles every property after its name ("Path" for `path`): tokens that tell
    # the model nothing. Model and Enum titles in $defs stay: they name the type.
    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


class FunctionTool(BaseTool, Generic[P, R]):
    """A tool made from a function; calling it calls the function."""

    def __init__(
        self,
        func: Callable[P, R],
        *,
        name: str | None = None,
        description: str | None = None,
        read_only: bool = False,
        timeout: float | None = None,
        sequential: bool = False,
        needs_approval: ApprovalPolicy = False,
    ) -> None:
        if not callable(func):
            raise ToolDefinitionError(f"@tool needs a function, not {type(func).__name__}")
        # First, so nothing the function carries in its __dict__ overwrites the tool's own.
        functools.update_wrapper(self, func)
        super().__init__(timeout=DEFAULT_TOOL_TIMEOUT if timeout is None else timeout)
        # Given: it wins over the run's --tool-timeout; None: the run's applies.
        self.own_timeout = timeout
        self.func = func
        tool_name = name if name is not None else getattr(func, "__name__", "")
        if not _NAME.fullmatch(tool_name):
            raise ToolDefinitionError(
                f"{tool_name!r} is not a valid tool name (1-64 letters, digits, _ or -):"
                " give one with @tool(name=...)"
            )
        docs = docstring_parser.parse(inspect.getdoc(func) or "")
        # BaseTool declares these per class (one tool, one class); a function tool is one
        # instance per function, so they are set on the instance. Reads are the same.
        self.name = tool_name  # type: ignore[misc]
        self.description = (  # type: ignore[misc]
            description if description is not None else _description(docs)
        )
        self.read_only = read_only  # type: ignore[misc]
        self.sequential = sequential
        self.needs_approval = needs_approval
        self._signature = inspect.signature(func)
        # An object with an `async def __call__` is async too, though not a function.
        self._is_async = inspect.iscoroutinefunction(func) or inspect.iscoroutinefunction(
            type(func).__call__
        )
        self._model, self._fields = _input_model(func, tool_name, self._signature, docs)
        try:
            schema = self._model.model_json_schema(schema_generator=_NoFieldTitles)
        except pydantic.PydanticUserError as exc:
            raise ToolDefinitionError(f"tool {tool_name}: {_first_line(str(exc))}") from None
        schema.pop("title", None)
        self.input_schema = schema  # type: ignore[misc]

    @property
    def origin(self) -> str:
        """`module:qualname` of the function: where a resumed run can import it again."""
        module = getattr(self.func, "__module__", None) or "?"
        qualname = getattr(self.func, "__qualname__", None) or self.name
        return f"{module}:{qualname}"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.name} from {self.origin}>"

    async def invoke(self, input: JsonObject) -> ToolResult | str:
        args, kwargs = self._arguments(input)
        if self._is_async:
            value: Any = await typing.cast(Callable[..., Awaitable[Any]], self.func)(
                *args, **kwargs
            )
        else:
            value = await run_blocking(lambda: self.func(*args, **kwargs), name=f"tool-{self.name}")
        return self._result(value)

    def _arguments(self, input: JsonObject) -> tuple[list[Any], dict[str, Any]]:
        try:
            checked = self._model.model_validate(input)
        except pydantic.ValidationError as exc:
            raise ToolInputError(_validation_message(self.name, exc)) from None
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        given = checked.model_fields_set
        for field, param in self._fields.items():
            value = getattr(checked, field)
            if param.kind is inspect.Parameter.POSITIONAL_ONLY:
                args.append(value)
            elif field in given or param.default is inspect.Parameter.empty:
                kwargs[param.name] = value
            # else: left out, so the function's own default applies, as in a direct call.
        return args, kwargs

    def _result(self, value: object) -> ToolResult | str:
        if isinstance(value, str | ToolResult):
            return value
        content = returned(value)  # an Image, or a list of text and Images
        if content is not None:
            return ToolResult.ok(content)
        try:
            return pydantic_core.to_json(value).decode()
        except pydantic_core.PydanticSerializationError:
            return ToolResult.error(
                ErrorType.RUNTIME_ERROR,
                f"{self.name} returned a {type(value).__name__}, which is not text,"
                " an Image, a ToolResult or JSON-serialisable",
            )


@overload
def tool(func: Callable[P, R], /) -> FunctionTool[P, R]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = None,
    sequential: bool = False,
    needs_approval: ApprovalPolicy = False,
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...


def tool(
    func: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    timeout: float | None = None,
    sequential: bool = False,
    needs_approval: ApprovalPolicy = False,
) -> FunctionTool[P, R] | Callable[[Callable[P, R]], FunctionTool[P, R]]:
    """Make a tool of a function: `@tool` or `@tool(name=..., read_only=True, ...)`.

    Args:
        func: The function (when used bare).
        name: The tool's name; the function's name by default.
        description: What the tool does; the docstring's text by default.
        read_only: The tool changes nothing, so a resumed run may run it again.
        timeout: Seconds a call may take before it ends with `timeout`; it wins over the
            run's `tool_timeout` (--tool-timeout), which applies when it is not given.
        sequential: Run alone, never beside other calls of the same turn.
        needs_approval: Ask the user before a call: True, or a function of the input.
    """

    def wrap(f: Callable[P, R]) -> FunctionTool[P, R]:
        return FunctionTool(
            f,
            name=name,
            description=description,
            read_only=read_only,
            timeout=timeout,
            sequential=sequential,
            needs_approval=needs_approval,
        )

    return wrap if func is None else wrap(func)


def _description(docs: docstring_parser.Docstring) -> str:
    parts = [docs.short_description, docs.long_description]
    return "\n\n".join(part.strip() for part in parts if part and part.strip())


def _input_model(
    func: Callable[..., Any],
    tool_name: str,
    signature: inspect.Signature,
    docs: docstring_parser.Docstring,
) -> tuple[type[pydantic.BaseModel], dict[str, inspect.Parameter]]:
    """The pydantic model of the function's parameters, and its field -> parameter map.

    Fields are named p0, p1... and carry the parameter's name as their alias, so a
    parameter may be called anything (`schema`, `model_config`, `json`) without clashing
    with BaseModel's own attributes.
    """
    try:
        hints = typing.get_type_hints(_annotated(func), include_extras=True)
    except Exception as exc:  # a NameError for a type defined where the hints cannot see it
        raise ToolDefinitionError(
            f"tool {tool_name}: cannot read the type hints ({type(exc).__name__}: {exc})"
        ) from None
    described = {p.arg_name: p.description for p in docs.params if p.description}
    fields: dict[str, Any] = {}
    params: dict[str, inspect.Parameter] = {}
    for index, param in enumerate(signature.parameters.values()):
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"tool {tool_name}: *{param.name} or **{param.name} cannot be a tool"
                " parameter; name each one"
            )
        annotation = hints.get(param.name, Any)
        extra: dict[str, Any] = {"alias": param.name}
        if param.name in described and not _has_description(annotation, param.default):
            extra["description"] = described[param.name]
        if isinstance(param.default, FieldInfo):  # `x: int = Field(3, ge=0)`, as pydantic allows
            info = FieldInfo.merge_field_infos(param.default, pydantic.Field(**extra))
        elif param.default is inspect.Parameter.empty:
            info = pydantic.Field(**extra)
        else:
            info = pydantic.Field(default=param.default, **extra)
        field = f"p{index}"
        fields[field] = (annotation, info)
        params[field] = param
    try:
        model = pydantic.create_model(
            f"{tool_name}_input",
            __config__=pydantic.ConfigDict(extra="forbid"),
            **fields,
        )
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError) as exc:
        raise ToolDefinitionError(f"tool {tool_name}: {_first_line(str(exc))}") from None
    return model, params


def _annotated(func: Callable[..., Any]) -> Callable[..., Any]:
    """What carries the hints: a partial's function, a callable object's `__call__`."""
    if inspect.isfunction(func) or inspect.ismethod(func):
        return func
    if isinstance(func, functools.partial):
        return _annotated(func.func)
    return type(func).__call__


def _has_description(annotation: Any, default: Any) -> bool:
    """An explicit `Field(description=...)` wins over the docstring."""
    infos = [default] if isinstance(default, FieldInfo) else []
    if typing.get_origin(annotation) is typing.Annotated:
        infos += [m for m in annotation.__metadata__ if isinstance(m, FieldInfo)]
    return any(info.description for info in infos)


def _validation_message(name: str, exc: pydantic.ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False)
    first = errors[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
    location = f" at {where.lstrip('.')}" if where else ""
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"invalid input for {name}{location}: {first['msg']}{more}"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
