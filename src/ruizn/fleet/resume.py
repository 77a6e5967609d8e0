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

A run that waits for approval goes on only with decisions (`--approve ID|all`, `--deny ID|all
--reason TEXT`): a worker has nobody to ask. They are checked here, against the calls the
stored events show waiting, and the order carries them resolved to those calls' ids (never
"all"), so a worker can only ever decide the calls that waited when the person decided. Each
decision becomes a `tool_approval_decided` event, written by the worker right after the
order's `run_resumed`; a recovered order gives again only the decisions of calls that still
wait (a crash between the two writes), so no call is decided twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from attrs import evolve, frozen

from ruizn.fleet.driver import RunInput, input_from_json, input_to_json
from ruizn.limits import Limits
from ruizn.resuming import ResumePlan, ResumeRefused, plan_resume, resume_decisions
from ruizn.shell.children import split_decisions
from ruizn.shell.outcome import Resume
from ruizn.state import ExecutionContext, JsonObject, Status

RESUME_WORKFLOW = "ruizn.resume"
# DBOS statuses of a workflow that is still to run or running: its run must not be resumed.
ACTIVE = frozenset({"ENQUEUED", "PENDING", "DELAYED"})
_MARK = "/resume-"


class FleetResumeRefused(ValueError):
    """The run cannot be resumed on the fleet now; the message is one line saying why."""


class NothingToQueue(FleetResumeRefused):
    """The run finished with success: nothing to resume (exit 0, as a local resume)."""


class RunNotStored(LookupError):
    """The database holds no event of the run."""


@frozen(kw_only=True)
class ResumeOrder:
    """The input of a resume workflow: which run, from which event, with which limits, and
    the decisions a person gave for the calls it waits on (`--approve/--deny`), as the ids
    of those calls."""

    run: RunInput
    after_seq: int
    limits: Limits
    approve: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    reason: str | None = None

    def request(self) -> Resume:
        """What the worker resumes the run with: the one record a local `ruizn resume`
        builds too."""
        return Resume(
            limits=self.limits,
            approve=self.approve,
            deny=self.deny,
            reason=self.reason,
        )

    def still_waiting(self, state: ExecutionContext) -> ResumeOrder:
        """The order with only the decisions of calls that still wait in `state`: what a
        recovered order gives again (the worker died before it wrote them all)."""
        waiting = {call.id for call in state.awaiting_approval} | {
            call.id for child in state.children_awaiting for call in child.awaiting
        }
        approve = tuple(i for i in self.approve if i in waiting)
        deny = tuple(i for i in self.deny if i in waiting)
        return evolve(self, approve=approve, deny=deny, reason=self.reason if deny else None)


@frozen(kw_only=True)
class Checked:
    """What `check_resume` allows: the limits the run goes on with, and a person's decisions
    for the calls it waits on (ids; none when no call waits)."""

    plan: ResumePlan
    approve: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    reason: str | None = None

    def order(self, run: RunInput, *, after_seq: int) -> ResumeOrder:
        """The order for the workers: this, for the run whose stored log ends at
        `after_seq`."""
        return ResumeOrder(
            run=run,
            after_seq=after_seq,
            limits=self.plan.limits,
            approve=self.approve,
            deny=self.deny,
            reason=self.reason,
        )


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
        # Flat, as queued orders have always been (one may wait in the queue across an
        # upgrade).
        "max_steps": order.limits.max_steps,
        "max_tokens": order.limits.max_tokens,
        "max_cost": order.limits.max_cost,
        "max_context": order.limits.max_context,
        "approve": list(order.approve),
        "deny": list(order.deny),
        "reason": order.reason,
    }


def order_from_json(data: dict[str, Any]) -> ResumeOrder:
    return ResumeOrder(
        run=input_from_json(data["run"]),
        after_seq=data["after_seq"],
        limits=Limits(
            max_steps=data["max_steps"],
            max_tokens=data["max_tokens"],
            max_cost=data.get("max_cost"),
            max_context=data.get("max_context"),
        ),
        approve=tuple(data.get("approve", ())),
        deny=tuple(data.get("deny", ())),
        reason=data.get("reason"),
    )


def resume_prefix(run_id: str) -> str:
    return run_id + _MARK


def _resume_numbers(run_id: str, workflow_ids: Iterable[str]) -> list[int]:
    # A prefix is a LIKE pattern to the database: `_` in a run id matches any character, so
    # what it found is checked again here.
    prefix = resume_prefix(run_id)
    return [
        int(rest)
        for rest in (w.removeprefix(prefix) for w in workflow_ids if w.startswith(prefix))
        if rest.isdigit()
    ]


def next_resume_id(run_id: str, workflow_ids: Iterable[str]) -> str:
    """`RUN/resume-K`, K one more than the highest so far (a deleted one is not reused)."""
    return f"{resume_prefix(run_id)}{max(_resume_numbers(run_id, workflow_ids), default=0) + 1}"


def latest_resume(run_id: str, workflow_ids: Iterable[str]) -> str | None:
    """The run's last resume workflow among `workflow_ids`, if any."""
    numbers = _resume_numbers(run_id, workflow_ids)
    return f"{resume_prefix(run_id)}{max(numbers)}" if numbers else None


def check_resume(
    run_id: str,
    state: ExecutionContext | None,
    workflows: Iterable[Workflow],
    *,
    limits: Limits,
    approve: tuple[str, ...] = (),
    deny: tuple[str, ...] = (),
    reason: str | None = None,
) -> Checked:
    """The limits the run would go on with and the decisions it would apply, or why it
    cannot go on.

    Raises `FleetResumeRefused` (a run the fleet still has, one that waits for approval and
    is given no decision, a decision for a call that does not wait, one with nothing to
    resume, limits that leave nothing to do) or `RunNotStored`."""
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
    if state.status is Status.AWAITING_APPROVAL and not (approve or deny):
        # A worker has nobody to ask: resumed as it is, the run would stop again at once.
        waiting = ", ".join(call.id for call in state.awaiting_approval)
        raise FleetResumeRefused(
            f"run {run_id} is awaiting approval of tool calls ({waiting}), which a fleet's"
            " workers cannot decide: give --approve ID|all or --deny ID|all"
        )
    try:
        plan = plan_resume(state, limits)
    except ResumeRefused as exc:
        raise FleetResumeRefused(str(exc)) from None
    if plan is None:
        # The words of a local resume; here it is a refusal, since nothing is queued.
        if approve or deny:
            raise FleetResumeRefused(
                f"run {run_id} finished with {state.status.value}: no call awaits approval"
            )
        raise NothingToQueue(
            f"run {run_id} already finished with {state.status.value}; nothing to resume"
        )
    # A subagent's calls that wait stop the tree: their ids go to the child (by the worker
    # that resumes this run, fleet/children.py), resolved here to the calls that wait.
    own_approve, own_deny, forward = split_decisions(state, approve, deny)
    try:
        # The stored events say which calls wait: requested and not decided. (A worker
        # requests every approval a turn needs before it stops, so none is missing.)
        decisions = resume_decisions(
            state,
            _asked_already,
            approve=own_approve,
            deny=own_deny,
            reason=reason if own_deny or not forward else None,
        )
    except ResumeRefused as exc:
        raise FleetResumeRefused(str(exc)) from None
    theirs = _resolved(state, forward)
    denied = (*(d.id for d in decisions if not d.approved), *theirs["deny"])
    return Checked(
        plan=plan,
        approve=(*(d.id for d in decisions if d.approved), *theirs["approve"]),
        deny=denied,
        reason=reason if denied else None,
    )


def _resolved(
    state: ExecutionContext, forward: Mapping[str, Mapping[str, tuple[str, ...]]]
) -> dict[str, tuple[str, ...]]:
    """The children's decisions as the ids of their waiting calls ("all": each of them)."""
    out: dict[str, list[str]] = {"approve": [], "deny": []}
    for child in state.children_awaiting:
        picked = forward.get(child.id)
        if picked is None:
            continue
        approve, deny = picked["approve"], picked["deny"]
        for call in child.awaiting:  # as resume_decisions: a named id wins over "all"
            if call.id in approve or ("all" in approve and call.id not in deny):
                out["approve"].append(call.id)
            elif call.id in deny or "all" in deny:
                out["deny"].append(call.id)
    return {kind: tuple(ids) for kind, ids in out.items()}


def _asked_already(_name: str, _input: JsonObject) -> bool:
    """The asking machine has not the run's tools: only calls whose approval was requested
    (in the stored events) count as waiting."""
    return False


def input_of_run(state: ExecutionContext, submitted: dict[str, Any] | None) -> RunInput:
    """The run's input for the worker: as submitted (so a run submitted without a workspace
    goes on in the taking worker's own, as a recovered run does), or, when DBOS no longer
    holds the submission, the settings the run recorded when it started."""
    if submitted is not None:
        return evolve(input_from_json(submitted), run_id=state.run_id)
    return RunInput(run_id=state.run_id, goal=state.goal, settings=state.settings)
