"""Read-only queries for the operator tools: what needs attention across the apps, and the
engine's health (runs per state, overdue steps, open alerts, circuit breakers, periodic tasks).

These read every app - the scheduler's runs and steps, alerting's alerts and the periodic
tasks, the agents' breakers in Redis - which is why they live here, above all of them, and not
in the engine (no engine app imports `ops`; pyproject.toml's import-linter contracts check it).
Every count is served by an index: see each function.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from agents.breaker import CircuitBreaker, _redis
from alerting.models import ALERT_OPEN_STATES, Alert, AlertRun, AlertSeverity
from liveness.last_run import last_runs
from liveness.queues import QueueStatus, queue_statuses
from scheduler.models import Run, ScheduledJob, Step
from scheduler.selectors import count_per_run, run_list_annotated, run_state_counts, steps_overdue_count
from supervisor.periodic import periodic_tasks_shipped

from .models import OperatorAction

logger = logging.getLogger(__name__)

# The remote services agents call through a circuit breaker (agents/breaker.py), always shown.
BREAKER_SERVICES: tuple[str, ...] = ("inventory", "payment", "shipping")
# Webhook deliveries have one breaker per (owner, subscriber host), "webhook:<owner id>:<host>"
# (webhooks/tasks.py); those that exist in Redis are listed after the services, at most this many.
WEBHOOK_BREAKER_PREFIX = "webhook:"
WEBHOOK_BREAKERS_SHOWN = 50


def _open_alerts(run_ref: str = "pk") -> QuerySet[AlertRun]:
    """The open, unacknowledged alerts linked to a run - every run an alert affects, not only
    its first (AlertRun; alertrun_run_idx)."""
    return AlertRun.objects.filter(
        run_id=OuterRef(run_ref), alert__state__in=ALERT_OPEN_STATES, alert__acknowledged_at__isnull=True
    )


def run_list_with_alerts(*, queryset: QuerySet[Run] | None = None) -> QuerySet[Run]:
    """`scheduler.selectors.run_list_annotated`, plus `open_alerts` per row."""
    return run_list_annotated(queryset=queryset).annotate(open_alerts=count_per_run(_open_alerts()))


def run_needs_attention_q() -> Q:
    """Runs an operator should look at: Failed, or with an alert nobody acknowledged."""
    return Q(state=Run.State.FAILED) | Q(Exists(_open_alerts()))


def runs_need_attention_count() -> int:
    """How many runs `run_needs_attention_q` matches, as a UNION of two index scans (Failed runs
    by run_state_created_idx, the runs linked to open alerts by alert_open_rule_idx and
    alertrun_unique) rather than a scan of all runs."""
    failed = Run.objects.filter(state=Run.State.FAILED).order_by().values("pk")
    alerted = (
        AlertRun.objects.filter(alert__state__in=ALERT_OPEN_STATES, alert__acknowledged_at__isnull=True)
        .order_by()
        .values("run_id")
    )
    return failed.union(alerted).count()


def alerts_open_count() -> int:
    """Alerts firing that nobody has acknowledged yet (the partial index alert_open_rule_idx)."""
    return Alert.objects.filter(state=Alert.State.FIRING, acknowledged_at__isnull=True).count()


def alerts_open_by_severity() -> list[tuple[str, str, int]]:
    """(severity, label, count) of the firing, unacknowledged alerts, most severe first - the
    admin index's engine panel."""
    counts = dict(
        Alert.objects.filter(state=Alert.State.FIRING, acknowledged_at__isnull=True)
        .order_by()
        .values_list("severity")
        .annotate(n=Count("id"))
        .values_list("severity", "n")
    )
    return [(value, label, counts.get(value, 0)) for value, label in reversed(AlertSeverity.choices)]


@dataclass(frozen=True)
class BreakerStatus:
    service: str
    state: str  # closed / open / half_open, or "unknown" when Redis cannot be read
    failures: int
    opened: int
    open_until: datetime | None
    error: str = ""
    # Held closed by an operator until then (failures do not open it); who set it by hand.
    held_closed_until: datetime | None = None
    by_hand: str = ""


def breaker_is_known(*, name: str) -> bool:
    """Whether `name` is a breaker the admin may show and reset."""
    return name in BREAKER_SERVICES or (
        name.startswith(WEBHOOK_BREAKER_PREFIX) and len(name) > len(WEBHOOK_BREAKER_PREFIX)
    )


def webhook_breaker_names(*, limit: int = WEBHOOK_BREAKERS_SHOWN) -> list[str]:
    """The per-host webhook breakers that have state in Redis (SCAN, bounded by `limit`)."""
    prefix = CircuitBreaker(WEBHOOK_BREAKER_PREFIX).key  # "<redis prefix>sas:breaker:webhook:"
    head = prefix[: -len(WEBHOOK_BREAKER_PREFIX)]
    names: list[str] = []
    try:
        # agents.breaker keeps one client per URL; reuse it rather than opening another.
        for key in _redis().scan_iter(match=f"{prefix}*", count=500):
            text = key.decode() if isinstance(key, bytes) else str(key)
            names.append(text[len(head) :])
            if len(names) >= limit:
                break
    except redis.RedisError:
        logger.warning("cannot list webhook breakers in Redis", exc_info=True)
    return sorted(names)


def breaker_statuses(*, services: tuple[str, ...] | None = None) -> list[BreakerStatus]:
    """The shared circuit breakers as stored in Redis: every remote service, then the webhook
    hosts that have one."""
    if services is None:
        services = (*BREAKER_SERVICES, *webhook_breaker_names())
    statuses: list[BreakerStatus] = []
    for service in services:
        try:
            raw = CircuitBreaker(service).snapshot()
        except redis.RedisError as exc:
            logger.warning("breaker %s: cannot read its state from Redis", service, exc_info=True)
            statuses.append(BreakerStatus(service, "unknown", 0, 0, None, error=str(exc)))
            continue
        open_until = raw.get("open_until")
        held = float(raw.get("held_closed_until") or 0)
        statuses.append(
            BreakerStatus(
                service=service,
                state=raw.get("state", "closed"),
                failures=int(raw.get("failures") or 0),
                opened=int(raw.get("opened") or 0),
                open_until=datetime.fromtimestamp(float(open_until), tz=UTC)
                if open_until and float(open_until) > 0
                else None,
                held_closed_until=datetime.fromtimestamp(held, tz=UTC) if held > time.time() else None,
                by_hand=raw.get("by_hand", ""),
            )
        )
    return statuses


@dataclass(frozen=True)
class PeriodicTaskInfo:
    name: str
    task: str
    pk: int | None  # None when the row is missing (run `manage.py setup_periodic_tasks`)
    enabled: bool
    every_seconds: float | None
    last_run_at: Any
    # When the task last completed, as the worker that ran it recorded it (liveness/last_run.py),
    # not beat's last_run_at (which beat writes back only every few minutes). None: never.
    ran_at: datetime | None = None

    @property
    def ran_seconds_ago(self) -> float | None:
        return None if self.ran_at is None else max(0.0, (timezone.now() - self.ran_at).total_seconds())

    @property
    def late(self) -> bool:
        """Not run for three of its intervals (and 10 s): beat or its worker is down or stuck."""
        if self.ran_at is None or self.every_seconds is None or not self.enabled:
            return self.enabled and self.ran_at is None
        return (timezone.now() - self.ran_at).total_seconds() > 3 * self.every_seconds + 10


def engine_periodic_tasks() -> list[PeriodicTaskInfo]:
    """The engine's django-celery-beat rows (supervisor sweep, scheduler tick) with intervals."""
    from django_celery_beat.models import PeriodicTask

    ran = last_runs()
    shipped = periodic_tasks_shipped()
    names = [row[0] for row in shipped]
    rows = {t.name: t for t in PeriodicTask.objects.filter(name__in=names).select_related("interval")}
    infos: list[PeriodicTaskInfo] = []
    for name, task, _queue, _setting in shipped:
        row = rows.get(name)
        if row is None:
            infos.append(PeriodicTaskInfo(name, task, None, False, None, None, ran.get(task)))
            continue
        interval = row.interval
        every = None
        if interval is not None:
            seconds_per = {"days": 86400, "hours": 3600, "minutes": 60, "seconds": 1, "microseconds": 1e-6}
            every = interval.every * seconds_per.get(interval.period, 1)
        infos.append(
            PeriodicTaskInfo(
                name=name,
                task=row.task,
                pk=row.pk,
                enabled=row.enabled,
                every_seconds=every,
                last_run_at=row.last_run_at,
                ran_at=ran.get(row.task),
            )
        )
    return infos


# An occurrence due longer than this without being fired means no dispatcher is working (a
# burst's tick writes for up to SAS_JOBS_DISPATCH_TICK_SECONDS, 20 s by default).
JOBS_OVERDUE_AFTER = timedelta(seconds=60)


@dataclass(frozen=True)
class JobsOverdue:
    count: int
    oldest_due: datetime | None


def jobs_overdue() -> JobsOverdue:
    """Job occurrences due for more than JOBS_OVERDUE_AFTER and not fired: normally none. Some
    mean the `dispatcher` worker (queue `jobs`) is down, stuck or missing. A range of the partial
    index scheduledjob_due_idx (one count, one first entry)."""
    edge = timezone.now() - JOBS_OVERDUE_AFTER
    late = ScheduledJob.objects.filter(next_execution_at__lt=edge)
    oldest = late.order_by("next_execution_at").values_list("next_execution_at", flat=True).first()
    return JobsOverdue(count=late.count(), oldest_due=oldest)


@dataclass(frozen=True)
class OldestPending:
    step_id: int
    run_id: Any
    name: str
    operation: str
    due_since: datetime


def oldest_pending_step() -> OldestPending | None:
    """The Pending step that has been due the longest (its backoff over), i.e. waits for a
    claim: normally seconds at most. Reads the Pending rows only (the partial index
    step_pending_claim_idx), however long the history."""
    row = (
        Step.objects.filter(process_state=Step.State.PENDING, not_before__lte=timezone.now())
        .order_by("not_before")
        .values_list("pk", "run_id", "name", "operation", "not_before")
        .first()
    )
    return OldestPending(*row) if row is not None else None


@dataclass(frozen=True)
class EngineHealth:
    run_states: dict[str, int]
    runs_need_attention: int
    steps_overdue: int
    alerts_open: int
    breakers: list[BreakerStatus]
    periodic_tasks: list[PeriodicTaskInfo]
    jobs_overdue: JobsOverdue
    queues: list[QueueStatus]
    oldest_pending: OldestPending | None

    @property
    def queues_stalled(self) -> list[QueueStatus]:
        return [q for q in self.queues if q.stalled]


def engine_health() -> EngineHealth:
    """Everything the admin's engine-health page shows, in a handful of indexed queries."""
    return EngineHealth(
        run_states=run_state_counts(),
        runs_need_attention=runs_need_attention_count(),
        steps_overdue=steps_overdue_count(),
        alerts_open=alerts_open_count(),
        breakers=breaker_statuses(),
        periodic_tasks=engine_periodic_tasks(),
        jobs_overdue=jobs_overdue(),
        queues=queue_statuses(),
        oldest_pending=oldest_pending_step(),
    )


def run_operator_actions(*, run_id: uuid.UUID | str) -> list[OperatorAction]:
    """The audit entries of a run, newest first: those on it and the one that started it (a
    resubmission of an older run). Index-backed (opaction_run_idx, opaction_new_run_idx)."""
    return list(
        OperatorAction.objects.filter(Q(run_id=run_id) | Q(new_run_id=run_id))
        .select_related("step")
        .order_by("-created_at", "-id")[:200]
    )
