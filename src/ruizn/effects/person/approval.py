"""Who answers when a tool call needs approval: a person at the terminal, or a callback.

The core decides *which* calls need a decision and what the run's rules decide on their own
(`ruizn.decide`); an `Approver` is asked about the rest, one call at a time, and returns an
`Answer`, or None when nobody can answer (the run then stops `awaiting_approval`, with the
call still waiting in the log). The runner logs each answer as `tool_approval_decided` by
"user".

- `TerminalApprover` shows the call (for a tool with `preview(input)`, such as write_file and
  edit_file, the unified diff of what would change) and reads `y`, `n` (optionally followed
  by a reason: `n not that file`) or `a` (approve this tool for the rest of the run). The
  line is read in a daemon thread, so the event loop keeps running and Ctrl-C (SIGINT)
  cancels the run at the prompt; end of input is "no answer".
- `CallbackApprover` wraps the library's `Agent(approve=...)`: a function, sync or async, of
  the `ToolCall`, returning a bool, `(bool, reason)` or an `Answer`. A sync one runs in a
  thread of its own, so it may block (ask someone).
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Awaitable, Callable
from typing import Protocol, TextIO

from attrs import frozen

from ruizn.effects.tools.base import BaseTool, ToolRegistry, run_blocking
from ruizn.state import JsonObject, ToolCall
from ruizn.terminal import revealed


@frozen(kw_only=True)
class Answer:
    approved: bool
    reason: str | None = None
    # Approve every later call of this tool for the rest of the run (`a` at the prompt).
    always: bool = False


class Approver(Protocol):
    async def __call__(self, call: ToolCall, tool: BaseTool | None) -> Answer | None:
        """The decision about `call` (whose tool is `tool`), or None: nobody can answer."""
        ...


def needs_approval_of(registry: ToolRegistry) -> Callable[[str, JsonObject], bool]:
    """Whether a call must be approved before it runs, as its tool says
    (`BaseTool.approval_required`); the `needs_approval` that `ruizn.decide` takes.

    A call that cannot run anyway (an unknown tool, input its schema refuses) is not put to a
    person: it is answered with its error. A tool's own policy that fails counts as "yes"."""

    def needs_approval(name: str, input: JsonObject) -> bool:
        tool = registry.get(name)
        if tool is None:
            return False
        try:
            required = tool.approval_required(input)
        except Exception:  # a broken policy must not let a call through unasked
            required = True
        # The policy first: most tools never ask, and their calls should not pay for a
        # second schema check (invoke_tool makes the first).
        return required and registry.validation_error(name, input) is None

    return needs_approval


ApproveResult = bool | tuple[bool, str | None] | Answer
ApproveFunction = Callable[[ToolCall], ApproveResult | Awaitable[ApproveResult]]


class ApproveCallbackError(TypeError):
    """`Agent(approve=...)` returned something that is not a decision."""


class CallbackApprover:
    def __init__(self, function: ApproveFunction) -> None:
        self._function = function
        self._is_async = inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
            getattr(function, "__call__", None)  # noqa: B004 - an object with async __call__
        )

    async def __call__(self, call: ToolCall, tool: BaseTool | None) -> Answer | None:
        if self._is_async:
            outcome = self._function(call)
        else:
            outcome = await run_blocking(lambda: self._function(call), name="ruizn-approve")
        if inspect.isawaitable(outcome):
            outcome = await outcome
        return as_answer(outcome)


def as_answer(outcome: object) -> Answer:
    """A callback's decision as an Answer; anything else is a typed error naming it."""
    match outcome:
        case Answer():
            return outcome
        case bool():
            return Answer(approved=outcome)
        case (bool() as approved, str() | None as reason):
            return Answer(approved=approved, reason=reason or None)
        case _:
            raise ApproveCallbackError(
                f"approve returned {type(outcome).__name__}; it must return a bool,"
                " (bool, reason) or an Answer"
            )


_MAX_INPUT_SHOWN = 4000
_GREEN, _RED, _BOLD, _RESET = "\x1b[32m", "\x1b[31m", "\x1b[1m", "\x1b[0m"
PROMPT = "approve? [y]es · [n]o (n REASON says why) · [a]lways {name} this run: "


class TerminalApprover:
    """Asks the person at the terminal (`out` and the descriptor `in_fd` are a terminal)."""

    def __init__(self, out: TextIO, *, in_fd: int = 0, color: bool = False) -> None:
        self._out = out
        self._in_fd = in_fd
        self._color = color

    async def __call__(self, call: ToolCall, tool: BaseTool | None) -> Answer | None:
        shown = await self._show(call, tool)
        self._write(shown + PROMPT.format(name=revealed(call.name)))
        while True:
            line = await run_blocking(lambda: read_line(self._in_fd), name="ruizn-prompt")
            if line is None:
                self._write("\n[approval] no answer (end of input): the call stays waiting\n")
                return None
            answer = parse_answer(line)
            if answer is not None:
                return answer
            self._write("please answer y, n (or n REASON) or a: ")

    async def _show(self, call: ToolCall, tool: BaseTool | None) -> str:
        head = f"[approval] {revealed(call.name)} · {revealed(call.id)}"
        head = f"{_BOLD}{head}{_RESET}" if self._color else head
        preview = getattr(tool, "preview", None)
        if callable(preview):
            try:
                # preview reads the workspace (blocking I/O): off the event loop.
                body = await run_blocking(lambda: str(preview(call.input)), name="ruizn-preview")
            except Exception as exc:  # the call will fail the same way if it runs
                body = f"(no preview: {exc})\n"
            return f"{head}\n{self._diff(body)}"
        # By the tool, not the call's name: a subagent's call is shown under its agent's name.
        name = tool.name if tool is not None else call.name
        command = call.input.get("command") if name == "bash" else None
        if isinstance(command, str):
            # The command as it would run, every control, invisible and filler character
            # shown escaped (a hidden \r, escape sequence or zero-width space could make it
            # look like another command).
            shown = command if len(command) <= _MAX_INPUT_SHOWN else command[:_MAX_INPUT_SHOWN]
            more = {k: v for k, v in call.input.items() if k != "command"}
            extra = f"  {json.dumps(more)}" if more else ""
            cut = "\n[... command cut for the prompt]" if len(command) > _MAX_INPUT_SHOWN else ""
            lines = "\n  ".join(revealed(line) for line in shown.split("\n"))
            return f"{head}\n$ {lines}{cut}{revealed(extra)}\n"
        text = json.dumps(call.input, ensure_ascii=False, indent=2)
        if len(text) > _MAX_INPUT_SHOWN:
            text = text[:_MAX_INPUT_SHOWN] + "\n[... input cut for the prompt]"
        return f"{head}\n{revealed(text)}\n"

    def _diff(self, text: str) -> str:
        """The diff made safe to show (a file may hold escape codes), in colour if on."""
        lines = revealed(text).splitlines(keepends=True)
        if not self._color:
            return "".join(lines) if text.endswith("\n") else "".join(lines) + "\n"
        painted = []
        for line in lines:
            body = line.rstrip("\n")
            if body.startswith("+") and not body.startswith("+++"):
                body = f"{_GREEN}{body}{_RESET}"
            elif body.startswith("-") and not body.startswith("---"):
                body = f"{_RED}{body}{_RESET}"
            painted.append(body + "\n")
        return "".join(painted)

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()


def read_line(fd: int) -> str | None:
    """One line from `fd` (a terminal in canonical mode gives one per read), or None at the
    end of input. os.read, not sys.stdin: an abandoned reader thread must hold no lock that
    the interpreter wants at exit."""
    data = bytearray()
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 4096)
        if not chunk:
            if not data:
                return None
            break
        data += chunk
    return data.decode("utf-8", errors="replace")


def parse_answer(line: str) -> Answer | None:
    """y/yes, n/no [REASON], a/always; None for anything else (asked again)."""
    word, _, rest = line.strip().partition(" ")
    match word.lower():
        case "y" | "yes":
            return Answer(approved=True)
        case "a" | "always":
            return Answer(approved=True, always=True)
        case "n" | "no":
            return Answer(approved=False, reason=rest.strip() or None)
        case _:
            return None
