"""The Supervisor: find steps whose complete-by has passed and decide retry or error.

It knows nothing of the business: it only finds attempts whose deadline passed and hands them to
the engine's expire transition; alerts come from the engine's `step_errored` signal
(`supervisor/receivers.py`), so the scheduler never calls up into this app.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from django.db import transaction

from scheduler import transitions
from scheduler.models import TaskExecutionHistory
from scheduler.services import failures_settle

logger = logging.getLogger(__name__)


@dataclass
class SweepResult:
    examined: int = 0
    retried: int = 0
    errored: int = 0
    batches: int = 0
    seconds: float = 0.0
    step_ids: list[int] = field(default_factory=list)


def step_expire_batch(*, batch: int, instance: str) -> SweepResult:
    """One bounded batch: the engine's expire transition (`step_expire_due`) takes up to
    `batch` expired Processing steps (skipping rows another sweep or a reply holds) and fails
    each attempt - the same transition as a transient reply: back to Pending after backoff, or
    Error at the step's limit; then the scheduler's orchestration settles what errored (events,
    the `step_errored` signal this app raises alerts from, compensation).

    Invariant: two sweeps running at once count each expired attempt once - the rows are locked
    with SKIP LOCKED and the transition is fenced on the attempt's lease. Transaction: one per
    batch, so a long sweep never holds locks for long.
    """
    with transaction.atomic():
        failed = transitions.step_expire_due(batch=batch, instance=instance)
        failures_settle(failed, cause=TaskExecutionHistory.Status.TIMED_OUT)
    steps = failed.retried + failed.errored
    return SweepResult(
        examined=len(steps),
        retried=len(failed.retried),
        errored=len(failed.errored),
        batches=1,
        step_ids=sorted(step.step_id for step in steps),
    )


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
