"""Reply: an agent's answer for a step, accepted only while it still holds the step.

A success is one round trip: `sas_step_succeed` accepts it, closes the attempt, records the
event, advances the run and claims its next step in one statement, committed on its own
(autocommit) - the broker publish of the next step is the only other network hop. Runs that
someone observes (webhooks) take the same statement inside a transaction, so the receivers'
rows commit with it.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from django.db import connection, transaction

from sasproject.logs import state_change
from scheduler import transitions
from scheduler.models import Step, TaskExecutionHistory
from scheduler.transitions import AttemptOutcome, RunObserved, Succeeded

from .dispatch import claimed_settle, scheduler_instance_id
from .failure import failures_settle, step_errored_settle
from .submit import step_advance_built

logger = logging.getLogger(__name__)

Outcome = Literal["success", "permanent", "transient", "deferred", "continue"]
ReplyResult = Literal["accepted", "ignored"]


def step_reply(
    *,
    step_id: int,
    lease: str,
    outcome: Outcome,
    result: Any = None,
    error: str = "",
    worker: str = "",
    claim_next: bool = True,
    retry_after: float = 0.0,
    reached: bool = False,
) -> ReplyResult:
    """Accept an agent's reply if it still holds the step: state Processing, same lease, deadline
    not passed. Otherwise record it as ignored and change nothing.

    success -> Processed, next step Pending (or the run completes / finishes compensating).
    permanent -> Error, the run compensates (or, for a compensation, the run Fails).
    transient -> failure_count + 1, Pending after backoff (at least `retry_after`), or Error at
    a forward step's limit or whole-step deadline (a compensation keeps trying).
    deferred -> the attempt did not count (open breaker, connection refused, a failed probe of
    an open breaker): Pending at `retry_after` (the breaker's next probe), no failure counted;
    `reached` says whether it may have reached the service all the same (a probe).
    continue -> a page of a paginated step committed: Pending at once, no failure counted, and
    (with `claim_next`) claimed again for the next page in the same statement.

    With `claim_next`, the run's next step and one more due step of the same operation are
    claimed in the same transaction and dispatched after commit (the scheduler's work, done in
    the replier's process - the pattern's actors are logical).
    """
    instance = worker or scheduler_instance_id()
    if outcome == "success":
        return _reply_success(
            step_id=step_id, lease=lease, result=result, instance=instance, claim_next=claim_next
        )
    if outcome == "continue":
        return _reply_continue(step_id=step_id, lease=lease, instance=instance, claim=claim_next)
    if outcome not in ("permanent", "transient", "deferred"):
        raise ValueError(f"unknown reply outcome {outcome!r}")
    with transaction.atomic():
        if outcome == "permanent":
            errored = transitions.step_fail_permanent(step_id=step_id, lease=lease, error=error)
            if errored is None:
                transitions.reply_ignored(
                    step_id=step_id, lease=lease, outcome=outcome, worker=instance, error=error, result=result
                )
                _ignored_logged(step_id=step_id, lease=lease, outcome=outcome)
                return "ignored"
            step_errored_settle(step=errored, reason=f"permanent error: {error}", permanent=True)
        else:
            attempt = [
                AttemptOutcome(step_id=step_id, lease=lease, error=error, reached=outcome == "transient")
            ]
            if outcome == "transient":
                cause = TaskExecutionHistory.Status.FAILED_TRANSIENT
                failed = transitions.step_fail(
                    attempts=attempt,
                    cause=cause,
                    actor=worker or "agent",
                    history_kind=TaskExecutionHistory.Kind.SCHEDULER,
                    min_backoff=retry_after,
                )
            else:
                cause = TaskExecutionHistory.Status.DEFERRED
                failed = transitions.step_defer(
                    attempts=attempt, retry_after=retry_after, actor=worker or "agent"
                )
            if not failed.retried and not failed.errored:
                transitions.reply_ignored(
                    step_id=step_id, lease=lease, outcome=outcome, worker=instance, error=error, result=result
                )
                _ignored_logged(step_id=step_id, lease=lease, outcome=outcome)
                return "ignored"
            failures_settle(failed, cause=cause)
        if claim_next:
            # The slot this reply freed goes to the next due step of the same operation.
            operation = Step.objects.filter(pk=step_id).values_list("operation", flat=True).first()
            if operation:
                claimed_settle(transitions.step_claim_many(instance=instance, limit=1, operation=operation))
    return "accepted"


def _ignored_logged(*, step_id: int, lease: str, outcome: str, run_id: str | None = None) -> None:
    if not run_id and not Step.objects.filter(pk=step_id).exists():
        # Not a late reply but one for no step at all (forged, or its run deleted since): the
        # history has no row to record it on, so the log does (issue 26). Only on this path,
        # which a healthy engine rarely takes: no cost to the accepted replies.
        logger.warning(
            "reply for step %s dropped: no such step (%s, lease %s)", step_id, outcome, str(lease)[:40]
        )
        return
    state_change(
        "reply_ignored",
        "step %s: %s reply ignored (the step is no longer this attempt's)",
        step_id,
        outcome,
        run=run_id,
        step=step_id,
        lease=lease,
        outcome=outcome,
    )


def _reply_continue(*, step_id: int, lease: str, instance: str, claim: bool) -> ReplyResult:
    """One statement (autocommit, or the caller's transaction); the next page's claim is
    dispatched after commit."""
    with transaction.atomic():
        done = transitions.step_continue(step_id=step_id, lease=lease, instance=instance, claim=claim)
        if done is None:
            _ignored_logged(step_id=step_id, lease=lease, outcome="continue")
            return "ignored"
        claimed_settle(done)
    return "accepted"


def _reply_success(*, step_id: int, lease: str, result: Any, instance: str, claim_next: bool) -> ReplyResult:
    params: dict[str, Any] = {
        "step_id": step_id,
        "lease": lease,
        "result": result,
        "instance": instance,
        "claim_next": claim_next,
    }
    if not connection.in_atomic_block:
        try:
            # Autocommit: the statement is its own transaction - one round trip, one commit.
            done = transitions.step_succeed(**params, observed_ok=False)
        except RunObserved:
            done = None
        if done is not None:
            return _success_settle(done, lease=lease, claim_next=claim_next, instance=instance)
    with transaction.atomic():
        done = transitions.step_succeed(**params, observed_ok=True)
        return _success_settle(done, lease=lease, claim_next=claim_next, instance=instance)


def _success_settle(done: Succeeded, *, lease: str, claim_next: bool, instance: str) -> ReplyResult:
    """Announce events, build a payload that needed results (rare), dispatch the claims."""
    if not done.accepted:
        _ignored_logged(step_id=done.step_id, lease=lease, outcome="success", run_id=done.run_id)
        return "ignored"
    state_change(
        "step_succeeded",
        "step %s (%s) of run %s succeeded",
        done.step_id,
        done.operation,
        done.run_id,
        run=done.run_id,
        step=done.step_id,
        lease=lease,
        operation=done.operation,
        outcome="success",
    )
    claimed_settle(done)  # announces the events, dispatches the claims after commit
    if done.needs_payload is not None:
        with transaction.atomic():
            step_advance_built(step_id=done.needs_payload)
            if claim_next:
                claimed_settle(
                    transitions.step_claim(step_ids=[done.needs_payload], instance=instance, admit=True)
                )
    return "accepted"
