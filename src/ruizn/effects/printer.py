"""The stdout printer: the transcript a person reads, built from events alone.

`ruizn replay` feeds the logged events to this same printer, so a live run's stdout and its
replay are the same bytes. Tokens are written inline as they arrive; `_ensure_newline` keeps a
tool line from gluing onto streamed text. A closed stdout (`ruizn ... | head -1`) turns the
printer off; it never stops the run or the log.

Everything that comes from outside ruizn (the model's text, tool names and inputs, tool
errors, API error texts) goes through `ruizn.terminal.visible` before it is written, so a
control character shows as `␛`, `␍`... and the terminal never acts on it; ruizn's own
colour codes are added around the sanitised text. This happens whether or not stdout is a
terminal: the transcript is the same bytes in a pipe, a file or a replay (a file piped to
`less -R` or `cat` later is a terminal again), and the log keeps the exact text.
"""

from __future__ import annotations

import json
from typing import TextIO

from ruizn.events import (
    BudgetSpent,
    ContextCleared,
    Event,
    LlmCallFailed,
    LlmToken,
    RunFinished,
    RunResumed,
    RunStarted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallFinished,
    ToolCallStarted,
    UserMessage,
)
from ruizn.format import human_bytes, human_seconds, tokens, usd
from ruizn.terminal import visible

_DIM, _RED, _GREEN, _RESET = "\x1b[2m", "\x1b[31m", "\x1b[32m", "\x1b[0m"
_MAX_INPUT_SHOWN = 200
# The run's first line when its approval mode decides without asking anyone.
APPROVAL_MODE_LINES = {
    "always": "approval: always · every tool call is approved without asking",
    "never": "approval: never · every tool call that needs approval is denied",
}


class StdoutPrinter:
    def __init__(self, out: TextIO, *, color: bool = False) -> None:
        self._out = out
        self._color = color
        self._inline = False
        self._broken = False

    def __call__(self, event: Event) -> None:
        if self._broken:
            return
        try:
            self._print(event)
            self._out.flush()
        except (BrokenPipeError, ValueError):
            # ValueError: the stream was closed under us. Either way the reader is gone.
            self._broken = True

    def _print(self, event: Event) -> None:
        match event:
            case LlmToken(text=text):
                if text:
                    self._out.write(visible(text))
                    self._inline = not text.endswith("\n")
            case ToolCallStarted(name=name, input=tool_input):
                self._line(self._paint(_DIM, "[tool]") + f" {visible(name)} {_input(tool_input)}")
            case RunStarted(settings=settings) if settings.approval in APPROVAL_MODE_LINES:
                line = APPROVAL_MODE_LINES[settings.approval]
                self._line(self._paint(_DIM, "[run]") + " " + line)
            case ToolApprovalRequested(id=call_id, name=name, input=tool_input):
                self._line(
                    self._paint(_DIM, "[approval]")
                    + f" needed · {visible(call_id)} · {visible(name)} {_input(tool_input)}"
                )
            case ToolApprovalDecided() as decided:
                self._line(self._paint(_DIM, "[approval]") + " " + self._decision(decided))
            case ToolCallFinished(result=result):
                if result.is_error:
                    first = result.content.splitlines()[0] if result.content else ""
                    text = visible(f"error · {result.error_type} · {first}")
                    self._line(self._paint(_DIM, "[tool]") + " " + self._paint(_RED, text))
                else:
                    size = human_bytes(len(result.content.encode()))
                    self._line(self._paint(_DIM, "[tool]") + f" ok · {size}")
            case LlmCallFailed(will_retry=True) as failed:
                where = f" (request-id {failed.request_id})" if failed.request_id else ""
                why = visible(f"{failed.message}{where}")
                self._line(
                    self._paint(_DIM, "[retry]")
                    + f" attempt {failed.attempt} failed: {why}; retrying in {failed.retry_in:.1f}s"
                )
            case RunResumed(max_steps=max_steps, max_cost=max_cost):
                budget = "" if max_cost is None else f" · budget {usd(max_cost)}"
                self._line(self._paint(_DIM, "[run]") + f" resumed · max {max_steps} steps{budget}")
            case UserMessage(text=text):
                self._line(self._paint(_DIM, "[user]") + " " + visible(text))
            case ContextCleared(results=results, limit=limit):
                size = human_bytes(sum(item.size for item in results))
                count = f"{len(results)} old tool result" + ("" if len(results) == 1 else "s")
                self._line(
                    self._paint(_DIM, "[context]")
                    + f" cleared {count} ({size}) to stay under {tokens(limit)} tokens"
                )
            case BudgetSpent(budget=budget, limit=limit, spent=spent):
                self._line(
                    self._paint(_DIM, "[budget]")
                    + f" {visible(budget)}: {usd(spent)} of {usd(limit)} spent, no more model calls"
                )
            case RunFinished() as finished:
                self._line(self._summary(finished))
            case _:
                pass

    def _decision(self, event: ToolApprovalDecided) -> str:
        word = "approved" if event.approved else "denied"
        text = f"{word} · {visible(event.id)} · by {event.by}"
        if event.always:
            text += " (and every later call of this tool)"
        if event.reason:
            text += f": {visible(event.reason)}"
        return self._paint(_GREEN if event.approved else _RED, text)

    def _summary(self, event: RunFinished) -> str:
        usage = event.usage
        parts = [
            event.status.value,
            f"{event.steps} step" + ("" if event.steps == 1 else "s"),
            human_seconds(event.elapsed),
            f"in {tokens(usage.total_input_tokens)} tok"
            f" (cache read {tokens(usage.cache_read_input_tokens)})",
            f"out {tokens(usage.output_tokens)} tok",
            usd(event.cost),
        ]
        line = self._paint(_DIM, "[run]") + " " + " · ".join(parts)
        if event.error:
            line += "\n" + self._paint(_RED, f"[run] error: {visible(event.error)}")
        return line

    def _line(self, text: str) -> None:
        self._ensure_newline()
        self._out.write(text + "\n")

    def _ensure_newline(self) -> None:
        if self._inline:
            self._out.write("\n")
            self._inline = False

    def _paint(self, code: str, text: str) -> str:
        return f"{code}{text}{_RESET}" if self._color else text


def _input(tool_input: object) -> str:
    shown = json.dumps(tool_input, ensure_ascii=False)
    if len(shown) > _MAX_INPUT_SHOWN:
        shown = shown[:_MAX_INPUT_SHOWN] + "…"
    return visible(shown)
