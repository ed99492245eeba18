"""The Supervisor: find steps whose complete-by has passed and decide retry or error.

It knows nothing of the business: it only judges whether a step failed and asks the scheduler's
transition (`step_fail_attempt`) to retry it or mark it Error (which compensates the run).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from django.db import connection, transaction

from scheduler.models import RunEvent, Step, TaskExecutionHistory
from scheduler.services import events_record, scheduler_kick_enqueue, step_fail_attempt

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


# One statement retries every expired step of a batch that is under its failure limit: lock the
# batch (SKIP LOCKED), move those rows back to Pending with a backoff (equal jitter, computed
# per row as in scheduler.services.backoff_seconds), close their attempts' history rows and log
# the supervisor's decision. Rows at their limit come back with retried = false, still locked
# by this transaction, for the per-row Error path (alert, compensation). Set-based because a
# mass expiry (a dead agent pool) must not take the supervisor minutes: per-row ORM calls did
# ~150 steps/s (bench/README.md).
_EXPIRE_BATCH_SQL = """
WITH expired AS (
    SELECT id, run_id, name, lease, complete_by, failure_count, max_failures,
           least(backoff_max, backoff_base * power(2, failure_count)) AS exp_backoff,
           random() AS jitter
    FROM scheduler_step
    WHERE process_state = 'processing' AND complete_by < statement_timestamp()
    ORDER BY complete_by
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
),
retried AS (
    UPDATE scheduler_step AS s
    SET process_state = 'pending',
        failure_count = s.failure_count + 1,
        locked_by = NULL,
        lease = NULL,
        complete_by = NULL,
        not_before = statement_timestamp()
            + make_interval(secs => e.exp_backoff / 2 + e.jitter * e.exp_backoff / 2),
        last_error = 'no reply before complete_by '
            || to_char(e.complete_by AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
        updated_at = statement_timestamp()
    FROM expired AS e
    WHERE s.id = e.id AND s.process_state = 'processing' AND s.lease = e.lease
      AND e.failure_count + 1 < e.max_failures
    RETURNING s.id, e.run_id, e.name, e.lease, s.failure_count, s.last_error,
              e.exp_backoff / 2 + e.jitter * e.exp_backoff / 2 AS delay
),
closed AS (
    UPDATE scheduler_taskexecutionhistory AS h
    SET status = 'timed_out', ended_at = statement_timestamp(), error = r.last_error
    FROM retried AS r
    WHERE h.lease = r.lease AND h.kind = 'attempt'
),
logged AS (
    INSERT INTO scheduler_taskexecutionhistory
        (step_id, run_id, kind, status, lease, retry_count, worker, error, detail, started_at, ended_at)
    SELECT id, run_id, 'supervisor', 'retry_scheduled', NULL, failure_count, %(instance)s, last_error,
           jsonb_build_object('cause', 'timed_out', 'failed_lease', lease::text,
                              'backoff_seconds', round(delay::numeric, 3)),
           statement_timestamp(), statement_timestamp()
    FROM retried
)
SELECT e.id, r.id IS NOT NULL, e.run_id, e.name, r.failure_count, r.last_error, r.delay
FROM expired AS e LEFT JOIN retried AS r ON r.id = e.id
ORDER BY e.complete_by, e.id
"""


def step_expire_batch(*, batch: int, instance: str) -> SweepResult:
    """One bounded batch: lock up to `batch` expired Processing steps (skipping rows another
    sweep or a reply holds) and count a failure on each - retried after backoff in one
    statement, or, at the step's limit, marked Error one by one (alert + compensation).

    Invariant: two sweeps running at once count each expired attempt once - the rows are locked
    with SKIP LOCKED and each transition is fenced on the attempt's lease. Transaction: one per
    batch, so a long sweep never holds locks for long.
    """
    result = SweepResult(batches=1)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(_EXPIRE_BATCH_SQL, {"batch": batch, "instance": instance})
            rows = cursor.fetchall()
        result.examined = len(rows)
        retried = [row for row in rows if row[1]]
        at_limit = [row[0] for row in rows if not row[1]]
        result.retried = len(retried)
        result.step_ids.extend(row[0] for row in rows)
        if retried:
            events_record(
                [
                    RunEvent(
                        run_id=run_id,
                        step_id=step_id,
                        type=RunEvent.Type.STEP_RETRYING,
                        data={"step": name, "failure_count": failures, "error": error[:500]},
                    )
                    for step_id, _, run_id, name, failures, error, _ in retried
                ]
            )
            longest_backoff = max(float(row[6]) for row in retried)
            # One kick per batch, when the longest backoff in it has passed; the tick covers the rest.
            transaction.on_commit(lambda: scheduler_kick_enqueue(countdown=longest_backoff + 0.05))
        for step in Step.objects.filter(pk__in=at_limit).order_by("complete_by", "id"):
            deadline = step.complete_by.isoformat() if step.complete_by else "?"
            outcome = step_fail_attempt(
                step=step,
                status=TaskExecutionHistory.Status.TIMED_OUT,
                error=f"no reply before complete_by {deadline}",
                actor=instance,
                history_kind=TaskExecutionHistory.Kind.SUPERVISOR,
                kick=False,
            )
            # At their limit, so "error" (or "skipped" had the lease changed; we hold the row).
            if outcome.decision == "error":
                result.errored += 1
            else:
                result.skipped += 1
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
