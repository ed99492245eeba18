"""Failure: what follows a failed attempt - retries kicked, errored steps compensated.

The transitions (`step_fail`, `step_defer`, `step_requeue`, `step_fail_permanent`) change the rows; this
module is the orchestration above them. An errored step is announced with the `step_errored`
signal (the supervisor raises operator alerts from it: the scheduler never imports the
supervisor); a forward step's error starts the run's compensation, a compensation's error (a
permanent refusal: an undo never gives up on its own) fails the run.
"""

from __future__ import annotations

import logging

from django.db import transaction

from sasproject.logs import state_change
from scheduler import transitions
from scheduler.models import Run, RunEvent, Step
from scheduler.signals import step_errored, step_struggling
from scheduler.transitions import Failed, FailedStep

from .compensation import run_compensate
from .dispatch import scheduler_kick_enqueue
from .events import event_record, events_announce

# The event a retried step's line names, by what sent it back (a reply's or the sweep's cause).
_RETRY_EVENTS = {
    "requeued": "step_requeued",
    "deferred": "step_deferred",
    "timed_out": "step_timed_out",
    "failed_transient": "step_retrying",
}


def failures_settle(failed: Failed, *, cause: str, kick: bool = True) -> None:
    """After `step_fail` / `step_defer` / `step_requeue`: announce the retries' events, kick a
    scheduler when the longest delay has passed (the tick covers the rest), tell listeners about
    compensations past their alert threshold (`step_struggling`), and settle each errored step.
    Transaction: the caller's."""
    events_announce(failed.events)
    event = _RETRY_EVENTS.get(cause, "step_retrying")
    for step in failed.retried:
        state_change(
            event,
            "step %s (%s) of run %s: %s, back to Pending in %.1fs (%d failures): %s",
            step.step_id,
            step.name,
            step.run_id,
            cause,
            step.delay,
            step.failure_count,
            step.error,
            run=step.run_id,
            step=step.step_id,
            outcome=cause,
        )
    if kick and failed.retried:
        longest = max(step.delay for step in failed.retried)
        transaction.on_commit(lambda: scheduler_kick_enqueue(countdown=longest + 0.05))
    for step in failed.alerting:
        step_struggling.send(
            sender=Step,
            run_id=step.run_id,
            step_id=step.step_id,
            step_name=step.name,
            failure_count=step.failure_count,
            error=step.error,
        )
    for step in failed.errored:
        if step.give_up == "deadline":
            reason = f"its deadline passed ({cause}; {step.failure_count} failures): {step.error}"
        else:
            reason = f"{cause} {step.failure_count} times (limit {step.max_failures}): {step.error}"
        step_errored_settle(step=step, reason=reason, permanent=False)


def step_errored_settle(*, step: FailedStep, reason: str, permanent: bool) -> None:
    """A step is in Error: record it, tell listeners (`step_errored`: alerts), and compensate
    the run (forward step) or fail it (a compensation could not finish). Transaction: the
    caller's - the event, the alert and the compensation commit with the error."""
    state_change(
        "step_errored",
        "step %s (%s) of run %s in Error: %s",
        step.step_id,
        step.name,
        step.run_id,
        reason,
        level=logging.WARNING,
        run=step.run_id,
        step=step.step_id,
        outcome="permanent" if permanent else "gave_up",
    )
    observed = Run.objects.filter(pk=step.run_id, observed=True).exists()

    def event(type_: str) -> None:
        event_record(
            run_id=step.run_id,
            type=type_,
            observed=observed,
            step_id=step.step_id,
            step=step.name,
            error=reason[:500],
        )

    event(RunEvent.Type.STEP_FAILED)
    step_errored.send(
        sender=Step,
        run_id=step.run_id,
        step_id=step.step_id,
        step_name=step.name,
        kind=step.kind,
        reason=reason,
        permanent=permanent,
    )
    if step.kind == Step.Kind.FORWARD:
        run_compensate(run_id=step.run_id, reason=f"step {step.name} failed: {reason}")
    elif transitions.run_fail(run_id=step.run_id, reason=f"compensation {step.name} failed: {reason}"):
        event(RunEvent.Type.FAILED)
