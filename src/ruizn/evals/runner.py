"""`ruizn eval`: every case of a dataset run (or re-driven from a recording) `epochs` times,
each in a fresh copy of its fixture, each a normal run built by `ruizn.Agent`, then scored.

Runs at once (`concurrency` > 1) or on a fleet's database (`db`) go through the fleet
(evals/fleetrun.py): one batch on the DBOS queue, at most `concurrency` at once in this
process, or, on `db`, run by `ruizn worker --db` processes alone; the eval's `max_cost` is the
batch's budget (once spent, running runs finish `max_cost` with a `budget_spent` line in
their logs, and runs not begun do not start); the judges' calls are counted after the runs'
own. One run at a time needs no queue: those runs go here, one after another, as do a
re-drive from a recording and a model given as a Python function or Provider (nothing but
this process can build their model; then `concurrency` runs go at once in an anyio task
group under a capacity limiter). Here every call of every run and judge is counted by one
`EvalBudget` asked before each call.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
from attrs import field, frozen

from ruizn.cassette.rerun import rerun_async
from ruizn.effects.models.pricing import Pricer, default_pricer, unpriced
from ruizn.effects.runlog.reader import iter_events
from ruizn.effects.runlog.store import new_run_id
from ruizn.evals.dataset import Case, Dataset
from ruizn.evals.fleetrun import FleetEnd, FleetJob, in_background, run_on_fleet
from ruizn.evals.recordings import recordings_by_goal
from ruizn.evals.report import EvalReport, Outcome, Trial
from ruizn.evals.scorers import Facts, ScorerSpec, Verdict
from ruizn.evals.scoring import JUDGE_SYSTEM, facts_of, importable, judge_label, verdicts_of
from ruizn.events import Event, LlmResponse
from ruizn.resuming import UntrustedRun
from ruizn.settings import ConfigError
from ruizn.shell.agent import Agent
from ruizn.shell.outcome import RunResult, Session
from ruizn.shell.toolkit import ToolLike
from ruizn.state import Status

__all__ = ["EvalBudget", "Evaluation", "evaluate_async", "trial_of"]


class EvalBudget:
    """The eval's `--max-cost`: what its model calls have cost so far, counted from the
    events (each `llm_response`'s cost), and asked by every run before each call."""

    def __init__(self, limit: float | None) -> None:
        self.limit = limit
        self.total = 0.0

    def __call__(self, event: Event) -> None:
        if isinstance(event, LlmResponse) and event.cost is not None:
            self.total += event.cost

    def spent(self) -> tuple[str, float, float] | None:
        if self.limit is None or self.total < self.limit:
            return None
        return ("the eval's --max-cost", self.limit, self.total)


@frozen(kw_only=True)
class Evaluation:
    """How to run a dataset: everything but the dataset."""

    model: Any = None  # a model id, a function, a Provider; None: the settings' default
    epochs: int = 1
    concurrency: int = 1
    max_cost: float | None = None
    min_pass: float = 1.0
    root: Path  # the eval's folders go under ROOT/EVAL_ID (workspaces)
    runs: Path  # where the runs are stored (a run store's folder)
    tools: tuple[ToolLike, ...] = ()
    # run settings for every case (a case's own win)
    options: Mapping[str, Any] = field(factory=dict)
    recordings: Path | None = None  # re-drive each case from a run recorded here
    trust: bool = False  # accept recordings not made here (what they grant)
    judge_model: str | None = None  # an LLMJudge's model when it names none
    pricer: Pricer | None = None
    on_trial: Callable[[Trial], None] | None = None
    db: str | None = None  # a fleet's database: its workers take the eval's runs too
    on_notice: Callable[[str], None] | None = None  # the fleet's warnings (one line each)


async def evaluate_async(dataset: Dataset, how: Evaluation) -> EvalReport:
    """Run `dataset` as `how` says and score it. Raises ConfigError for options that cannot
    work for any case (before anything runs)."""
    if how.epochs < 1 or how.concurrency < 1:
        raise ConfigError("--epochs and --concurrency must be at least 1")
    pricer = how.pricer if how.pricer is not None else default_pricer()
    if how.max_cost is not None and how.recordings is None:
        model = how.model if isinstance(how.model, str) else how.options.get("model")
        problem = unpriced(str(model or _default_model()), "--max-cost", pricer)
        if problem is not None:
            raise ConfigError(problem)
    if dataset.path is not None:
        importable(dataset.path.resolve().parent)
    eval_id = new_run_id()
    recorded = recordings_by_goal(how.recordings) if how.recordings is not None else None
    runner = _Runner(dataset, how, eval_id, pricer, recorded)
    jobs = [(case, epoch) for epoch in range(1, how.epochs + 1) for case in dataset.cases]
    queueable = how.recordings is None and (how.model is None or isinstance(how.model, str))
    queued = queueable and (how.concurrency > 1 or how.db is not None)
    if how.db is not None:
        _workers_can_run(how, queueable)
    found: dict[tuple[str, int], Trial] = {}
    if queued:
        for trial in await runner.on_fleet(jobs):
            found[(trial.case, trial.epoch)] = trial
            if how.on_trial is not None:
                how.on_trial(trial)
    limiter = anyio.CapacityLimiter(how.concurrency)

    async def one(case: Case, epoch: int) -> None:
        async with limiter:
            trial = await runner.trial(case, epoch)
        found[(case.name, epoch)] = trial
        if how.on_trial is not None:
            how.on_trial(trial)

    async with anyio.create_task_group() as group:
        for case, epoch in jobs if not queued else ():
            group.start_soon(one, case, epoch)
    trials = tuple(found[(c.name, e)] for c in dataset.cases for e in range(1, how.epochs + 1))
    return EvalReport(
        dataset=dataset.name,
        eval_id=eval_id,
        epochs=how.epochs,
        trials=trials,
        max_cost=how.max_cost,
        budget_note=_budget_note(runner.budget, trials),
        judge_cost=runner.judge_cost,
        offline=how.recordings is not None,
        min_pass=how.min_pass,
    )


def _workers_can_run(how: Evaluation, queueable: bool) -> None:
    """Raises ConfigError for what the fleet's workers (`--db`) cannot honour."""
    if not queueable:
        raise ConfigError(
            "--db queues the eval's runs for the fleet's workers: give the model as a model id,"
            " and no --recordings"
        )
    if how.concurrency > 1:
        raise ConfigError(
            "with --db the fleet's workers run the eval's runs, at the workers' --concurrency:"
            " give it to `ruizn worker`"
        )
    if how.tools:
        raise ConfigError(
            "tools given as Python objects cannot reach the fleet's workers: with --db, give"
            " them as --tool MODULE:ATTR (every worker imports them)"
        )


def _default_model() -> str:
    from ruizn.defaults import DEFAULT_MODEL

    return DEFAULT_MODEL


def _budget_note(budget: EvalBudget, trials: Sequence[Trial]) -> str | None:
    if budget.spent() is None:
        return None
    stopped = sum(t.outcome == "stopped" for t in trials)
    skipped = sum(t.outcome == "not_run" for t in trials)
    return (
        f"the eval's budget ${budget.limit:.4f} is spent (${budget.total:.4f}):"
        f" {stopped} runs stopped, {skipped} not run"
    )


class _Runner:
    def __init__(
        self,
        dataset: Dataset,
        how: Evaluation,
        eval_id: str,
        pricer: Pricer,
        recorded: Mapping[str, tuple[Path, ...]] | None,
    ) -> None:
        self.dataset = dataset
        self.how = how
        self.folder = how.root / eval_id
        self.pricer = pricer
        self.recorded = recorded
        self.budget = EvalBudget(how.max_cost)
        self.judge_cost = 0.0  # what the LLMJudge runs cost (each trial's cost is its run's)

    def workspace(self, case: Case, epoch: int) -> Path:
        # Numbered, so two names that read alike as folder names never share one.
        number = self.dataset.cases.index(case) + 1
        return self.folder / f"{number}-{_slug(case.name)}" / f"epoch-{epoch}"

    async def on_fleet(self, jobs: Sequence[tuple[Case, int]]) -> list[Trial]:
        """Every job a run of one fleet batch; scored once all have ended."""
        queued: list[FleetJob] = []
        for case, epoch in jobs:
            workspace = self.workspace(case, epoch)
            _fresh(workspace, case.fixture)
            settings = {**self.how.options, **case.options}
            model = settings.pop("model", None) or self.how.model
            number = self.dataset.cases.index(case) + 1
            queued.append(
                FleetJob(
                    case=case,
                    epoch=epoch,
                    run_id=f"{self.folder.name}-{number}-{epoch}",
                    workspace=workspace,
                    settings=settings if model is None else {**settings, "model": model},
                )
            )
        ends, spent = await in_background(
            lambda: run_on_fleet(
                queued,
                folder=self.folder,
                runs=self.how.runs,
                concurrency=self.how.concurrency,
                max_cost=self.how.max_cost,
                database=self.how.db,
                tools=self.how.tools,
                warn=self.how.on_notice or (lambda _line: None),
            )
        )
        self.budget.total += spent  # the judges' calls count after the runs' own
        return [await self._scored(end) for end in ends]

    async def _scored(self, end: FleetEnd) -> Trial:
        case, epoch, workspace = end.job.case, end.job.epoch, end.job.workspace
        if end.result is None:
            return Trial(
                case=case.name,
                epoch=epoch,
                outcome="not_run" if end.not_run else "error",
                workspace=str(workspace),
                reason="budget spent" if end.not_run else end.reason,
            )
        return await trial_of(case, epoch, end.result, workspace, self.judge)

    async def trial(self, case: Case, epoch: int) -> Trial:
        if self.budget.spent() is not None:
            return Trial(case=case.name, epoch=epoch, outcome="not_run", reason="budget spent")
        workspace = self.workspace(case, epoch)
        try:
            _fresh(workspace, case.fixture)
            if self.recorded is not None:
                return await self._redriven(case, epoch, workspace)
            result = await self._agent(case, workspace).run_async(case.goal)
        except Exception as exc:  # one case's failure is its trial's, not the eval's
            return Trial(
                case=case.name,
                epoch=epoch,
                outcome="error",
                workspace=str(workspace),
                reason=f"{type(exc).__name__}: {exc}",
            )
        return await trial_of(case, epoch, result, workspace, self.judge)

    def _agent(self, case: Case, workspace: Path) -> Agent:
        options = {**self.how.options, **case.options}
        model = options.pop("model", None) or self.how.model
        return Agent(
            model,
            tools=self.how.tools,
            log_dir=self.how.runs,
            subscribers=(self.budget,),
            budget=self.budget,
            pricer=self.pricer,
            **{**options, "workspace": str(workspace)},
        )

    async def _redriven(self, case: Case, epoch: int, workspace: Path) -> Trial:
        assert self.recorded is not None
        found = self.recorded.get(case.goal, ())
        if not found:
            return Trial(
                case=case.name,
                epoch=epoch,
                outcome="not_run",
                reason=f"no recording of this goal in {self.how.recordings}",
            )
        recording = found[(epoch - 1) % len(found)]
        agent = Agent(
            tools=self.how.tools,
            log_dir=self.how.runs,
            pricer=self.pricer,
            workspace=str(workspace),
        )
        try:
            rerun = await rerun_async(agent, recording, trust=self.how.trust)
        except UntrustedRun as exc:  # said with this command's flag, not rerun's
            return Trial(
                case=case.name,
                epoch=epoch,
                outcome="error",
                workspace=str(workspace),
                reason=f"recording {exc.run_id} {exc.reason}: its log would grant"
                f" {exc.grant.summary()}; check it, then run the eval with --trust",
            )
        result = Session.of(rerun.state, rerun.run_id, rerun.log_path)
        trial = await trial_of(case, epoch, result, workspace, None)
        if rerun.divergence is None:
            return trial
        d = rerun.divergence
        where = f" (call {d.call_id}, tool {d.tool})" if d.call_id else ""
        return Trial(
            case=trial.case,
            epoch=epoch,
            outcome="diverged",
            run_id=trial.run_id,
            log_path=trial.log_path,
            workspace=trial.workspace,
            status=trial.status,
            steps=trial.steps,
            cost=trial.cost,
            elapsed=trial.elapsed,
            verdicts=trial.verdicts,
            reason=f"diverged from {recording.parent.name} at seq {d.seq}{where}: {d.what}",
        )

    async def judge(self, spec: ScorerSpec, case: Case, facts: Facts) -> Verdict:
        """Ask a model, through `ruizn.Agent` (a priced run of its own, in the eval's runs),
        whether the output meets the rubric."""
        name = judge_label(spec)
        model = spec.args.get("model") or self.how.judge_model or self.how.model
        if isinstance(model, str) and model.startswith("anthropic:"):
            model = model.removeprefix("anthropic:")
        if self.budget.spent() is not None:
            return Verdict(scorer=name, passed=False, score=0.0, reason="not judged: budget spent")
        judges = self.folder / "judges"
        judges.mkdir(parents=True, exist_ok=True)
        agent = Agent(
            model,
            builtins=False,
            log_dir=self.how.runs,
            subscribers=(self.budget,),
            budget=self.budget,
            pricer=self.pricer,
            workspace=str(judges),
            system=JUDGE_SYSTEM,
            max_steps=1,
            project_instructions=False,
        )
        result = await agent.run_async(_judge_prompt(spec, case, facts))
        self.judge_cost += result.cost or 0.0
        text = result.output if isinstance(result.output, str) else ""
        first, _, rest = text.strip().partition("\n")
        word = first.strip().strip("*#: ").upper()
        reason = f"judge run {result.run_id}: {rest.strip() or first.strip()}"
        if result.status is not Status.SUCCESS or word not in ("PASS", "FAIL"):
            why = result.error or f"answered {first.strip()[:60]!r}, not PASS or FAIL"
            reason = f"judge run {result.run_id}: {why}"
            return Verdict(scorer=name, passed=False, score=0.0, reason=reason)
        return Verdict(
            scorer=name, passed=word == "PASS", score=float(word == "PASS"), reason=reason
        )


def _judge_prompt(spec: ScorerSpec, case: Case, facts: Facts) -> str:
    parts = [f"Rubric:\n{spec.args['rubric']}"]
    if spec.args.get("include_input"):
        parts.append(f"The agent's goal:\n{case.goal}")
    if spec.args.get("include_expected_output") and case.expected_output is not None:
        parts.append(f"The expected output:\n{case.expected_output}")
    parts.append(f"The agent's output:\n{facts.output}")
    parts.append("Does the output meet the rubric? PASS or FAIL on the first line, then why.")
    return "\n\n".join(parts)


async def trial_of(
    case: Case,
    epoch: int,
    result: RunResult,
    workspace: Path | None,
    judge: Any,
    *,
    elapsed: float | None = None,
    earlier: Mapping[str, Verdict] | None = None,
) -> Trial:
    """A finished run scored as `case`'s trial `epoch`."""
    facts = facts_of(case, result, workspace)
    log_path = result.log_path

    def events() -> list[Event]:
        return list(iter_events(log_path)) if log_path is not None else []

    verdicts = await verdicts_of(
        case, facts, result=result, events=events, judge=judge, earlier=earlier
    )
    state = result.state
    outcome: Outcome
    reason = None
    if state.budget_spent is not None:
        outcome, reason = "stopped", f"stopped: {state.budget_spent} is spent"
    elif state.status is Status.ERROR:
        outcome, reason = "error", state.error
    else:
        outcome = "passed" if all(v.passed for v in verdicts) else "failed"
    return Trial(
        case=case.name,
        epoch=epoch,
        outcome=outcome,
        run_id=result.run_id,
        log_path=None if log_path is None else str(log_path),
        workspace=None if workspace is None else str(workspace),
        status=state.status.value,
        steps=state.step,
        cost=state.total_cost,
        elapsed=round(elapsed if elapsed is not None else state.elapsed, 3),
        verdicts=verdicts,
        reason=reason,
    )


def _fresh(workspace: Path, fixture: Path | None) -> None:
    """The case's workspace: a copy of its fixture (links copied as links), never a folder
    that was there before."""
    workspace.parent.mkdir(parents=True, exist_ok=True)
    if fixture is None:
        workspace.mkdir()
    else:
        shutil.copytree(fixture, workspace, symlinks=True)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:60] or "case"
