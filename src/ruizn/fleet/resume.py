"""`ruizn resume --db URL RUN`: a stopped fleet run goes back on the queue, and a worker
continues it.

The machine that asks may have neither the run's workspace nor its tools, so it only decides
(from the stored events, with the same `plan_resume` as a local resume) and queues an order;
the worker that takes the order replays the events, appends `run_resumed` with the new limits
and runs on, as `ruizn resume` does.

A DBOS workflow that has finished cannot run again under its id, so each resume is a workflow
of its own, `RUN/resume-K` (a run id never holds "/", so it cannot be another run's id). K is
one more than the highest K so far, and the order is enqueued with DBOS's "reject" policy:
two resumes asked at once pick the same K and only one is queued.

The order carries `after_seq`, the last stored event when it was given. The worker appends
`run_resumed` only when the run still ends there; when DBOS recovers the order's workflow (its
worker died), a log that has grown past `after_seq` means the order was applied already, and
the run goes on as any recovered run does. So a resume is applied once, however often DBOS
runs its workflow.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from attrs import evolve, frozen

from ruizn.decide import ResumePlan, ResumeRefused, plan_resume
from ruizn.fleet.driver import RunInput, input_from_json, input_to_json
from ruizn.state import ExecutionContext, Status

RESUME_WORKFLOW = "ruizn.resume"
# DBOS statuses of a workflow that is still to run or running: its run must not be resumed.
ACTIVE = frozenset({"ENQUEUED", "PENDING", "DELAYED"})
_MARK = "/resume-"


class FleetResumeRefused(ValueError):
    """The run cannot be resumed on the fleet now; the message is one line saying why."""


class RunNotStored(LookupError):
    """The database holds no event of the run."""


@frozen(kw_only=True)
class ResumeOrder:
    """The input of a resume workflow: which run, from which event, with which limits, and
    the decisions a person gave for the calls it waits on (`--approve/--deny`)."""

    run: RunInput
    after_seq: int
    max_steps: int | None
    max_tokens: int | None
    max_cost: float | None = None
    max_context: int | None = None
    approve: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    reason: str | None = None


@frozen(kw_only=True)
class Workflow:
    """What the check needs of a DBOS workflow of the run (its own or a resume)."""

    workflow_id: str
    status: str
    executor: str | None


def order_to_json(order: ResumeOrder) -> dict[str, Any]:
    return {
        "run": input_to_json(order.run),
        "after_seq": order.after_seq,
        "max_steps": order.max_steps,
        "max_tokens": order.max_tokens,
        "max_cost": order.max_cost,
        "max_context": order.max_context,
        "approve": list(order.approve),
        "deny": list(order.deny),
        "reason": order.reason,
    }


def order_from_json(data: dict[str, Any]) -> ResumeOrder:
    return ResumeOrder(
        run=input_from_json(data["run"]),
        after_seq=data["after_seq"],
        max_steps=data["max_steps"],
        max_tokens=data["max_tokens"],
        max_cost=data.get("max_cost"),
        max_context=data.get("max_context"),
        approve=tuple(data.get("approve", ())),
        deny=tuple(data.get("deny", ())),
        reason=data.get("reason"),
    )


def resume_prefix(run_id: str) -> str:
    return run_id + _MARK


def next_resume_id(run_id: str, workflow_ids: Iterable[str]) -> str:
    """`RUN/resume-K`, K one more than the highest so far (a deleted one is not reused)."""
    prefix = resume_prefix(run_id)
    taken = [
        int(rest)
        for rest in (w.removeprefix(prefix) for w in workflow_ids if w.startswith(prefix))
        if rest.isdigit()
    ]
    return f"{prefix}{max(taken, default=0) + 1}"


def check_resume(
    run_id: str,
    state: ExecutionContext | None,
    workflows: Iterable[Workflow],
    *,
    max_steps: int | None,
    max_tokens: int | None,
    max_cost: float | None = None,
    max_context: int | None = None,
) -> ResumePlan:
    """The limits the run would go on with, or why it cannot go on.

    Raises `FleetResumeRefused` (a run the fleet still has, one that waits for approval, one
    with nothing to resume, limits that leave nothing to do) or `RunNotStored`."""
    for workflow in workflows:
        if workflow.status == "PENDING":
            who = f"worker {workflow.executor}" if workflow.executor else "a worker"
            raise FleetResumeRefused(
                f"run {run_id} is being run by {who} on the fleet; wait for it to end"
            )
        if workflow.status in ACTIVE:
            raise FleetResumeRefused(
                f"run {run_id} is queued on the fleet ({workflow.workflow_id});"
                " wait for a worker to run it"
            )
    if state is None:
        raise RunNotStored(run_id)
    if state.status is Status.AWAITING_APPROVAL:
        # A worker has nobody to ask: resumed as it is, the run would stop again at once.
        raise FleetResumeRefused(
            f"run {run_id} is awaiting approval of tool calls, which a fleet's workers"
            " cannot decide"
        )
    try:
        plan = plan_resume(
            state,
            max_steps=max_steps,
            max_tokens=max_tokens,
            max_cost=max_cost,
            max_context=max_context,
        )
    except ResumeRefused as exc:
        raise FleetResumeRefused(str(exc)) from None
    if plan is None:
        # The words of a local resume; here it is a refusal, since nothing is queued.
        raise FleetResumeRefused(
            f"run {run_id} already finished with {state.status.value}; nothing to resume"
        )
    return plan


def input_of_run(state: ExecutionContext, submitted: dict[str, Any] | None) -> RunInput:
    """The run's input for the worker: as submitted (so a run submitted without a workspace
    goes on in the taking worker's own, as a recovered run does), or, when DBOS no longer
    holds the submission, the settings the run recorded when it started."""
    if submitted is not None:
        return evolve(input_from_json(submitted), run_id=state.run_id)
    return RunInput(run_id=state.run_id, goal=state.goal, settings=state.settings)
