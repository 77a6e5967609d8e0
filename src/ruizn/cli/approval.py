"""The CLI's side of approval: who is asked, and what a run left waiting tells the user.

The policy (which calls need a decision, what `always`/`never` decide, which ids a resume may
decide) is `ruizn.decide`'s; the prompt is `ruizn.effects.person.approval.TerminalApprover`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from attrs import evolve

from ruizn.state import ExecutionContext, ToolCall
from ruizn.terminal import revealed

if TYPE_CHECKING:  # `runs` and `show` use this module too, and must not import anyio
    from ruizn.effects.person.approval import Approver

_MAX_INPUT_LISTED = 120


def terminal_approver() -> Approver | None:
    """Who is asked about a call that needs a decision (in `ask` mode).

    The person at the terminal: on stdin and stdout when both are the terminal; else, when
    the run is shown at a terminal (stdout or stderr is one) but stdin is not (`echo GOAL |
    ruizn run`), on the process's terminal itself, /dev/tty, as git, ssh and sudo ask.
    Otherwise nobody can be asked, and a call that needs a decision stops the run
    awaiting_approval (exit 4) for `ruizn resume --approve/--deny`."""
    color = not os.environ.get("NO_COLOR")
    if sys.stdin.isatty() and sys.stdout.isatty():
        from ruizn.effects.person.approval import TerminalApprover

        return TerminalApprover(sys.stdout, in_fd=sys.stdin.fileno(), color=color)
    if not (sys.stdout.isatty() or sys.stderr.isatty()):
        return None  # nobody is watching: a run in the background, a test, a pipeline
    tty = _controlling_terminal()
    if tty is None:
        return None
    from ruizn.effects.person.approval import TerminalApprover

    out = open(tty, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    return TerminalApprover(out, in_fd=tty, color=color)


def _controlling_terminal() -> int | None:
    """A descriptor of /dev/tty, open for the rest of the process; None when the process
    has no terminal (opening /dev/tty fails with ENXIO)."""
    try:
        return os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return None


def describe_call(call: ToolCall) -> str:
    shown = json.dumps(call.input, ensure_ascii=False)
    if len(shown) > _MAX_INPUT_LISTED:
        shown = shown[:_MAX_INPUT_LISTED] + "…"
    return revealed(f"{call.id}  {call.name} {shown}")


def awaiting_report(state: ExecutionContext) -> list[str]:
    """The lines (for stderr) that list the calls a stopped run waits on, and what to do."""
    waiting = list(state.awaiting_approval)
    for child in state.children_awaiting:  # a subagent's, named by its agent
        waiting += [evolve(call, name=f"{child.agent} > {call.name}") for call in child.awaiting]
    if not waiting:
        return []
    count = f"{len(waiting)} tool call" + (" awaits" if len(waiting) == 1 else "s await")
    return [
        f"ruizn: {count} approval:",
        *(f"  {describe_call(call)}" for call in waiting),
        f"decide with: ruizn resume {state.run_id} --approve ID|all"
        " (or --deny ID|all --reason TEXT)",
    ]
