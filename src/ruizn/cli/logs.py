"""Commands that only read logs: replay, runs, show. No network, no SDK, no anyio.

A log holds what the model and the user wrote, exactly as it was; every piece of it printed
here goes through `ruizn.terminal.visible` first, like the live transcript.
"""

from __future__ import annotations

import gc
import itertools
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from attrs import evolve

from ruizn.cli.approval import describe_call
from ruizn.cli.exits import EXIT_ERROR, EXIT_OK, fail
from ruizn.cli.printer import StdoutPrinter
from ruizn.cli.runs_list import status_word
from ruizn.cli.table import cells, clip, terminal_width
from ruizn.effects.runlog.reader import LogError, Replayed, TornTail
from ruizn.effects.runlog.store import RunNotFound, RunRef, RunStore, settled
from ruizn.events import (
    ContextCleared,
    ContextCompacted,
    Event,
    LlmResponse,
    Parent,
    RunStarted,
    SettingsChanged,
    ToolCallFinished,
    ToolCallStarted,
    ToolsChanged,
)
from ruizn.format import counted, human_bytes, human_seconds, tokens, usd
from ruizn.grant import grant_of
from ruizn.media import image_line, images
from ruizn.serde import state_to_json
from ruizn.settings import RunSettings
from ruizn.state import (
    ExecutionContext,
    RedactedThinkingBlock,
    ThinkingBlock,
    ToolUseBlock,
)
from ruizn.terminal import revealed, revealed_line, visible
from ruizn.window import compact_threshold, context_limit

if TYPE_CHECKING:
    from ruizn.cassette.diff import Difference, Item, Summary


def _resolve(store: RunStore, run: str) -> RunRef:
    try:
        return store.find(run)
    except RunNotFound as exc:
        fail(visible(str(exc)))


def read_run(
    store: RunStore, ref: RunRef, on_event: Callable[[Event], None] | None = None
) -> Replayed:
    """Replay a log for a command: a torn tail is a one-line warning, anything worse exit 2."""
    # A replay makes millions of small acyclic objects that reference counting frees; the
    # cyclic collector would rescan the growing state for nothing, making replay
    # superlinear. The command ends right after.
    gc.disable()
    where = str(ref.path)

    def note(tail: TornTail) -> None:
        print(f"ruizn: warning: {visible(tail.describe(ref.path))}", file=sys.stderr)

    try:
        return store.load(ref, on_event=on_event, torn=note)
    except LogError as exc:
        text = str(exc)
        fail(visible(text if text.startswith((where, "run ")) else f"{where}: {text}"))


def replay_run(store: RunStore, run: str, *, as_json: bool) -> int:
    ref = _resolve(store, run)
    if as_json:
        replayed = read_run(store, ref)
        json.dump(state_to_json(replayed.state), sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK
    # Colour never: a replay is for reading back and diffing against the live transcript.
    read_run(store, ref, on_event=StdoutPrinter(sys.stdout, color=False))
    return EXIT_OK


class _Tally:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self._names: dict[str, str] = {}
        self.parent: Parent | None = None
        # One line per image a result held: the call, its tool, and the image (never bytes).
        self.images: list[str] = []
        self.image_text = 0  # the images' base64, as the log holds it
        self.tools_changed = 0
        self.responses: list[LlmResponse] = []
        self.cleared = 0
        self.cleared_bytes = 0
        self.compactions: list[ContextCompacted] = []
        # Thinking blocks: with text (summarized), and without (omitted or redacted).
        self.thoughts = 0
        self.thoughts_hidden = 0
        # The shell's background commands: call id -> (command, job id once it started).
        self.background: dict[str, tuple[str, str | None]] = {}
        self.killed: set[str] = set()
        # Settings a person changed in a session: (seq, what).
        self.changes: list[tuple[int, str]] = []

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.parent = event.parent
        elif isinstance(event, SettingsChanged):
            what = [f"model {event.model}"] if event.model is not None else []
            what += [f"effort {event.effort}"] if event.effort is not None else []
            self.changes.append((event.seq, ", ".join(what)))
        elif isinstance(event, LlmResponse):
            self.responses.append(event)
            for block in event.content:
                if isinstance(block, ToolUseBlock):
                    self._names[block.id] = block.name
                elif isinstance(block, ThinkingBlock) and block.thinking.strip():
                    self.thoughts += 1
                elif isinstance(block, ThinkingBlock | RedactedThinkingBlock):
                    self.thoughts_hidden += 1
        elif isinstance(event, ToolCallStarted):
            self.calls[event.name] += 1
            self._names[event.id] = event.name
            if event.name == "bash" and event.input.get("background") is True:
                self.background[event.id] = (str(event.input.get("command", "")), None)
            elif event.name == "bash_kill":
                self.killed.add(str(event.input.get("id", "")))
        elif isinstance(event, ToolCallFinished):
            name = self._names.get(event.id, "?")
            if event.id in self.background and isinstance(event.result.content, str):
                job = _BACKGROUND_ID.search(event.result.content)
                command = self.background[event.id][0]
                self.background[event.id] = (command, job.group(0) if job else None)
            if event.result.is_error:
                self.errors[name] += 1
            for image in images(event.result.content):
                self.images.append(f"{event.id} {name} · {image_line(image)}")
                self.image_text += len(image.source.data)
        elif isinstance(event, ToolsChanged):
            self.tools_changed += 1
        elif isinstance(event, ContextCleared):
            self.cleared += len(event.results)
            self.cleared_bytes += sum(item.size for item in event.results)
        elif isinstance(event, ContextCompacted):
            self.compactions.append(event)


_BACKGROUND_ID = re.compile(r"\bbg_[0-9a-f]+\b")


# `ruizn show` lists every step's cost up to this many steps; past it, the first and the
# last half of them.
_STEPS_SHOWN = 50


def _step_costs(model: str, responses: list[LlmResponse]) -> tuple[list[str], float | None, int]:
    """One line per step (its cost and tokens), the total, and how many calls were priced
    now: a call logged before ruizn priced calls gets today's price, marked `*`."""
    lines: list[str] = []
    total: float | None = 0.0
    priced_now = 0
    for step, response in enumerate(responses, start=1):
        cost, mark = response.cost, ""
        if response.priced_by is None:
            from ruizn.effects.models.pricing import price_now

            cost, mark = price_now(model, response.usage), "*"
            priced_now += 1
        total = None if total is None or cost is None else total + cost
        usage = response.usage
        lines.append(
            f"{step:>5}  {usd(cost) + mark:>14}  in {tokens(usage.total_input_tokens)}"
            f" (cache read {tokens(usage.cache_read_input_tokens)},"
            f" write {tokens(usage.cache_creation_input_tokens)})"
            f" · out {tokens(usage.output_tokens)}"
        )
    if len(lines) > _STEPS_SHOWN:
        half = _STEPS_SHOWN // 2
        hidden = len(lines) - 2 * half
        lines = [
            *lines[:half],
            f"{'':>5}  … {counted(hidden, 'more step')} (ruizn replay --json)",
            *lines[-half:],
        ]
    return lines, total, priced_now


def _times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


def _lineage(parent: Parent | None) -> list[tuple[str, str]]:
    if parent is None:
        return []
    if parent.kind == "rerun":
        return [("rerun of", f"{parent.run_id} (its {counted(parent.seq, 'event')} re-driven)")]
    if parent.kind == "agent":
        return [("agent of", f"{parent.run_id}, as {parent.agent} (its call {parent.call})")]
    return [("forked", f"from {parent.run_id} at seq {parent.seq}")]


def _agent_lines(state: ExecutionContext) -> list[tuple[str, str]]:
    """One line per subagent the run started: its name, run, status, steps and cost."""
    return [
        (
            "agent",
            f"{child.agent}  {child.run_id}  "
            + (
                "running (or stopped: resume the run)"
                if child.status is None
                else child.status.value
            )
            + f"  {counted(child.steps, 'step')}  "
            + ("cost unknown" if child.cost is None else usd(child.cost)),
        )
        for child in state.children
    ]


def _cost_line(state: ExecutionContext, total: float | None, priced_now: int) -> str:
    budget = state.settings.max_cost
    if state.children:  # the tree's: this run's calls and its agents' (as their ends logged)
        agents = [child.cost for child in state.children if child.status is not None]
        own = total
        known = [cost for cost in agents if cost is not None]
        total = None if total is None or len(known) < len(agents) else total + sum(known)
        if own is not None:
            text = "unknown" if total is None else usd(total)
            text += f" (this run {usd(own)}, its agents the rest)"
            return text + (f" · budget {usd(budget)}" if budget is not None else "")
    text = "unknown (no known price for the model)" if total is None else usd(total)
    if priced_now and total is not None:
        text += f" (* {counted(priced_now, 'call')} logged unpriced, priced now at today's prices)"
    if budget is not None:
        text += f" · budget {usd(budget)}"
    if state.budget_spent is not None:
        text += f" · shared budget {state.budget_spent} spent"
    return text


def _context_line(state: ExecutionContext, tally: _Tally) -> str:
    limit = context_limit(state.settings)
    text = "no limit" if limit is None else f"limit {tokens(limit)} tokens"
    if tally.cleared:
        text += f" · {counted(tally.cleared, 'tool result')} cleared"
        text += f" ({human_bytes(tally.cleared_bytes)})"
    at = compact_threshold(state.settings)
    text += " · compaction off" if at is None else f" · compacts past {tokens(at)} tokens"
    if tally.compactions:
        text += f" · compacted {_times(len(tally.compactions))}"
    return text


def _compaction_line(compacted: ContextCompacted) -> str:
    """One compaction in `show`: the history's tokens before -> after, cost, who summarised."""
    cost = "cost unknown" if compacted.cost is None else usd(compacted.cost)
    who = "the API's compaction" if compacted.source == "server" else "ruizn's own summary"
    return (
        f"{tokens(compacted.tokens_before)} -> {tokens(compacted.tokens_after)} tokens"
        f" · {cost} · {who} ({compacted.source}, {compacted.trigger})"
    )


def _model_line(settings: RunSettings) -> str:
    """The model and how it was asked to think (thinking/effort as recorded, when set)."""
    parts = [settings.model]
    if settings.thinking is not None:
        shown = " (shown)" if settings.show_thinking and settings.thinking == "adaptive" else ""
        parts.append(f"thinking {settings.thinking}{shown}")
    if settings.effort is not None:
        parts.append(f"effort {settings.effort}")
    return " · ".join(parts)


def _thinking_lines(tally: _Tally) -> list[tuple[str, str]]:
    if not tally.thoughts and not tally.thoughts_hidden:
        return []
    parts = []
    if tally.thoughts:
        parts.append(f"{tally.thoughts} summarized")
    if tally.thoughts_hidden:
        parts.append(f"{tally.thoughts_hidden} omitted or redacted")
    return [("thinking", " · ".join(parts) + " · counted in out tokens and cost")]


_GRANT_KEYS = frozenset({"workspace", "tool code", "mcp", "shell", "hook", "approved", "always"})


class _Say:
    """`show`'s lines: `key:` in a column of 11, then the value. At a terminal a long value
    wraps under itself (the goal to at most two lines, then "…"), so every line fits; piped,
    each value is one whole line."""

    def __init__(self, width: int | None) -> None:
        self.width = width

    def __call__(self, key: str, value: str, *, most: int | None = None) -> None:
        head = f"{key + ':' if key else '':<11}"
        if self.width is None or cells(head + value) <= self.width:
            print(head + value)
            return
        import textwrap

        room = max(self.width - 11, 10)
        parts = textwrap.wrap(value, room, break_on_hyphens=False) or [""]
        if most is not None and len(parts) > most:
            parts = [*parts[: most - 1], clip(" ".join(parts[most - 1 :]), room)]
        for part in parts:
            print(head + clip(part, room))
            head = " " * 11


def _output_lines(state: ExecutionContext) -> list[tuple[str, str]]:
    """How a run with an output schema asked for its answer, and where that stands."""
    settings = state.settings
    if settings.output_schema is None:
        return []
    how = {
        "format": "constrained by the API (output_config.format)",
        "tool": "through the final_output tool (the Models API did not list"
        " structured outputs for the model)",
    }.get(str(settings.output_mode), "not chosen yet")
    misses = f" · {state.output_checks} answer(s) sent back" if state.output_checks else ""
    done = "a valid answer" if state.output_valid else "no valid answer"
    return [("output", f"{done} · schema {how} · retries {settings.output_retries}{misses}")]


def _instructions_line(state: ExecutionContext) -> str:
    """Which project instructions the system prompt carries, and whether the cap cut them."""
    settings = state.settings
    if not settings.project_instructions:
        return "instructions off (--no-project-instructions)"
    if not settings.instructions:
        return "no AGENTS.md or CLAUDE.md at the workspace root"
    return " · ".join(
        f"{item.path} in the system prompt ({human_bytes(item.size)}"
        + (f", cut at {human_bytes(len(item.text.encode('utf-8')))})" if item.cut else ")")
        for item in settings.instructions
    )


def cost_report(store: RunStore, run: str) -> list[str]:
    """A session's `/cost`: every step's usage and cost so far, then the run's cost line."""
    ref = _resolve(store, run)
    tally = _Tally()
    state = store.load(ref, on_event=tally).state
    step_lines, total, priced_now = _step_costs(state.settings.model, tally.responses)
    return [
        f"{'STEP':>5}  {'COST':>14}  TOKENS",
        *step_lines,
        f"total  {_cost_line(state, total, priced_now)}",
    ]


def show_run(store: RunStore, run: str) -> int:
    ref = _resolve(store, run)
    path = ref.path
    tally = _Tally()
    found = store.info(ref, on_event=tally)
    replayed = found.replayed
    if replayed is None:
        if found.error is not None:  # it names the file and why: a bad line, a planted lock
            fail(visible(found.error))
        replayed = read_run(store, ref)  # no events to read yet: says why, exit 2
    if replayed.torn and not found.live:
        print(f"ruizn: warning: {visible(replayed.torn.describe(path))}", file=sys.stderr)
    state = replayed.state
    usage = state.usage
    total_in = usage.total_input_tokens
    ratio = f"{usage.cache_read_input_tokens / total_in:.0%}" if total_in else "n/a"
    tools = ", ".join(
        f"{name} x{count}" + (f" ({tally.errors[name]} failed)" if tally.errors[name] else "")
        for name, count in tally.calls.most_common()
    )
    grant = grant_of(state.settings, state)
    step_lines, total, priced_now = _step_costs(state.settings.model, tally.responses)
    for compacted in tally.compactions:  # priced when made; in the run's total and budget
        total = None if total is None or compacted.cost is None else total + compacted.cost
    lines = [
        ("run", state.run_id),
        *_lineage(tally.parent),
        ("goal", state.goal),
        ("model", _model_line(state.settings)),
        *(("changed", f"at seq {seq}: {what}") for seq, what in tally.changes),
        *_thinking_lines(tally),
        ("workspace", grant.workspace),
        (
            "approval",
            grant.approval + (" · secret files readable" if grant.allow_secret_files else ""),
        ),
        ("project", _instructions_line(state)),
        *_output_lines(state),
        *(("tool code", module) for module in grant.tool_modules),
        *(("mcp", server) for server in grant.mcp_servers),
        *((("shell", grant.shell),) if grant.shell is not None else ()),
        *(("hook", hook) for hook in grant.hooks),
        *(("approved", call) for call in grant.preapproved),
        *(("always", f"tool {name}") for name in grant.always_tools),
        ("status", status_word(found) + (f" · {state.error}" if state.error else "")),
        ("steps", f"{state.step} of {state.settings.max_steps}"),
        ("time", human_seconds(state.elapsed)),
        ("tools", tools or "none"),
        *_agent_lines(state),
        (
            "usage",
            f"in {tokens(total_in)} tok (uncached {tokens(usage.input_tokens)},"
            f" cache write {tokens(usage.cache_creation_input_tokens)},"
            f" cache read {tokens(usage.cache_read_input_tokens)}) · out"
            f" {tokens(usage.output_tokens)} tok",
        ),
        ("cache hit", ratio),
        ("cost", _cost_line(state, total, priced_now)),
        ("context", _context_line(state, tally)),
        ("events", str(replayed.events)),
        ("log", store.location(ref)),
    ]
    if tally.tools_changed:
        lines.insert(
            lines.index(("tools", tools or "none")) + 1,
            ("tool list", f"changed {_times(tally.tools_changed)} by MCP servers (tools_changed)"),
        )
    say = _Say(terminal_width())
    for key, value in lines:
        # What the run grants is shown as `resume` asks about it: each fact one line, every
        # invisible character and line break escaped too.
        shown = revealed_line(value) if key in _GRANT_KEYS else visible(value)
        say(key, shown, most=2 if key == "goal" else None)
    if tally.images:
        say(
            "images",
            f"{counted(len(tally.images), 'image')}, {human_bytes(tally.image_text)}"
            " of base64 in the log",
        )
        for line in tally.images:
            say("", visible(line))
    for compacted in tally.compactions:
        say("compacted", _compaction_line(compacted))
    if step_lines:
        say("per step", f"{'STEP':>5}  {'COST':>14}  TOKENS")
        for line in step_lines:
            say("", line)
    if tally.background:
        # Every one ends with its session (ruizn kills them), so only a live run has any left.
        for call_id, (command, job) in tally.background.items():
            if job is None:
                fate = "did not start"
            elif job in tally.killed:
                fate = "stopped by bash_kill"
            elif found.live:
                fate = "running, or ended"
            else:
                fate = "killed when its session ended, if still running"
            say("background", visible(f"{job or call_id} · {fate} · $ {command}"))
    pending = (
        *found.pending_approval,
        # A subagent's, named by its agent: `resume --approve ID` hands it to the child.
        *(
            evolve(call, name=f"{child.agent} > {call.name}")
            for child in state.children_awaiting
            for call in child.awaiting
        ),
    )
    if pending:
        target = getattr(store, "resume_target", None)
        run_args = target(state.run_id) if callable(target) else state.run_id
        say(
            "awaiting",
            f"{counted(len(pending), 'tool call')} (ruizn resume {visible(run_args)}"
            " --approve ID|all / --deny ID|all)",
        )
        for call in pending:
            say("", describe_call(call))
    return EXIT_OK


def diff_runs(store: RunStore, run_a: str, run_b: str) -> int:
    """`ruizn diff A B`: exit 0 and "no difference", or exit 1 with where the runs part and
    what each came to."""
    from ruizn.cassette.diff import first_difference, items, summary

    loaded = [_diffed(store, run) for run in (run_a, run_b)]
    (state_a, events_a), (state_b, events_b) = loaded
    seen = [0]

    def count(events: Iterable[Event]) -> Iterator[Event]:
        for event in events:
            seen[0] += 1
            yield event

    difference = first_difference(items(count(events_a)), items(events_b))
    if difference is None:
        print(f"no difference ({counted(seen[0], 'event')})")
        return EXIT_OK
    for line in diff_report(difference, summary(state_a), summary(state_b)):
        print(revealed(line))
    return EXIT_ERROR


def _diffed(store: RunStore, run: str) -> tuple[ExecutionContext, Iterable[Event]]:
    """The run's final state, and its events to compare: read again from its log file as
    they are compared (memory bounded like replay's), or, from a database, kept."""
    from ruizn.effects.runlog.reader import iter_events
    from ruizn.effects.runlog.writer import RunLocked

    events: list[Event] = []
    from_file = not hasattr(store, "events")  # a fleet's database has no file to read again
    try:
        ref, found = settled(store, run, on_event=None if from_file else events.append)
    except (RunNotFound, RunLocked, LogError) as exc:
        fail(visible(str(exc)))
    assert found.replayed is not None
    if from_file:
        count = found.replayed.events
        return found.replayed.state, itertools.islice(iter_events(ref.path), count)
    return found.replayed.state, events


_CELL = 36  # the widest a value of the summary table is shown


def diff_report(difference: Difference, a: Summary, b: Summary) -> list[str]:
    """Where two runs part (each side's seq, type and differing fields), then a table of what
    each came to: status, steps, tokens, tool calls, final answer."""
    x, y = difference.a, difference.b
    lines = [f"runs differ: seq {_at(x)} of A, seq {_at(y)} of B"]
    fields = difference.fields()
    for name, item in (("A", x), ("B", y)):
        if item is None:
            lines.append(f"  {name}  (the run ends here)")
            continue
        if fields:
            shown = " ".join(f"{key}={_json(_pick(item.body, key))}" for key in fields)
        else:
            shown = _json(item.body)
        lines.append(_clip(f"  {name}  {item.type} {shown}", 160))
    rows = [
        ("run", a.run_id, b.run_id),
        ("status", a.status.value, b.status.value),
        ("steps", str(a.steps), str(b.steps)),
        ("tokens", _tokens(a), _tokens(b)),
        ("tool calls", _calls(a), _calls(b)),
        ("answer", _json(a.answer), _json(b.answer)),
    ]
    width = max(len(_clip(row[1], _CELL)) for row in rows)
    lines.append(f"{'':<12}{'A':<{width}}  B")
    for key, left, right in rows:
        lines.append(f"{key:<12}{_clip(left, _CELL):<{width}}  {_clip(right, _CELL)}".rstrip())
    return lines


def _at(item: Item | None) -> str:
    return "-" if item is None else str(item.seq)


def _pick(body: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        body = body.get(part) if isinstance(body, dict) else None  # type: ignore[assignment]
    return body


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _tokens(run: Summary) -> str:
    return f"in {tokens(run.usage.total_input_tokens)} · out {tokens(run.usage.output_tokens)}"


def _calls(run: Summary) -> str:
    if not run.tool_calls:
        return "none"
    return ", ".join(
        f"{name} x{count}" + (f" ({failed} failed)" if failed else "")
        for name, count, failed in run.tool_calls
    )
