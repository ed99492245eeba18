"""Old runs purged (issue 29, item 2): terminal runs with their steps, events, attempt history
and webhook rows, after SAS_RETENTION_RUNS_DAYS (or a customer's shorter RetentionPolicy), in
bounded batches.

Never purged: a run in flight (not terminal), a job's run the jobs layer has not settled, a run
an open alert links (Alert.run or AlertRun), a run an operator action references (its audit,
as run or as new run: the audit outlives the run it names), and a run an order holds (the order
is the domain's record; its run goes with it, never under it).

Each batch locks its runs (FOR UPDATE SKIP LOCKED: a run someone is acting on waits for the
next tick), looks at the exclusions again in a new statement after the lock (an alert link or
an audit row committed while the batch was chosen), and deletes through the ORM, so every
relation's on_delete applies as anywhere else.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from alerting.models import Alert, AlertRun, AlertState
from scheduler.models import Run, TaskExecutionHistory

from ..models import OperatorAction, RetentionPolicy


def runs_purgeable(cutoff: datetime) -> QuerySet[Run]:
    """Terminal runs created and finished before `cutoff` that nothing still needs."""
    open_alert = ~Q(alert__state=AlertState.RESOLVED)
    return (
        Run.objects.filter(state__in=Run.TERMINAL_STATES, created_at__lt=cutoff, finished_at__lt=cutoff)
        .exclude(job__isnull=False, job_settled=False)
        .filter(order__isnull=True)
        .exclude(Exists(AlertRun.objects.filter(open_alert, run=OuterRef("pk"))))
        .exclude(Exists(Alert.objects.filter(run=OuterRef("pk")).exclude(state=AlertState.RESOLVED)))
        .exclude(Exists(OperatorAction.objects.filter(run=OuterRef("pk"))))
        .exclude(Exists(OperatorAction.objects.filter(new_run=OuterRef("pk"))))
    )


def runs_purge_batch(*, cutoff: datetime, limit: int, owner_id: int | None = None) -> int:
    """Delete at most `limit` purgeable runs (of `owner_id` when given); returns how many. One
    transaction."""
    runs = runs_purgeable(cutoff)
    if owner_id is not None:
        runs = runs.filter(owner_id=owner_id)
    with transaction.atomic():
        locked = list(
            runs.order_by("created_at")
            .select_for_update(skip_locked=True, of=("self",))
            .values_list("pk", flat=True)[:limit]
        )
        if not locked:
            return 0
        still = list(runs_purgeable(cutoff).filter(pk__in=locked).values_list("pk", flat=True))
        Run.objects.filter(pk__in=still).delete()
    return len(still)


def job_history_purge_batch(*, cutoff: datetime, owner_id: int, limit: int) -> int:
    """Delete at most `limit` of a customer's job occurrence rows (no run) older than `cutoff`."""
    ids = TaskExecutionHistory.objects.filter(
        job__owner_id=owner_id, run__isnull=True, started_at__lt=cutoff
    ).values("pk")[:limit]
    deleted, _ = TaskExecutionHistory.objects.filter(pk__in=ids, started_at__lt=cutoff).delete()
    return deleted


def runs_purge(*, now: datetime | None = None) -> int:
    """One round: the customers' shorter policies first, then the platform's retention; at most
    RETENTION_PURGE_BATCHES batches of RETENTION_PURGE_BATCH runs in all. Returns runs purged."""
    now = now or timezone.now()
    batch, budget = int(settings.SAS["RETENTION_PURGE_BATCH"]), int(settings.SAS["RETENTION_PURGE_BATCHES"])
    platform_days = int(settings.SAS["RETENTION_RUNS_DAYS"])
    purged = 0
    policies = RetentionPolicy.objects.all()
    if platform_days:
        policies = policies.filter(runs_days__lt=platform_days)
    rounds: list[tuple[datetime, int | None]] = [
        (now - timedelta(days=p.runs_days), p.user_id) for p in policies.order_by("user_id")
    ]
    if platform_days:
        rounds.append((now - timedelta(days=platform_days), None))
    for cutoff, owner_id in rounds:
        while budget > 0:
            budget -= 1
            runs = runs_purge_batch(cutoff=cutoff, limit=batch, owner_id=owner_id)
            rows = (
                0
                if owner_id is None
                else job_history_purge_batch(cutoff=cutoff, owner_id=owner_id, limit=batch)
            )
            purged += runs
            if runs < batch and rows < batch:
                break
    return purged
