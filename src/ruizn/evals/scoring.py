"""A finished run scored: its facts gathered (the log's state, the workspace's files), the pure
scorers applied, a `Function` called, an `LLMJudge` asked through `ruizn.Agent`."""

from __future__ import annotations

import hashlib
import inspect
import json
import pkgutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ruizn.evals.dataset import Case
from ruizn.evals.scorers import Call, Facts, ScorerSpec, Verdict, score
from ruizn.events import Event
from ruizn.shell.outcome import RunResult
from ruizn.state import ExecutionContext, ToolUseBlock

__all__ = ["JUDGE_SYSTEM", "Judge", "facts_of", "judge_label", "snapshot", "verdicts_of"]

# Asked of an LLMJudge's model: its first line is the verdict, then why.
JUDGE_SYSTEM = (
    "You grade the output of an AI agent against a rubric. Answer with PASS or FAIL on the"
    " first line, then one short paragraph saying why."
)
# A judge: (the spec, the case, the facts) -> its verdict. None: no model may be called
# (`--rescore`).
Judge = Callable[[ScorerSpec, Case, Facts], Any]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` (its .ruizn folder left out) -> the sha256 of its bytes."""
    found: dict[str, str] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if relative.parts[0] == ".ruizn" or not path.is_file() or path.is_symlink():
            continue
        found[relative.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def facts_of(
    case: Case, result: RunResult, workspace: Path | None, elapsed: float | None = None
) -> Facts:
    state = result.state
    expected = {
        str(spec.args["expected"]): snapshot(Path(str(spec.args["expected"])))
        for spec in case.scorers
        if spec.kind == "FilesEqual"
    }
    return Facts(
        goal=case.goal,
        output=result.output,
        expected_output=case.expected_output,
        status=state.status.value,
        error=state.error,
        steps=state.step,
        cost=state.total_cost,
        elapsed=state.elapsed if elapsed is None else elapsed,
        calls=_calls(state),
        files=snapshot(workspace) if workspace is not None else {},
        expected_files=expected,
    )


def _calls(state: ExecutionContext) -> tuple[Call, ...]:
    return tuple(
        Call(name=block.name, input=dict(block.input))
        for message in state.messages
        if message.role == "assistant"
        for block in message.content
        if isinstance(block, ToolUseBlock)
    )


def judge_label(spec: ScorerSpec) -> str:
    """An LLMJudge's name in a report: its rubric's start and a digest of all it was given,
    so a judge changed in any way is a new scorer (never answered by the old verdict)."""
    given = json.dumps(dict(spec.args), sort_keys=True, default=str)
    digest = hashlib.sha256(given.encode()).hexdigest()[:8]
    if spec.label:
        return f"{spec.label} #{digest}"
    rubric = " ".join(str(spec.args["rubric"]).split())
    return f"LLMJudge({rubric[:32]}) #{digest}"


async def verdicts_of(
    case: Case,
    facts: Facts,
    *,
    result: RunResult,
    events: Callable[[], list[Event]],
    judge: Judge | None,
    earlier: Mapping[str, Verdict] | None = None,
) -> tuple[Verdict, ...]:
    """Every scorer of `case` on the run: pure ones on `facts`; `Function` called with the
    run's result and events; `LLMJudge` through `judge` (with no judge, the `earlier`
    verdict of the same scorer, else a failed verdict saying it was not judged)."""
    found: list[Verdict] = []
    for spec in case.scorers:
        if spec.kind == "Function":
            found.append(_function(spec, result, events()))
        elif spec.kind == "LLMJudge":
            name = judge_label(spec)
            if judge is not None:
                found.append(await judge(spec, case, facts))
            elif earlier is not None and name in earlier:
                found.append(earlier[name])
            else:
                found.append(
                    Verdict(
                        scorer=name,
                        passed=False,
                        score=0.0,
                        reason="not judged: --rescore makes no model call, and the report"
                        " holds no verdict for this rubric",
                    )
                )
        else:
            verdict = score(spec, facts)
            if verdict is not None:
                found.append(verdict)
    return tuple(found)


def _function(spec: ScorerSpec, result: RunResult, events: list[Event]) -> Verdict:
    """`Function: module:name`, called as name(result, events). It returns a bool, a
    (bool, reason) pair, or a score from 0 to 1 (passed at 0.5 and above)."""
    target = str(spec.args["function"])
    name = spec.label or f"Function({target})"
    try:
        function = pkgutil.resolve_name(target)
        value = function(result, events)
    except Exception as exc:  # the user's code: its failure is this scorer's verdict
        return Verdict(scorer=name, passed=False, score=0.0, reason=f"{type(exc).__name__}: {exc}")
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if callable(close):
            close()  # never awaited: say so rather than warn
        return Verdict(
            scorer=name, passed=False, score=0.0, reason="an async function: make it plain"
        )
    reason = None
    if isinstance(value, tuple) and len(value) == 2:
        value, reason = value
    if isinstance(value, bool):
        return Verdict(scorer=name, passed=value, score=float(value), reason=reason)
    if isinstance(value, int | float) and 0 <= value <= 1:
        return Verdict(scorer=name, passed=value >= 0.5, score=float(value), reason=reason)
    return Verdict(
        scorer=name,
        passed=False,
        score=0.0,
        reason=f"returned {type(value).__name__}, not a bool or a score from 0 to 1",
    )


def importable(folder: Path) -> None:
    """A dataset's folder on the import path (last), so `Function: module:name` finds the
    modules beside it."""
    where = str(folder)
    if where not in sys.path:
        sys.path.append(where)
