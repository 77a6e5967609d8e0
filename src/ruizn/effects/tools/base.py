"""Tools: what a tool is, the registry, and `invoke_tool`, which never raises.

Every way a tool call can go wrong becomes a `ToolResult(is_error=True, error_type=...)` the
model reads and can react to. The one thing that is never turned into a result is
cancellation: Ctrl-C must stop the run, not be reported to the model as a tool error.
"""

from __future__ import annotations

import abc
import contextlib
import json
import math
import queue
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
import jsonschema
import jsonschema.exceptions

from ruizn.defaults import DEFAULT_TOOL_TIMEOUT
from ruizn.media import Image, returned
from ruizn.state import ErrorType, JsonObject, ToolCall, ToolResult

# Error text is for the model: a line or two. jsonschema quotes the offending value whole,
# and a model can send a 100 KB string where a number belongs.
_MAX_ERROR_CHARS = 300

T = TypeVar("T")
# Whether a call needs the user's approval: a fixed answer, or one that depends on the input.
ApprovalPolicy = bool | Callable[[JsonObject], bool]


class ToolInputError(Exception):
    """Raised by a tool for input its JSON schema cannot rule out."""


class BaseTool(abc.ABC):
    name: ClassVar[str]
    description: ClassVar[str]
    input_schema: ClassVar[JsonObject]
    # Safe to run again after a crash interrupted it (resume re-runs these).
    read_only: ClassVar[bool] = False
    # Not read-only, yet safe to run again after a crash: the call goes on with what it
    # started rather than doing it twice (the `agent` tool resumes its child run).
    resumes: ClassVar[bool] = False
    # Also a class attribute, so a subclass with its own __init__ still has one.
    timeout: float = DEFAULT_TOOL_TIMEOUT
    # A timeout the tool chose itself (`@ruizn.tool(timeout=...)`, an MCP server's config):
    # it wins over the run's `tool_timeout`. None: the run's applies (see ToolRegistry).
    own_timeout: float | None = None
    # Runs alone, as a barrier between the calls of a turn, when calls run concurrently.
    sequential: bool = False
    # Ask the user before each call (or before the calls the callable picks). A callable set
    # at class level must be a staticmethod, or Python binds it as a method.
    needs_approval: ApprovalPolicy = False

    def __init__(self, *, timeout: float = DEFAULT_TOOL_TIMEOUT) -> None:
        self.timeout = timeout

    @abc.abstractmethod
    async def invoke(self, input: JsonObject) -> ToolResult | str | Image:
        """Do the work; a str is ok content, an `Image` (or a list of text and images) an
        image the model sees."""

    def approval_required(self, input: JsonObject) -> bool:
        """Whether this call of the tool needs the user's approval before it runs."""
        policy = self.needs_approval
        return bool(policy(input)) if callable(policy) else bool(policy)

    def schema(self) -> JsonObject:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }


class BlockingTool(BaseTool):
    """A tool whose work is blocking code, run in a thread of its own.

    The thread is abandoned on timeout or cancellation, so a hang in blocking code still
    ends the call for the model and the event loop keeps streaming meanwhile. It is a daemon
    thread: anyio's worker threads are not, and an abandoned one would keep the process
    alive after the run ended.
    """

    # True when `run` is known to be short (read_file on a local file system, see
    # effects/tools/mounts.py): it runs on the loop, without the thread's hand-over.
    in_place: bool = False

    @abc.abstractmethod
    def run(self, input: JsonObject) -> ToolResult | str | Image:
        """The blocking work."""

    async def invoke(self, input: JsonObject) -> ToolResult | str | Image:
        if self.in_place:
            return self.run(input)
        return await run_blocking(lambda: self.run(input), name=f"tool-{self.name}")


async def run_blocking(work: Callable[[], T], *, name: str) -> T:
    """Run `work()` in a daemon thread and wait for it without blocking the loop.

    Cancelling the wait abandons the thread (see BlockingTool); its exception, if any, is
    raised here. Threads are reused (starting one costs more than most tool calls), and a
    busy one is named `name`, an idle one `_IDLE_NAME`.
    """
    done = anyio.Event()
    token = anyio.lowlevel.current_token()
    outcome: list[T] = []
    failure: list[BaseException] = []

    def job() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:  # handed to the event loop, which re-raises it
            failure.append(exc)
        finally:
            # Idle before the loop hears of it: a caller that looks right after sees no
            # thread still working for it.
            threading.current_thread().name = _IDLE_NAME
            # The loop may be gone if the call was abandoned and the run has ended.
            with contextlib.suppress(RuntimeError):
                _call_soon(token, done.set)

    _THREADS.submit(job, name)
    await done.wait()
    if failure:
        raise failure[0]
    return outcome[0]


_IDLE_NAME = "ruizn-idle-worker"


def _call_soon(token: anyio.lowlevel.EventLoopToken, func: Callable[[], object]) -> None:
    """Schedule `func` on the token's event loop and return at once.

    `anyio.from_thread.run_sync` would block the thread until the loop has run `func`: a
    second hand-over of the GIL on every tool call (about 0.2 ms a call). Both native loops
    have a thread-safe "call soon": asyncio's `call_soon_threadsafe`, trio's
    `TrioToken.run_sync_soon`; each raises a RuntimeError once its loop is gone.
    """
    native = token.native_token
    soon = getattr(native, "call_soon_threadsafe", None) or getattr(native, "run_sync_soon", None)
    if soon is None:  # a backend with neither: the blocking call, which always works
        anyio.from_thread.run_sync(func, token=token)
    else:
        soon(func)


class _DaemonThreads:
    """Reusable daemon threads for blocking tools.

    Not a ThreadPoolExecutor: its threads are joined at exit, so one stuck in a hung tool
    would keep the process alive. Here an abandoned thread stays busy until its work ends
    (then idles again, or exits if enough are idle), and never holds the process open.
    """

    _MAX_IDLE = 8

    def __init__(self) -> None:
        self._idle: list[queue.SimpleQueue[tuple[Callable[[], None], str]]] = []
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], None], name: str) -> None:
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), name=name, daemon=True).start()
        inbox.put((job, name))

    def _serve(self, inbox: queue.SimpleQueue[tuple[Callable[[], None], str]]) -> None:
        while True:
            job, name = inbox.get()
            threading.current_thread().name = name
            job()
            with self._lock:
                if len(self._idle) >= self._MAX_IDLE:
                    return
                self._idle.append(inbox)


_THREADS = _DaemonThreads()


# Schemas already checked against their metaschema in this process, by their JSON text: a
# fleet worker builds a registry for every run it takes, of the same tools each time.
_CHECKED: set[tuple[str, str]] = set()


def _check_schema(validator_class: Any, schema: JsonObject) -> None:
    try:
        key = (validator_class.__name__, json.dumps(schema, sort_keys=True))
    except (TypeError, ValueError):  # not JSON text at all: the check says what is wrong
        validator_class.check_schema(schema)
        return
    if key not in _CHECKED:
        validator_class.check_schema(schema)
        _CHECKED.add(key)


class ToolRegistry:
    def __init__(self, tools: Iterable[BaseTool], *, timeout: float | None = None) -> None:
        """`timeout`: the run's tool_timeout, for every tool that did not choose its own
        (None: each tool's `timeout`)."""
        self.timeout = timeout
        self._tools: dict[str, BaseTool] = {}
        self._validators: dict[str, jsonschema.protocols.Validator] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"two tools are named {tool.name!r}")
            self._tools[tool.name] = tool
            validator_class = jsonschema.validators.validator_for(
                tool.input_schema, default=jsonschema.Draft202012Validator
            )
            _check_schema(validator_class, tool.input_schema)
            self._validators[tool.name] = validator_class(tool.input_schema)

    def get(self, name: str) -> BaseTool | None:
        return self._tools.get(name)

    def timeout_of(self, tool: BaseTool) -> float:
        """Seconds a call of `tool` may take: its own choice, else the run's, else its own
        default."""
        if tool.own_timeout is not None:
            return tool.own_timeout
        return tool.timeout if self.timeout is None else self.timeout

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def tool_schemas(self) -> tuple[JsonObject, ...]:
        return tuple(tool.schema() for tool in self._tools.values())

    def validation_error(self, name: str, tool_input: Any) -> str | None:
        """Why `tool_input` does not fit the tool's schema, or None if it does."""
        try:
            errors = self._validators[name].iter_errors(tool_input)
            error = jsonschema.exceptions.best_match(errors)
        except Exception as exc:  # a RecursionError quoting an input nested a thousand deep
            return f"invalid input for {name}: it could not be checked ({type(exc).__name__})"
        if error is None:
            return None
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
        location = f" at {where.lstrip('.')}" if where else ""
        return f"invalid input for {name}{location}: {error.message}"

    def __iter__(self) -> Iterator[BaseTool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)


async def invoke_tool(registry: ToolRegistry, call: ToolCall) -> ToolResult:
    tool = registry.get(call.name)
    if tool is None:
        known = ", ".join(registry.names) or "none"
        # Shorten only the name the model made up: every known name must stay in the list.
        return ToolResult.error(
            ErrorType.UNKNOWN_TOOL,
            f"unknown tool {_clip(repr(call.name), 100)}; the tools are: {known}",
        )
    problem = registry.validation_error(call.name, call.input)
    if problem is not None:
        return _error(ErrorType.INVALID_INPUT, problem)
    # A deadline scope rather than fail_after: fail_after turns our limit into TimeoutError,
    # which could not be told apart from a TimeoutError the tool raised (a socket's, say).
    seconds = registry.timeout_of(tool)
    limit = anyio.CancelScope(deadline=anyio.current_time() + seconds)
    try:
        with limit:
            outcome = await tool.invoke(call.input)
    except Exception as exc:  # the model should hear of any tool failure; cancellation is not one
        if limit.cancel_called:  # the tool turned our cancellation into an error of its own
            return _timed_out(call.name, seconds)
        return _failure(call.name, exc)
    if limit.cancelled_caught:
        return _timed_out(call.name, seconds)
    if isinstance(outcome, str):
        return ToolResult.ok(outcome)
    if isinstance(outcome, ToolResult):
        return outcome
    content = returned(outcome)
    if content is not None:
        return ToolResult.ok(content)
    return _error(
        ErrorType.RUNTIME_ERROR,
        f"{call.name} returned {type(outcome).__name__}, not text, an Image or a ToolResult",
    )


def _failure(name: str, exc: Exception) -> ToolResult:
    match exc:
        case TimeoutError():  # the tool's own, not our limit: say what it was
            return _error(ErrorType.TIMEOUT, f"{name}: {_describe(exc)}")
        case PermissionError():
            return _error(ErrorType.PERMISSION_ERROR, _reason(exc))
        case FileNotFoundError():
            return _error(ErrorType.NOT_FOUND, _reason(exc))
        case ToolInputError():
            return _error(ErrorType.INVALID_INPUT, _text(exc) or "invalid input")
        case _:
            return _error(ErrorType.RUNTIME_ERROR, _describe(exc))


def _timed_out(name: str, timeout: float) -> ToolResult:
    return _error(ErrorType.TIMEOUT, f"{name} timed out after {_seconds(timeout)}")


def _error(error_type: ErrorType, content: str) -> ToolResult:
    return ToolResult.error(error_type, _clip(content, _MAX_ERROR_CHARS))


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    # Elide the middle: the start says where, the end says what is wrong with it.
    half = (limit - 5) // 2
    return f"{text[:half]} ... {text[-half:]}"


def _reason(exc: OSError) -> str:
    if exc.strerror and exc.filename:
        return f"{exc.strerror}: {exc.filename}"
    return _text(exc) or type(exc).__name__


def _describe(exc: BaseException) -> str:
    text = _text(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a broken __str__ must not make invoke_tool raise
        return ""


def _seconds(timeout: float) -> str:
    return f"{int(timeout)}s" if math.isclose(timeout, round(timeout)) else f"{timeout:g}s"
