"""Which operator action fits which run: the one table and the one selector (issue 27).

`ACTIONS` is the table of every action on a run or one of its steps: its permission, whether it
acts on a step, its button, its confirmation page's words, its audit code, the engine service a
run-level action calls, and the rule saying when it fits. `run_actions_fitting` is the one
selector that applies those rules: the run page's buttons (`ops/operator_admin.py`), the
confirmation page (a GET of an action that does not fit says so and offers no form) and the
audited services (`ops/run_services.py`, which refuse an action that does not fit before they
call the engine) all ask it. The engine's own conditional statements stay the concurrency check:
a row that moved between this question and the statement is refused there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scheduler.admin import OPERATE_PERMISSION
from scheduler.models import Run, Step
from scheduler.permissions import staff_may
from scheduler.services import (
    RunNotCancellable,
    run_cancel,
    run_compensate,
    run_give_up,
    run_resume_compensation,
)

from .models import OperatorAction

Action = OperatorAction.Action

# The operator's own permissions (`ops.OperatorAction.Meta.permissions`); cancel, resume and
# give up need "may operate" runs (`scheduler.change_run`).
P_RESUBMIT = "ops.resubmit_step"
P_COMPENSATE = "ops.compensate_run"
P_RETRY_COMPENSATION = "ops.retry_compensation"
P_MARK_DONE = "ops.mark_compensation_done"
P_BREAKER = "ops.operate_breaker"
P_BULK = "ops.bulk_resubmit"
P_SWEEP_PREVIEW = "ops.view_sweep_preview"
P_OPERATE = OPERATE_PERMISSION


@dataclass(frozen=True)
class RunFacts:
    """What the rules read about a run, read once per question: the run, its steps in order,
    whether it was resubmitted before, and whether its undoing has begun (a compensation step
    attempted or past Waiting/Pending)."""

    run: Run
    steps: list[Step]
    resubmitted: bool
    undo_started: bool


def _run_in(*states: str) -> Callable[[RunFacts, Step | None], bool]:
    return lambda facts, _step: facts.run.state in states


def _resubmit_run_fits(facts: RunFacts, _step: Step | None) -> bool:
    return facts.run.state == Run.State.COMPENSATED and not facts.resubmitted


def _resubmit_step_fits(facts: RunFacts, step: Step | None) -> bool:
    """A compensation step in Error of a Failed run; or a forward step in Error of a run that
    began compensating, was not cancelled, and has undone nothing yet (in place)."""
    if step is None or step.process_state != Step.State.ERROR:
        return False
    if step.kind == Step.Kind.COMPENSATION:
        return facts.run.state == Run.State.FAILED
    return (
        facts.run.state == Run.State.COMPENSATING
        and not facts.run.cancel_requested
        and not facts.undo_started
    )


def _retry_compensation_fits(_facts: RunFacts, step: Step | None) -> bool:
    return (
        step is not None
        and step.kind == Step.Kind.COMPENSATION
        and step.process_state == Step.State.PENDING
        and step.failure_count > 0
    )


MARKABLE_STATES = (Step.State.WAITING, Step.State.PENDING, Step.State.PROCESSING, Step.State.ERROR)


def _mark_done_fits(facts: RunFacts, step: Step | None) -> bool:
    return (
        step is not None
        and step.kind == Step.Kind.COMPENSATION
        and step.process_state in MARKABLE_STATES
        and facts.run.state in (Run.State.COMPENSATING, Run.State.FAILED)
    )


def _compensate(run: Run, actor: str, why: str) -> None:
    if not run_compensate(run_id=run.pk, reason=f"compensated by {actor}: {why}"):
        raise RunNotCancellable(
            f"run is {run.get_state_display()}; only a pending or running run can be compensated"
        )


@dataclass(frozen=True)
class RunAction:
    """One action: its permission, whether it acts on a step, its button's label, the
    confirmation page's title and what it says will happen, the audit code, the engine service
    (run-level actions: `engine(run, actor, reason)`), when it fits, and what a refusal says."""

    permission: str
    on_step: bool
    button: str
    title: str
    explains: str
    audit: str
    fits: Callable[[RunFacts, Step | None], bool]
    refusal: str
    engine: Callable[[Run, str, str], object] | None = None


ACTIONS: dict[str, RunAction] = {
    "cancel": RunAction(
        P_OPERATE,
        False,
        "Cancel run",
        "Cancel the run",
        "Steps not started are dropped, the one in flight is stopped, and the steps done are undone "
        "in reverse order. The run ends Cancelled.",
        Action.CANCEL_RUN,
        _run_in(Run.State.PENDING, Run.State.RUNNING),
        "only pending or running runs can be cancelled",
        lambda run, actor, why: run_cancel(run_id=run.pk, actor=actor),
    ),
    "compensate": RunAction(
        P_COMPENSATE,
        False,
        "Compensate run",
        "Compensate the run on purpose",
        "Steps not started are dropped, the one in flight is stopped, and the steps done are undone "
        "in reverse order. The run ends Compensated.",
        Action.COMPENSATE_RUN,
        _run_in(Run.State.PENDING, Run.State.RUNNING),
        "only a pending or running run can be compensated",
        _compensate,
    ),
    "resume": RunAction(
        P_OPERATE,
        False,
        "Resume compensation",
        "Resume compensation",
        "The run's compensation steps in Error go back to Pending with a fresh failure budget and "
        "the run back to Compensating; each sends the idempotency key shown below (a new one "
        "where the remote refused the last one). Fix the cause first.",
        Action.RESUME_COMPENSATION,
        _run_in(Run.State.FAILED),
        "only failed runs can resume compensation",
        lambda run, actor, why: run_resume_compensation(run_id=run.pk, actor=actor),
    ),
    "give_up": RunAction(
        P_OPERATE,
        False,
        "Give up (Failed)",
        "Give the run up",
        "The engine stops compensating: the run ends Failed with your reason and nothing more is "
        "undone. Say what is left and who handles it.",
        Action.GIVE_UP_RUN,
        _run_in(Run.State.COMPENSATING),
        "only a compensating run can be given up",
        lambda run, actor, why: run_give_up(run_id=run.pk, actor=actor, reason=why),
    ),
    "resubmit_run": RunAction(
        P_RESUBMIT,
        False,
        "New run of this input",
        "New run of the same input",
        "The run was compensated. A new run of its input (edit it below if the input was the cause) "
        "starts, linked to this one; both run pages show the link. The input is checked like a new "
        "submission.",
        Action.RESUBMIT_RUN,
        _resubmit_run_fits,
        "only a compensated run not resubmitted before can be run again",
    ),
    "resubmit_step": RunAction(
        P_RESUBMIT,
        True,
        "Resubmit",
        "Resubmit a step in Error",
        "The step goes back to Pending with its failure count reset; the run goes back to "
        "Compensating. Its idempotency key is shown below: a new one if the remote refused the "
        "last one (nothing happened, and the remote would replay its refusal for that key), the "
        "same one otherwise (the remote deduplicates whatever may have happened).",
        Action.RESUBMIT_STEP,
        _resubmit_step_fits,
        "only a failed run's compensation step in Error, or a forward step in Error of a run that "
        "has undone nothing yet, can be resubmitted",
    ),
    "retry_compensation": RunAction(
        P_RETRY_COMPENSATION,
        True,
        "Retry now",
        "Retry a failing compensation now",
        "The compensation step is waiting out its backoff after failures. It becomes due now, with "
        "its failure count reset. Fix the cause first.",
        Action.RETRY_COMPENSATION,
        _retry_compensation_fits,
        "only a compensation step waiting to retry after failures can be retried now",
    ),
    "mark_done": RunAction(
        P_MARK_DONE,
        True,
        "Mark done",
        "Mark a compensation done by hand",
        "The engine will not call this compensation again: the run goes on as if it had succeeded "
        "(the next compensation, or Compensated). Say how it was undone.",
        Action.MARK_COMPENSATION_DONE,
        _mark_done_fits,
        "only a compensation step not yet done, of a compensating or failed run, can be marked done",
    ),
}


@dataclass(frozen=True)
class Fit:
    """An action that fits the run now: `step` is the step it acts on (None: the run)."""

    action: str
    step: Step | None

    @property
    def spec(self) -> RunAction:
        return ACTIONS[self.action]


def _facts(run: Run) -> RunFacts:
    steps = list(run.steps.order_by("seq", "id"))
    undo_started = any(
        s.kind == Step.Kind.COMPENSATION
        and (s.attempts > 0 or s.process_state not in (Step.State.PENDING, Step.State.WAITING))
        for s in steps
    )
    resubmitted = OperatorAction.objects.filter(run_id=run.pk, action=Action.RESUBMIT_RUN).exists()
    return RunFacts(run=run, steps=steps, resubmitted=resubmitted, undo_started=undo_started)


def run_actions_fitting(
    *, run: Run, user: Any = None, step_id: int | None = None, actions: tuple[str, ...] | None = None
) -> list[Fit]:
    """The actions that fit `run` now, in the table's order, a step's once per step that fits
    (steps in their order). `user`: only those this user may take (`staff_may`); `step_id`: the
    run-level actions and that step's only; `actions`: only those. Reads the run's steps and
    whether it was resubmitted (two queries); changes nothing."""
    facts = _facts(run)
    fits: list[Fit] = []
    for name, spec in ACTIONS.items():
        if actions is not None and name not in actions:
            continue
        if user is not None and not staff_may(user, spec.permission):
            continue
        targets: list[Step | None] = (
            [s for s in facts.steps if step_id is None or s.pk == step_id] if spec.on_step else [None]
        )
        fits.extend(Fit(name, target) for target in targets if spec.fits(facts, target))
    return fits
