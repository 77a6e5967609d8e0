"""The CLI's side of approval: who is asked, and what a run left waiting tells the user.

The policy (which calls need a decision, what `always`/`never` decide, which ids a resume may
decide) is `ruizn.decide`'s; the prompt is `ruizn.effects.person.approval.TerminalApprover`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from ruizn.state import ExecutionContext, ToolCall
from ruizn.terminal import revealed

if TYPE_CHECKING:  # `runs` and `show` use this module too, and must not import anyio
    from ruizn.effects.person.approval import Approver

_MAX_INPUT_LISTED = 120


def terminal_approver() -> Approver | None:
    """A prompt at the terminal when stdin and stdout are both terminals (asked only in `ask`
    mode); otherwise nobody can be asked, and a call that needs a decision stops the run
    awaiting_approval (exit 4) for `ruizn resume --approve/--deny`."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return None
    from ruizn.effects.person.approval import TerminalApprover

    color = not os.environ.get("NO_COLOR")
    return TerminalApprover(sys.stdout, in_fd=sys.stdin.fileno(), color=color)


def describe_call(call: ToolCall) -> str:
    shown = json.dumps(call.input, ensure_ascii=False)
    if len(shown) > _MAX_INPUT_LISTED:
        shown = shown[:_MAX_INPUT_LISTED] + "…"
    return revealed(f"{call.id}  {call.name} {shown}")


def awaiting_report(state: ExecutionContext) -> list[str]:
    """The lines (for stderr) that list the calls a stopped run waits on, and what to do."""
    waiting = state.awaiting_approval
    if not waiting:
        return []
    count = f"{len(waiting)} tool call" + (" awaits" if len(waiting) == 1 else "s await")
    return [
        f"ruizn: {count} approval:",
        *(f"  {describe_call(call)}" for call in waiting),
        f"decide with: ruizn resume {state.run_id} --approve ID|all"
        " (or --deny ID|all --reason TEXT)",
    ]
