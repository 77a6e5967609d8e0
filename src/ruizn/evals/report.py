"""An eval's report: one `Trial` per case and epoch, what they add up to, and its forms (JSON,
the terminal's table, JUnit XML, a comparison of two reports). Pure: no I/O here."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal
from xml.etree import ElementTree

from attrs import evolve, field, frozen

from ruizn.evals.scorers import Verdict

__all__ = [
    "REPORT_VERSION",
    "CaseStats",
    "Comparison",
    "EvalReport",
    "Outcome",
    "ReportError",
    "Trial",
    "compare",
    "pass_at_k",
    "pass_hat_k",
    "report_from_json",
    "report_to_json",
    "table",
    "to_junit",
]

REPORT_VERSION = 1
# passed/failed: scored; error: the run could not be made or ended in error; diverged: a
# re-drive left its recording; stopped: the eval's budget ended the run; not_run: the budget
# was spent first (or no recording matched).
Outcome = Literal["passed", "failed", "error", "diverged", "stopped", "not_run"]


@frozen(kw_only=True)
class Trial:
    case: str
    epoch: int  # 1-based
    outcome: Outcome
    run_id: str | None = None
    log_path: str | None = None
    workspace: str | None = None
    status: str | None = None  # the run's status
    steps: int = 0
    cost: float | None = None
    elapsed: float = 0.0
    verdicts: tuple[Verdict, ...] = ()
    reason: str | None = None  # why it failed, errored, diverged or did not run

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    @property
    def score(self) -> float:
        if not self.verdicts:
            return 1.0 if self.passed else 0.0
        return sum(verdict.score for verdict in self.verdicts) / len(self.verdicts)

    def why(self) -> str | None:
        """One line: the first failed scorer, or the reason."""
        failed = [v for v in self.verdicts if not v.passed]
        if self.outcome == "failed" and failed:
            first = failed[0]
            return f"{first.scorer}: {first.reason or 'failed'}"
        return self.reason


@frozen(kw_only=True)
class CaseStats:
    case: str
    trials: int
    passed: int
    mean_score: float
    pass_at_k: float  # k = the eval's epochs
    pass_hat_k: float
    cost: float
    elapsed: float


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k trials drawn from n (c of them passed) passed."""
    if n <= 0 or k <= 0 or k > n:
        return 0.0
    if n - c < k:
        return 1.0
    # One division of integers, so pass@1 is exactly c / n (and never below pass^k).
    return (math.comb(n, k) - math.comb(n - c, k)) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """The chance that all k trials drawn from n (c of them passed) passed."""
    if n <= 0 or k <= 0 or k > n:
        return 0.0
    return math.comb(c, k) / math.comb(n, k)


@frozen(kw_only=True)
class EvalReport:
    dataset: str
    eval_id: str
    epochs: int
    trials: tuple[Trial, ...]
    max_cost: float | None = None
    budget_note: str | None = None  # the eval's budget was spent: what it stopped
    offline: bool = False  # re-driven from recordings
    judge_cost: float = 0.0  # USD, the LLMJudge runs (not in any trial's cost)
    version: int = REPORT_VERSION
    min_pass: float = field(default=1.0)

    @property
    def passed(self) -> int:
        return sum(trial.passed for trial in self.trials)

    @property
    def pass_rate(self) -> float:
        return self.passed / len(self.trials) if self.trials else 0.0

    @property
    def ok(self) -> bool:
        """The pass rate meets `min_pass` (what `ruizn eval` exits 0 for)."""
        return bool(self.trials) and self.pass_rate + 1e-9 >= self.min_pass

    @property
    def cost(self) -> float:
        return sum(trial.cost or 0.0 for trial in self.trials)

    @property
    def elapsed(self) -> float:
        return sum(trial.elapsed for trial in self.trials)

    def cases(self) -> tuple[CaseStats, ...]:
        order: dict[str, list[Trial]] = {}
        for trial in self.trials:
            order.setdefault(trial.case, []).append(trial)
        return tuple(_stats(name, trials, self.epochs) for name, trials in order.items())

    def with_min_pass(self, min_pass: float) -> EvalReport:
        return evolve(self, min_pass=min_pass)

    def lines(self, width: int = 80) -> list[str]:
        """The terminal's table (`ruizn eval` prints it)."""
        return table(self, width)


def _stats(name: str, trials: Sequence[Trial], k: int) -> CaseStats:
    n, c = len(trials), sum(trial.passed for trial in trials)
    return CaseStats(
        case=name,
        trials=n,
        passed=c,
        mean_score=sum(trial.score for trial in trials) / n,
        pass_at_k=pass_at_k(n, c, min(k, n)),
        pass_hat_k=pass_hat_k(n, c, min(k, n)),
        cost=sum(trial.cost or 0.0 for trial in trials),
        elapsed=sum(trial.elapsed for trial in trials),
    )


# -- JSON -----------------------------------------------------------------------------------


def report_to_json(report: EvalReport) -> dict[str, Any]:
    return {
        "version": report.version,
        "dataset": report.dataset,
        "eval_id": report.eval_id,
        "epochs": report.epochs,
        "max_cost": report.max_cost,
        "min_pass": report.min_pass,
        "offline": report.offline,
        "budget_note": report.budget_note,
        "judge_cost": report.judge_cost,
        "summary": {
            "trials": len(report.trials),
            "passed": report.passed,
            "pass_rate": report.pass_rate,
            "ok": report.ok,
            "cost": report.cost,
            "elapsed": report.elapsed,
        },
        "cases": [
            {
                "case": s.case,
                "trials": s.trials,
                "passed": s.passed,
                "mean_score": s.mean_score,
                f"pass@{report.epochs}": s.pass_at_k,
                f"pass^{report.epochs}": s.pass_hat_k,
                "cost": s.cost,
                "elapsed": s.elapsed,
            }
            for s in report.cases()
        ],
        "trials": [_trial_json(trial) for trial in report.trials],
    }


def _trial_json(trial: Trial) -> dict[str, Any]:
    return {
        "case": trial.case,
        "epoch": trial.epoch,
        "outcome": trial.outcome,
        "score": trial.score,
        "run_id": trial.run_id,
        "log_path": trial.log_path,
        "workspace": trial.workspace,
        "status": trial.status,
        "steps": trial.steps,
        "cost": trial.cost,
        "elapsed": trial.elapsed,
        "reason": trial.reason,
        "verdicts": [
            {"scorer": v.scorer, "passed": v.passed, "score": v.score, "reason": v.reason}
            for v in trial.verdicts
        ],
    }


class ReportError(ValueError):
    """A file that is not an eval report ruizn can read."""


def report_from_json(data: Any) -> EvalReport:
    """A report as `report_to_json` wrote it. Raises ReportError. Only data is read: run
    ids and paths, never code."""
    try:
        if data["version"] != REPORT_VERSION:
            raise ReportError(f"report version {data['version']} (this ruizn reads 1)")
        trials = tuple(
            Trial(
                case=str(t["case"]),
                epoch=int(t["epoch"]),
                outcome=t["outcome"],
                run_id=t["run_id"],
                log_path=t["log_path"],
                workspace=t["workspace"],
                status=t["status"],
                steps=int(t["steps"]),
                cost=t["cost"],
                elapsed=float(t["elapsed"]),
                reason=t["reason"],
                verdicts=tuple(
                    Verdict(
                        scorer=str(v["scorer"]),
                        passed=bool(v["passed"]),
                        score=float(v["score"]),
                        reason=v["reason"],
                    )
                    for v in t["verdicts"]
                ),
            )
            for t in data["trials"]
        )
        return EvalReport(
            dataset=str(data["dataset"]),
            eval_id=str(data["eval_id"]),
            epochs=int(data["epochs"]),
            trials=trials,
            max_cost=data["max_cost"],
            budget_note=data["budget_note"],
            offline=bool(data["offline"]),
            judge_cost=float(data["judge_cost"]),
            min_pass=float(data["min_pass"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ReportError):
            raise
        raise ReportError(f"not an eval report: {type(exc).__name__} {exc}") from None


# -- the terminal's table -------------------------------------------------------------------


def shorten(text: str, room: int) -> str:
    return text if len(text) <= room else text[: max(0, room - 3)] + "..."


_MARK = {
    "passed": "pass",
    "failed": "FAIL",
    "error": "ERROR",
    "diverged": "DIVERGED",
    "stopped": "STOPPED",
    "not_run": "not run",
}


def table(report: EvalReport, width: int = 80) -> list[str]:
    """Case x epoch: result, score, steps, cost, time; then each case's figures over its
    epochs, and the totals. Every line fits `width` (at least 60) columns."""
    name_width = max(12, width - 54)
    lines = [
        f"{'case':<{name_width}} {'ep':>3} {'result':<8} {'score':>5} {'steps':>5}"
        f" {'cost':>9} {'time':>8}"
    ]
    for trial in report.trials:
        cost = "-" if trial.cost is None else f"${trial.cost:.4f}"
        lines.append(
            f"{shorten(trial.case, name_width):<{name_width}} {trial.epoch:>3}"
            f" {_MARK[trial.outcome]:<8} {trial.score:>5.2f} {trial.steps:>5}"
            f" {cost:>9} {trial.elapsed:>7.1f}s"
        )
        why = trial.why()
        if why and not trial.passed:
            lines.append("    " + shorten(why.replace("\n", " "), width - 4))
    if report.epochs > 1:
        k = report.epochs
        lines.append("")
        lines.append(
            f"{'case':<{name_width}} {'passed':>7} {'mean':>6} {f'pass@{k}':>7} {f'pass^{k}':>7}"
        )
        for s in report.cases():
            lines.append(
                f"{shorten(s.case, name_width):<{name_width}} {f'{s.passed}/{s.trials}':>7}"
                f" {s.mean_score:>6.2f} {s.pass_at_k:>7.2f} {s.pass_hat_k:>7.2f}"
            )
    lines.append("")
    verdict = "ok" if report.ok else "FAILED"
    judges = f" (+${report.judge_cost:.4f} judges)" if report.judge_cost else ""
    unpriced = sum(t.cost is None and t.run_id is not None for t in report.trials)
    if unpriced:  # a model with no known price: the sum leaves these runs out
        judges += f" ({unpriced} runs unpriced)"
    lines.append(
        f"{report.passed}/{len(report.trials)} passed ({report.pass_rate:.0%}, needed"
        f" {report.min_pass:.0%}): {verdict}; ${report.cost:.4f}{judges}, {report.elapsed:.1f} s"
    )
    if report.budget_note:
        lines.append(shorten(report.budget_note, width))
    return [line[:width] for line in lines]


# -- JUnit XML ------------------------------------------------------------------------------


def to_junit(report: EvalReport) -> str:
    """JUnit XML: one testsuite (the dataset), one testcase per case and epoch; a failed
    scorer is a <failure>, an error or divergence an <error>, a trial not run <skipped>."""
    counts = {kind: 0 for kind in ("failures", "errors", "skipped")}
    suite = ElementTree.Element("testsuite", name=report.dataset)
    for trial in report.trials:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=report.dataset,
            name=f"{trial.case} [epoch {trial.epoch}]",
            time=f"{trial.elapsed:.3f}",
        )
        message = trial.why() or trial.outcome
        detail = _detail(trial)
        if trial.outcome == "failed":
            counts["failures"] += 1
            node = ElementTree.SubElement(case, "failure", message=message, type="failed")
            node.text = detail
        elif trial.outcome in ("error", "diverged", "stopped"):
            counts["errors"] += 1
            node = ElementTree.SubElement(case, "error", message=message, type=trial.outcome)
            node.text = detail
        elif trial.outcome == "not_run":
            counts["skipped"] += 1
            ElementTree.SubElement(case, "skipped", message=message)
        if trial.run_id:
            out = ElementTree.SubElement(case, "system-out")
            out.text = f"run {trial.run_id}: {trial.log_path}\n"
    suite.set("tests", str(len(report.trials)))
    for kind, count in counts.items():
        suite.set(kind, str(count))
    suite.set("time", f"{report.elapsed:.3f}")
    root = ElementTree.Element("testsuites", name=f"ruizn eval {report.eval_id}")
    root.append(suite)
    for kind in ("tests", "failures", "errors", "skipped", "time"):
        root.set(kind, suite.get(kind, "0"))
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(
        root, encoding="unicode"
    )


def _detail(trial: Trial) -> str:
    lines = [
        f"{v.scorer}: {'pass' if v.passed else 'FAIL'}" + (f" ({v.reason})" if v.reason else "")
        for v in trial.verdicts
    ]
    if trial.reason:
        lines.append(trial.reason)
    return "\n".join(lines)


# -- two reports compared -------------------------------------------------------------------


@frozen(kw_only=True)
class Comparison:
    better: tuple[tuple[str, str, str], ...]  # (case, before, after) as "passed/trials"
    worse: tuple[tuple[str, str, str], ...]
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    cost: tuple[float, float]
    elapsed: tuple[float, float]

    def lines(self) -> list[str]:
        out = [f"better: {c} {a} -> {b}" for c, a, b in self.better]
        out += [f"worse:  {c} {a} -> {b}" for c, a, b in self.worse]
        out += [f"only in A: {c}" for c in self.only_a]
        out += [f"only in B: {c}" for c in self.only_b]
        if not (self.better or self.worse):
            out.append("no case got better or worse")
        (ca, cb), (ta, tb) = self.cost, self.elapsed
        out.append(f"cost: ${ca:.4f} -> ${cb:.4f} ({cb - ca:+.4f})")
        out.append(f"time: {ta:.1f} s -> {tb:.1f} s ({tb - ta:+.1f} s)")
        return out


def compare(a: EvalReport, b: EvalReport) -> Comparison:
    """Cases whose pass rate rose or fell from `a` to `b`, and the cost and time deltas."""
    sa: Mapping[str, CaseStats] = {s.case: s for s in a.cases()}
    sb: Mapping[str, CaseStats] = {s.case: s for s in b.cases()}
    better, worse = [], []
    for name in sa.keys() & sb.keys():
        x, y = sa[name], sb[name]
        rates = (x.passed / x.trials, y.passed / y.trials)
        row = (name, f"{x.passed}/{x.trials}", f"{y.passed}/{y.trials}")
        if rates[1] > rates[0]:
            better.append(row)
        elif rates[1] < rates[0]:
            worse.append(row)
    return Comparison(
        better=tuple(sorted(better)),
        worse=tuple(sorted(worse)),
        only_a=tuple(sorted(sa.keys() - sb.keys())),
        only_b=tuple(sorted(sb.keys() - sa.keys())),
        cost=(a.cost, b.cost),
        elapsed=(a.elapsed, b.elapsed),
    )
