"""The Supervisor: find steps whose complete-by has passed and decide retry or error.

It knows nothing of the business: it only finds attempts whose deadline passed and hands them to
the engine's expire transition; alerts come from the engine's `step_errored` signal
(`supervisor/receivers.py`), so the scheduler never calls up into this app.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import transaction

from scheduler import transitions
from scheduler.attempts import attempts_started
from scheduler.models import TaskExecutionHistory
from scheduler.services import failures_settle
from scheduler.transitions import AttemptOutcome

logger = logging.getLogger(__name__)


@dataclass
class SweepResult:
    examined: int = 0
    retried: int = 0
    requeued: int = 0
    errored: int = 0
    batches: int = 0
    seconds: float = 0.0
    step_ids: list[int] = field(default_factory=list)


def step_expire_batch(*, batch: int, instance: str) -> SweepResult:
    """One bounded batch of Processing steps past their first deadline (start_by, then
    complete_by), locked with SKIP LOCKED. For each, the agents' start marks (Redis) decide:
    - not started by its start_by (workers down, busy or restarting): sent again, no failure
      counted (`step_requeue`) - time in the queue is not time at work;
    - started, and past complete_by: the attempt failed (`step_fail`, the same transition as a
      transient reply: back to Pending after backoff, or Error at the limit or deadline);
    - started, still within complete_by: marked started, judged at complete_by.
    The scheduler's orchestration then settles what errored (events, the `step_errored`
    signal this app raises alerts from, compensation).

    Invariant: two sweeps running at once judge each attempt once - the rows are locked with
    SKIP LOCKED and every transition is fenced on the attempt's lease. Transaction: one per
    batch, so a long sweep never holds locks for long.
    """
    with transaction.atomic():
        due = transitions.step_due_for_supervision(batch=batch)
        started = attempts_started(leases=[d.lease for d in due if d.start_by is not None])
        requeue: list[AttemptOutcome] = []
        expire: list[AttemptOutcome] = []
        at_work: list[tuple[int, str]] = []
        for d in due:
            if d.start_by is not None and started is not None and d.lease not in started:
                error = f"not started by {_iso(d.start_by)}"
                requeue.append(AttemptOutcome(step_id=d.step_id, lease=d.lease, error=error, reached=False))
            elif d.complete_by < d.now:
                error = f"no reply before complete_by {_iso(d.complete_by)}"
                expire.append(AttemptOutcome(step_id=d.step_id, lease=d.lease, error=error, reached=True))
            else:
                at_work.append((d.step_id, d.lease))
        transitions.step_mark_started(steps=at_work)
        requeued = transitions.step_requeue(attempts=requeue, actor=instance)
        failures_settle(requeued, cause=TaskExecutionHistory.Status.REQUEUED)
        failed = transitions.step_fail(
            attempts=expire,
            cause=TaskExecutionHistory.Status.TIMED_OUT,
            actor=instance,
            history_kind=TaskExecutionHistory.Kind.SUPERVISOR,
            require_live=False,
        )
        failures_settle(failed, cause=TaskExecutionHistory.Status.TIMED_OUT)
    return SweepResult(
        examined=len(due),
        retried=len(failed.retried),
        errored=len(failed.errored) + len(requeued.errored),
        requeued=len(requeued.retried),
        batches=1,
        step_ids=sorted(d.step_id for d in due),
    )


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


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
        total.requeued += part.requeued
        total.errored += part.errored
        total.step_ids.extend(part.step_ids)
        if part.examined < batch or time.monotonic() - started > budget_seconds:
            break
    total.seconds = time.monotonic() - started
    if total.examined:
        logger.info(
            "supervisor sweep: %d due, %d requeued (not started), %d retried, %d errored in %.3fs",
            total.examined,
            total.requeued,
            total.retried,
            total.errored,
            total.seconds,
        )
    return total
