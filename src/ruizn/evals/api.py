"""`ruizn.eval(...)`: the same eval as `ruizn eval`, from Python and pytest.

report = ruizn.eval("evals/refactors.yaml", model="claude-sonnet-5-5", epochs=3)
assert report.ok, "\\n".join(report.lines())
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio

from ruizn.evals.dataset import Dataset, load_dataset
from ruizn.evals.report import EvalReport, Trial, report_from_json, report_to_json
from ruizn.evals.runner import Evaluation, evaluate_async
from ruizn.shell.toolkit import ToolLike

__all__: Sequence[str] = ("eval", "eval_async", "load_report", "save_report")


def eval(
    dataset: str | Path | Dataset,
    *,
    model: Any = None,
    epochs: int = 1,
    concurrency: int = 1,
    max_cost: float | None = None,
    min_pass: float = 1.0,
    recordings: str | Path | None = None,
    trust: bool = False,
    tools: Iterable[ToolLike] = (),
    workspace: str | Path = ".",
    runs: str | Path | None = None,
    judge_model: str | None = None,
    on_trial: Callable[[Trial], None] | None = None,
    db: str | None = None,
    on_notice: Callable[[str], None] | None = None,
    **options: Any,
) -> EvalReport:
    """Run every case of `dataset` (a YAML or JSON file, or a loaded `Dataset`) `epochs`
    times, `concurrency` at once, and score each run; see docs/eval.md. `options` are run
    settings for every case (a case's `metadata.ruizn` wins). Runs are stored in `runs`
    (default WORKSPACE/.ruizn/runs), each case's workspace under WORKSPACE/.ruizn/evals/ID.
    `recordings` (a folder of runs) re-drives each case from a run recorded with its goal,
    with no model call. The report's `ok` says whether the pass rate meets `min_pass`.
    Each run is a run of a fleet batch (the `fleet` extra); `db` (a fleet's database URL)
    lets `ruizn worker --db` processes take runs too; `on_notice` is told the fleet's
    warnings."""
    return anyio.run(
        lambda: eval_async(
            dataset,
            model=model,
            epochs=epochs,
            concurrency=concurrency,
            max_cost=max_cost,
            min_pass=min_pass,
            recordings=recordings,
            trust=trust,
            tools=tools,
            workspace=workspace,
            runs=runs,
            judge_model=judge_model,
            on_trial=on_trial,
            db=db,
            on_notice=on_notice,
            **options,
        )
    )


async def eval_async(
    dataset: str | Path | Dataset,
    *,
    model: Any = None,
    epochs: int = 1,
    concurrency: int = 1,
    max_cost: float | None = None,
    min_pass: float = 1.0,
    recordings: str | Path | None = None,
    trust: bool = False,
    tools: Iterable[ToolLike] = (),
    workspace: str | Path = ".",
    runs: str | Path | None = None,
    judge_model: str | None = None,
    on_trial: Callable[[Trial], None] | None = None,
    db: str | None = None,
    on_notice: Callable[[str], None] | None = None,
    **options: Any,
) -> EvalReport:
    """`eval`, inside an event loop."""
    loaded = dataset if isinstance(dataset, Dataset) else load_dataset(dataset)
    base = _absolute(workspace)
    how = Evaluation(
        model=model,
        epochs=epochs,
        concurrency=concurrency,
        max_cost=max_cost,
        min_pass=min_pass,
        root=base / ".ruizn" / "evals",
        runs=_absolute(runs) if runs is not None else base / ".ruizn" / "runs",
        tools=tuple(tools),
        options=options,
        recordings=_absolute(recordings) if recordings is not None else None,
        trust=trust,
        judge_model=judge_model,
        on_trial=on_trial,
        db=db,
        on_notice=on_notice,
    )
    report = await evaluate_async(loaded, how)
    save_report(report, how.root / report.eval_id / "report.json")
    return report


def _absolute(path: str | Path) -> Path:
    return Path(os.path.abspath(path))


def save_report(report: EvalReport, path: Path) -> None:
    """Write `report` as JSON to `path` (a new file, its folder made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report_to_json(report), indent=2) + "\n", encoding="utf-8")


def load_report(path: str | Path) -> EvalReport:
    """A report written by `save_report` (or `ruizn eval --json`). Raises ReportError, or
    OSError for a file that cannot be read."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as exc:
        from ruizn.evals.report import ReportError

        raise ReportError(f"{path} is not JSON: {exc}") from None
    return report_from_json(data)
