"""The Supervisor: find steps whose complete-by has passed and decide retry or error.

It knows nothing of the business: it only finds attempts whose deadline passed and hands them to
the engine's expire transition; alerts come from the engine's `step_errored` signal
(alerting/receivers.py), so the scheduler never calls up into an app above it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.models.functions import Coalesce, Now

from scheduler import transitions
from scheduler.attempts import attempts_started
from scheduler.models import Step, TaskExecutionHistory
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


# ---------------------------------------------------------------------------------------------
# The dry run of the next sweep
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepPreviewItem:
    """What the next sweep would do with one Processing step, and why: `decision` is "requeue"
    (not started by its start-by: sent again, no failure counted), "retry" (no reply before
    complete-by: back to Pending after `backoff` seconds), "error" (the same, but out of
    failures or past its whole-step deadline: Error, and its run compensates or fails) or
    "leave" (within its deadlines)."""

    step_id: int
    run_id: str
    name: str
    kind: str
    operation: str
    decision: str
    why: str
    failure_count: int
    max_failures: int
    start_by: datetime | None
    complete_by: datetime | None
    backoff: float = 0.0


@dataclass
class SweepPreview:
    now: datetime
    items: list[SweepPreviewItem]
    due: int  # steps past a deadline (the sweep's work), of `items`
    more: bool  # more Processing steps than shown
    redis_ok: bool  # start marks readable (unreadable: the sweep treats attempts as started)


def step_expire_preview(*, limit: int = 200) -> SweepPreview:
    """The next sweep's decisions, made the same way (`step_expire_batch`, the failure rules of
    `sas_step_fail`) but changing nothing: no lock, no write. Processing steps by their first
    deadline, the due ones first; at most `limit`. A step may be decided differently by the
    real sweep if a reply or the clock moves first - this is what it would do now."""
    with transaction.atomic():
        rows = list(
            Step.objects.filter(process_state=Step.State.PROCESSING)
            .annotate(first_deadline=Coalesce("start_by", "complete_by"), db_now=Now())
            .order_by("first_deadline", "id")
            .values(
                "id",
                "run_id",
                "name",
                "kind",
                "operation",
                "lease",
                "start_by",
                "complete_by",
                "close_by",
                "failure_count",
                "max_failures",
                "backoff_base",
                "backoff_max",
                "db_now",
            )[: limit + 1]
        )
    more = len(rows) > limit
    rows = rows[:limit]
    now = rows[0]["db_now"] if rows else datetime.now(tz=UTC)
    due_leases = [
        str(r["lease"]) for r in rows if r["start_by"] is not None and r["start_by"] < now and r["lease"]
    ]
    started = attempts_started(leases=due_leases)
    items: list[SweepPreviewItem] = []
    due = 0
    for r in rows:
        item = _preview_one(r, now=now, started=started)
        due += item.decision != "leave"
        items.append(item)
    return SweepPreview(now=now, items=items, due=due, more=more, redis_ok=started is not None)


def _preview_one(r: Mapping[str, Any], *, now: datetime, started: set[str] | None) -> SweepPreviewItem:
    base = {
        "step_id": r["id"],
        "run_id": str(r["run_id"]),
        "name": r["name"],
        "kind": r["kind"],
        "operation": r["operation"],
        "failure_count": r["failure_count"],
        "max_failures": r["max_failures"],
        "start_by": r["start_by"],
        "complete_by": r["complete_by"],
    }
    start_by, complete_by = r["start_by"], r["complete_by"]
    first = start_by if start_by is not None else complete_by
    if first is None or first >= now:
        return SweepPreviewItem(
            **base, decision="leave", why=f"within its deadline: judged at {_iso(first) if first else '-'}"
        )
    if start_by is not None and started is not None and str(r["lease"]) not in started:
        if r["close_by"] is not None and r["close_by"] < now:
            return SweepPreviewItem(
                **base,
                decision="error",
                why=f"not started by {_iso(start_by)}, and its whole-step deadline passed",
            )
        return SweepPreviewItem(
            **base, decision="requeue", why=f"not started by {_iso(start_by)}: sent again, no failure counted"
        )
    if complete_by is not None and complete_by >= now:
        return SweepPreviewItem(
            **base, decision="leave", why=f"its agent started it: judged at complete_by {_iso(complete_by)}"
        )
    failures = r["failure_count"] + 1
    backoff = min(r["backoff_max"], r["backoff_base"] * 2 ** min(r["failure_count"], 40))
    late = f"no reply before complete_by {_iso(complete_by) if complete_by else '-'}"
    if r["kind"] == Step.Kind.FORWARD and failures >= r["max_failures"]:
        return SweepPreviewItem(
            **base, decision="error", why=f"{late}; failure {failures} of {r['max_failures']}: gives up"
        )
    if (
        r["kind"] == Step.Kind.FORWARD
        and r["close_by"] is not None
        and now.timestamp() + backoff / 2 > r["close_by"].timestamp()
    ):
        return SweepPreviewItem(**base, decision="error", why=f"{late}; its whole-step deadline comes first")
    # The backoff has equal jitter: between half of it and all of it (sas_step_fail).
    return SweepPreviewItem(
        **base,
        decision="retry",
        why=f"{late}; failure {failures} of {r['max_failures']}: retried after {backoff / 2:g}-{backoff:g} s",
        backoff=backoff,
    )
