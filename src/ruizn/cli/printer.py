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

import difflib
import json
import os
import re
from collections import Counter
from collections.abc import Iterable
from typing import TextIO

from ruizn.checkpoints import checkpoint_line
from ruizn.cli.liveoutput import LiveLines
from ruizn.events import (
    BudgetSpent,
    Checkpointed,
    ContextCleared,
    ContextCompacted,
    Event,
    HookRan,
    LlmCallFailed,
    LlmCallStarted,
    LlmResponse,
    LlmToken,
    OutputChecked,
    RunFinished,
    RunResumed,
    RunStarted,
    SubagentFinished,
    SubagentStarted,
    ToolApprovalDecided,
    ToolApprovalRequested,
    ToolCallFinished,
    ToolCallStarted,
    ToolsChanged,
    UserMessage,
)
from ruizn.format import counted, human_bytes, human_seconds, tokens, usd
from ruizn.media import image_line, images, text_of
from ruizn.state import (
    ContentBlock,
    ExecutionContext,
    JsonObject,
    TextBlock,
    ThinkingBlock,
    ToolResult,
    ToolUseBlock,
)
from ruizn.terminal import revealed, visible

_DIM, _RED, _GREEN, _RESET = "\x1b[2m", "\x1b[31m", "\x1b[32m", "\x1b[0m"
_MAX_INPUT_SHOWN = 200
# The run's first line when its approval mode decides without asking anyone.
APPROVAL_MODE_LINES = {
    "always": "approval: always · every tool call is approved without asking",
    "never": "approval: never · every tool call that needs approval is denied",
}


# The last line of the shell's result (effects/tools/bash.py): `[exit code N · 0.4 s]`.
_EXIT_LINE = re.compile(r"\[exit code (-?\d+) · ([^\]\n]+)\]\Z")


class StdoutPrinter:
    def __init__(
        self, out: TextIO, *, color: bool = False, live: bool = False, conversation: bool = False
    ) -> None:
        """`live` (a terminal): a running command's last lines are drawn as it runs
        (`command_output`). `conversation` (a session): a continued turn's run_resumed and
        user_message lines are left out, since the person just typed the message, and so
        are the checkpoints saved (a session's /rewind lists what they hold)."""
        self._out = out
        self._color = color
        self.command_output: LiveLines | None = (
            LiveLines(out, color=color, before=self._ensure_newline) if live else None
        )
        self._conversation = conversation
        # At a terminal: the inputs of the file tools' calls, for their diff stat.
        self._edits: dict[str, JsonObject] = {}
        self._inline = False
        self._broken = False
        # The calls of the turn in progress (id -> tool), and the tools it calls twice.
        self._calls: dict[str, str] = {}
        self._twice: set[str] = set()
        # The run's tools (name -> schema), to say what a tools_changed changed.
        self._tools: dict[str, JsonObject] = {}
        # --show-thinking: the summarized thinking the API sent, dimmed, once its reply is in.
        self._show_thinking = False
        # At a terminal: the answer streamed so far in this call, to draw it again as Markdown.
        self._answer: list[str] = []

    def __call__(self, event: Event) -> None:
        if self._broken:
            return
        try:
            live = self.command_output
            if live is not None:
                live.clear()
            self._print(event)
            if live is not None:
                live.redraw()  # below the line just written, while a command still runs
            self._out.flush()
        except (BrokenPipeError, ValueError):
            # ValueError: the stream was closed under us. Either way the reader is gone.
            self._broken = True

    def _print(self, event: Event) -> None:
        match event:
            case LlmToken(text=text):
                # --show-thinking: the reply is printed whole, in order, once it is in (the
                # thinking is not streamed, and it goes before the text it preceded).
                if text and not self._show_thinking:
                    shown = visible(text)
                    self._out.write(shown)
                    self._inline = not text.endswith("\n")
                    if self._color:
                        self._answer.append(shown)
            case LlmCallStarted() | LlmCallFailed(will_retry=False):
                self._answer = []
            case LlmResponse(content=content):
                if self._answer:
                    self._as_markdown("".join(self._answer))
                    self._answer = []
                if self._show_thinking:
                    self._in_order(content)
                self._turn([(b.id, b.name) for b in content if isinstance(b, ToolUseBlock)])
            case ToolCallStarted(id=call_id, name=name, input=tool_input):
                self._calls.setdefault(call_id, name)
                if self.command_output is not None and name in _FILE_TOOLS:
                    self._edits[call_id] = tool_input
                self._line(
                    self._paint(_DIM, "[tool]") + f" {self._label(call_id)} {_input(tool_input)}"
                )
            case RunStarted(settings=settings):
                self._tools = _schemas(settings.tools)
                self._show_thinking = settings.show_thinking
                if settings.approval in APPROVAL_MODE_LINES:
                    line = APPROVAL_MODE_LINES[settings.approval]
                    self._line(self._paint(_DIM, "[run]") + " " + line)
            case ToolApprovalRequested(id=call_id, name=name, input=tool_input):
                self._calls.setdefault(call_id, name)
                self._line(
                    self._paint(_DIM, "[approval]")
                    + f" needed · {revealed(call_id)} · {revealed(name)} {_input(tool_input)}"
                )
            case ToolApprovalDecided() as decided:
                self._line(self._paint(_DIM, "[approval]") + " " + self._decision(decided))
            case ToolCallFinished(id=call_id, result=result):
                self._finished(call_id, result)
            case LlmCallFailed(will_retry=True) as failed:
                self._answer = []
                # Said once: the provider's message names it already when it had one.
                rid = failed.request_id
                where = f" (request-id {rid})" if rid and rid not in failed.message else ""
                why = visible(f"{failed.message}{where}")
                self._line(
                    self._paint(_DIM, "[retry]")
                    + f" attempt {failed.attempt} failed: {why}; retrying in {failed.retry_in:.1f}s"
                )
            case ToolsChanged() as changed:
                self._tools_changed(changed)
            case RunResumed() | UserMessage() if self._conversation:
                pass
            case Checkpointed(error=None) if self._conversation:
                pass  # each turn's saves; /rewind lists them (a failed one is still said)
            case RunResumed(max_steps=max_steps, max_cost=max_cost):
                budget = "" if max_cost is None else f" · budget {usd(max_cost)}"
                self._line(
                    self._paint(_DIM, "[run]")
                    + f" resumed · max {counted(max_steps, 'step')}{budget}"
                )
            case UserMessage(text=text):
                self._line(self._paint(_DIM, "[user]") + " " + visible(text))
            case ContextCleared(results=results, limit=limit):
                size = human_bytes(sum(item.size for item in results))
                count = counted(len(results), "old tool result")
                self._line(
                    self._paint(_DIM, "[context]")
                    + f" cleared {count} ({size}) to stay under {tokens(limit)} tokens"
                )
            case ContextCompacted() as compacted:
                cost = "" if compacted.cost is None else f" · {usd(compacted.cost)}"
                who = "the API" if compacted.source == "server" else "the model (ruizn's prompt)"
                self._line(
                    self._paint(_DIM, "[context]")
                    + f" compacted {tokens(compacted.tokens_before)} ->"
                    f" {tokens(compacted.tokens_after)} tokens, summarised by {who}{cost}"
                )
            case BudgetSpent(budget=budget, limit=limit, spent=spent):
                self._line(
                    self._paint(_DIM, "[budget]")
                    + f" {visible(budget)}: {usd(spent)} of {usd(limit)} spent, no more model calls"
                )
            case HookRan() as ran:
                self._hook(ran)
            case Checkpointed() as point:
                self._line(self._paint(_DIM, "[files]") + " " + checkpoint_line(point))
            case SubagentStarted(agent=agent, run_id=run_id, description=what):
                about = f" · {visible(what)}" if what else ""
                self._line(
                    self._paint(_DIM, "[agent]")
                    + f" {visible(agent)} started · run {run_id}{about}"
                )
            case SubagentFinished() as ended:
                cost = "" if ended.cost is None else f" · {usd(ended.cost)}"
                self._line(
                    self._paint(_DIM, "[agent]")
                    + f" run {ended.run_id} ended {ended.status.value}"
                    + f" · {counted(ended.steps, 'step')}{cost}"
                )
            case OutputChecked(valid=True):
                self._line(self._paint(_DIM, "[output]") + " matches the output schema")
            case OutputChecked(error=error):
                self._line(
                    self._paint(_DIM, "[output]")
                    + f" does not match the output schema: {visible(str(error))}"
                )
            case RunFinished() as finished:
                self._line(self._summary(finished))
            case _:
                pass

    def _as_markdown(self, text: str) -> None:
        """Draw the streamed answer again as Markdown, in place, when it is Markdown and
        still on the screen (cli/markdown.py)."""
        from ruizn.cli.markdown import looks_like_markdown, redrawn, rows_taken

        if not looks_like_markdown(text):
            return
        try:
            columns, lines = os.get_terminal_size(self._out.fileno())
        except (AttributeError, OSError, ValueError):
            return
        if columns < 1 or lines < 1:  # a terminal that gives no size
            return
        taken = rows_taken(text, columns)
        if taken >= lines:
            return  # part of it has scrolled away: leave it as streamed
        up = taken if text.endswith("\n") else taken - 1
        self._out.write("\r" + (f"\x1b[{up}A" if up else "") + "\x1b[J")
        self._out.write(redrawn(text, columns=columns))
        self._inline = False

    def _hook(self, ran: HookRan) -> None:
        """A hook's line: only what it decided, or why it failed (a quiet hook stays quiet)."""
        if ran.decision == "none" and ran.error is None and ran.context is None:
            return
        what = {
            "allow": "allowed",
            "deny": "denied",
            "ask": "asks a person",
            "block": "blocked",
            "stop": "stopped the run",
        }.get(ran.decision, "")
        if ran.error is not None:
            what = f"failed ({ran.error})"
        elif not what:
            what = "added context"
        reason = f": {ran.reason}" if ran.reason else ""
        self._line(
            self._paint(_DIM, "[hook]")
            + " "
            + visible(f"{ran.hook_event} {ran.command[:60]} {what}{reason}")
        )

    def replayed(self, state: ExecutionContext) -> None:
        """A resumed run's printer: what the log before this session said, so that the lines
        from here on are the ones `ruizn replay` prints for them (which call a result
        answers, which tools the run has)."""
        self._tools = _schemas(state.settings.tools)
        self._show_thinking = state.settings.show_thinking
        self._turn([(call.id, call.name) for call in state.turn_calls])

    def _text(self, text: str) -> None:
        self._out.write(visible(text))
        self._inline = not text.endswith("\n")

    def _in_order(self, content: tuple[ContentBlock, ...]) -> None:
        """A reply's thinking (dimmed) and text, in the order the model gave them."""
        for block in content:
            if isinstance(block, ThinkingBlock) and block.thinking.strip():
                text = visible(block.thinking.strip())
                self._line(self._paint(_DIM, f"[thinking] {text}"))
            elif isinstance(block, TextBlock) and block.text:
                self._text(block.text)

    def _turn(self, calls: list[tuple[str, str]]) -> None:
        """A new turn's calls: a result line names its call's tool, and its id too when the
        turn calls that tool more than once."""
        self._calls = dict(calls)
        counts = Counter(name for _, name in calls)
        self._twice = {name for name, count in counts.items() if count > 1}

    def _label(self, call_id: str) -> str:
        name = self._calls.get(call_id)
        # Tool calls are what a person approves: invisible characters show as escapes.
        if name is None:  # a call no event of this transcript named
            return revealed(call_id)
        if name in self._twice:
            return f"{revealed(name)} ({revealed(call_id)})"
        return revealed(name)

    def _finished(self, call_id: str, result: ToolResult) -> None:
        tag = self._paint(_DIM, "[tool]")
        text = text_of(result.content)
        ended = _EXIT_LINE.search(text) if result.error_type in (None, "exit_status") else None
        if ended is not None:  # a command: its exit code, never "ok" when it failed
            code, took = ended.groups()
            output = text[: ended.start()].encode()
            folded = f"exit {code} · {human_bytes(len(output))} · {took}"
            shown = self._paint(_RED, folded) if code != "0" else folded
            self._line(f"{tag} {self._label(call_id)} {shown}")
        elif result.is_error:
            first = text.splitlines()[0] if text else ""
            failed = visible(f"error · {result.error_type} · {first}")
            self._line(f"{tag} {self._label(call_id)} {self._paint(_RED, failed)}")
        else:
            edit = self._edits.pop(call_id, None)
            stat = None if edit is None else diff_stat(edit, text)
            shown = human_bytes(len(text.encode())) if stat is None else stat
            self._line(f"{tag} {self._label(call_id)} ok · {shown}")
        for image in images(result.content):
            self._line(self._paint(_DIM, "[image]") + f" {visible(image_line(image))}")

    def _tools_changed(self, event: ToolsChanged) -> None:
        before, after = self._tools, _schemas(event.tools)
        self._tools = after
        parts = [
            f"{what} {', '.join(names)}"
            for what, names in (
                ("added", [n for n in after if n not in before]),
                ("removed", [n for n in before if n not in after]),
                ("changed", [n for n in after if n in before and after[n] != before[n]]),
            )
            if names
        ]
        what = "; ".join(parts) or "the same names and schemas"
        line = f"MCP server {', '.join(event.servers)} changed its tools: {what}"
        self._line(self._paint(_DIM, "[tools]") + " " + visible(line))

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
            counted(event.steps, "step"),
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


_FILE_TOOLS = frozenset({"write_file", "edit_file"})
_OCCURRENCES = re.compile(r"replaced (\d+) occurrence")


def diff_stat(tool_input: JsonObject, result: str) -> str | None:
    """A file tool's change as lines added and removed (`+3 -1`), from its call's input and
    result alone (events, no file read); None when they do not say (a file replaced whole:
    its old text is not in the log)."""
    if result.startswith("created "):
        content = tool_input.get("content")
        return f"new file · +{_line_count(content)}" if isinstance(content, str) else None
    old, new = tool_input.get("old_text"), tool_input.get("new_text")
    times = _OCCURRENCES.search(result)
    if not (isinstance(old, str) and isinstance(new, str) and times):
        return None
    added = removed = 0
    for line in difflib.unified_diff(old.split("\n"), new.split("\n"), lineterm="", n=0):
        if line.startswith(("+++", "---")):
            continue
        added += line.startswith("+")
        removed += line.startswith("-")
    count = int(times.group(1))
    return f"+{added * count} -{removed * count}"


def _line_count(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _schemas(tools: Iterable[JsonObject]) -> dict[str, JsonObject]:
    return {str(tool.get("name")): tool for tool in tools}


def _input(tool_input: object) -> str:
    shown = json.dumps(tool_input, ensure_ascii=False)
    if len(shown) > _MAX_INPUT_SHOWN:
        shown = shown[:_MAX_INPUT_SHOWN] + "…"
    return revealed(shown)
