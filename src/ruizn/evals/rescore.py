"""`ruizn eval DATASET --rescore REPORT`: the runs a report names scored again with the
dataset's scorers as they are now, with no model call. Only data is read from the report
(run ids, log paths, workspaces); the scorers come from the dataset the person named."""

from __future__ import annotations

from pathlib import Path

from attrs import evolve

from ruizn.effects.runlog.store import new_run_id, replay
from ruizn.evals.dataset import Dataset
from ruizn.evals.report import EvalReport, Trial
from ruizn.evals.runner import trial_of
from ruizn.evals.scoring import importable
from ruizn.shell.outcome import Session

__all__ = ["rescore_async"]

# What a rescore cannot change: no run to score, or a run that did not come to an end to
# score (its outcome stands).
_KEPT = ("not_run", "diverged")


async def rescore_async(dataset: Dataset, report: EvalReport) -> EvalReport:
    """`report`'s runs scored with `dataset`'s scorers: a new report (its own id), the runs
    and their figures the same."""
    if dataset.path is not None:
        importable(dataset.path.resolve().parent)
    trials: list[Trial] = []
    for trial in report.trials:
        case = dataset.case(trial.case)
        if case is None or trial.log_path is None or trial.outcome in _KEPT:
            note = None if case is not None else "not in the dataset any more: kept as it was"
            trials.append(trial if note is None else evolve(trial, reason=note))
            continue
        log = Path(trial.log_path)
        state = replay(log)
        result = Session.of(state, trial.run_id or state.run_id, log)
        earlier = {verdict.scorer: verdict for verdict in trial.verdicts}
        workspace = Path(trial.workspace) if trial.workspace else None
        again = await trial_of(
            case, trial.epoch, result, workspace, None, elapsed=trial.elapsed, earlier=earlier
        )
        trials.append(again)
    return evolve(report, trials=tuple(trials), dataset=dataset.name, eval_id=new_run_id())
