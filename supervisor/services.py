"""The Supervisor: find steps whose complete-by has passed and decide retry or error.

It knows nothing of the business: it only judges whether a step failed and asks the scheduler's
transition (`step_fail_attempt`) to retry it or mark it Error (which compensates the run).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from django.db import transaction
from django.db.models.functions import Now

from scheduler.models import Step, TaskExecutionHistory
from scheduler.services import scheduler_kick_enqueue, step_fail_attempt

logger = logging.getLogger(__name__)


@dataclass
class SweepResult:
    examined: int = 0
    retried: int = 0
    errored: int = 0
    skipped: int = 0
    batches: int = 0
    seconds: float = 0.0
    step_ids: list[int] = field(default_factory=list)


def step_expire_batch(*, batch: int, instance: str) -> SweepResult:
    """One bounded batch: lock up to `batch` expired Processing steps (skipping rows another
    sweep or a reply holds) and count a failure on each.

    Invariant: two sweeps running at once count each expired attempt once - the rows are locked
    with SKIP LOCKED and each transition is fenced on the attempt's lease. Transaction: one per
    batch, so a long sweep never holds locks for long.
    """
    result = SweepResult(batches=1)
    longest_backoff = 0.0
    with transaction.atomic():
        expired = list(
            Step.objects.select_for_update(skip_locked=True)
            .filter(process_state=Step.State.PROCESSING, complete_by__lt=Now())
            .order_by("complete_by")[:batch]
        )
        result.examined = len(expired)
        for step in expired:
            deadline = step.complete_by.isoformat() if step.complete_by else "?"
            outcome = step_fail_attempt(
                step=step,
                status=TaskExecutionHistory.Status.TIMED_OUT,
                error=f"no reply before complete_by {deadline}",
                actor=instance,
                history_kind=TaskExecutionHistory.Kind.SUPERVISOR,
                kick=False,
            )
            if outcome.decision == "retry":
                result.retried += 1
                longest_backoff = max(longest_backoff, outcome.backoff)
            elif outcome.decision == "error":
                result.errored += 1
            else:
                result.skipped += 1
            result.step_ids.append(step.pk)
        if result.retried:
            # One kick per batch, when the longest backoff in it has passed; the tick covers the rest.
            transaction.on_commit(lambda: scheduler_kick_enqueue(countdown=longest_backoff + 0.05))
    return result


def step_expire_sweep(
    *, batch: int, instance: str, max_batches: int = 20, budget_seconds: float = 5.0
) -> SweepResult:
    """Sweep expired steps in bounded batches until none are left, `max_batches` ran or the time
    budget is spent (the next tick continues). Idempotent; safe to run concurrently."""
    started = time.monotonic()
    total = SweepResult()
    for _ in range(max_batches):
        part = step_expire_batch(batch=batch, instance=instance)
        total.batches += 1
        total.examined += part.examined
        total.retried += part.retried
        total.errored += part.errored
        total.skipped += part.skipped
        total.step_ids.extend(part.step_ids)
        if part.examined < batch or time.monotonic() - started > budget_seconds:
            break
    total.seconds = time.monotonic() - started
    if total.examined:
        logger.info(
            "supervisor sweep: %d expired, %d retried, %d errored in %.3fs",
            total.examined,
            total.retried,
            total.errored,
            total.seconds,
        )
    return total
