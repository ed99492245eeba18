"""Read-only queries for the operator admin: run lists with their counts, and engine health.

Nothing here writes. Every count that the admin shows per row is a correlated subquery, so a
changelist page costs the same number of queries whatever its size, and the subqueries run only
for the rows on the page (PostgreSQL evaluates select-list subqueries after LIMIT).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from django.db.models import Count, Exists, IntegerField, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce, Now

from agents.breaker import CircuitBreaker, _redis
from supervisor.models import Alert
from supervisor.periodic import PERIODIC_TASKS

from .models import Run, Step
from .workflows import get_workflow, registered_workflows

logger = logging.getLogger(__name__)

# The remote services agents call through a circuit breaker (agents/breaker.py), always shown.
BREAKER_SERVICES: tuple[str, ...] = ("inventory", "payment", "shipping")
# Webhook deliveries have one breaker per subscriber host, "webhook:<host>" (webhooks/tasks.py);
# those that exist in Redis are listed after the services, at most this many.
WEBHOOK_BREAKER_PREFIX = "webhook:"
WEBHOOK_BREAKERS_SHOWN = 50

# Forward steps whose work was done (and maybe undone since): they count as progress.
_DONE_STATES = (Step.State.PROCESSED, Step.State.COMPENSATING, Step.State.COMPENSATED)


def _count(queryset: QuerySet[Any]) -> Coalesce:
    """`(SELECT count(*) ... )` correlated on `run_id = OuterRef("pk")`, 0 when there is none."""
    counted = queryset.order_by().values("run_id").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def _open_alerts(run_ref: str = "pk") -> QuerySet[Alert]:
    return Alert.objects.filter(run_id=OuterRef(run_ref), acknowledged_at__isnull=True)


def run_list_annotated(*, queryset: QuerySet[Run] | None = None) -> QuerySet[Run]:
    """Runs with `steps_total`, `steps_done` (forward steps) and `open_alerts` per row, and
    their owner joined in."""
    qs = Run.objects.all() if queryset is None else queryset
    forward = Step.objects.filter(run_id=OuterRef("pk"), kind=Step.Kind.FORWARD)
    return qs.select_related("owner").annotate(
        steps_total=_count(forward),
        steps_done=_count(forward.filter(process_state__in=_DONE_STATES)),
        open_alerts=_count(_open_alerts()),
    )


def run_needs_attention_q() -> Q:
    """Runs an operator should look at: Failed, or with an alert nobody acknowledged."""
    return Q(state=Run.State.FAILED) | Q(Exists(_open_alerts()))


def runs_need_attention_count() -> int:
    """How many runs `run_needs_attention_q` matches, as a UNION of two index scans (Failed runs
    by run_state_created_idx, open alerts by alert_open_idx) rather than a scan of all runs."""
    failed = Run.objects.filter(state=Run.State.FAILED).order_by().values("pk")
    alerted = Alert.objects.filter(acknowledged_at__isnull=True).order_by().values("run_id")
    return failed.union(alerted).count()


def run_has_overdue_step_q() -> Q:
    """Runs with a step still Processing past its complete-by (the supervisor is behind or down)."""
    return Q(Exists(step_overdue_queryset().filter(run_id=OuterRef("pk"))))


def step_overdue_queryset() -> QuerySet[Step]:
    """Processing steps whose complete-by has passed (served by step_processing_deadline_idx)."""
    return Step.objects.filter(process_state=Step.State.PROCESSING, complete_by__lt=Now())


def steps_overdue_count() -> int:
    """How many steps are Processing past their deadline. Normally 0: the supervisor returns
    each to Pending (or Error) within one sweep interval."""
    return step_overdue_queryset().count()


def run_state_counts() -> dict[str, int]:
    """Runs per state, every state present (0 when none), in the order of `Run.State`."""
    rows = Run.objects.order_by().values_list("state").annotate(n=Count("pk"))
    found = {state: n for state, n in rows}
    return {state: found.get(state, 0) for state in Run.State.values}


def alerts_open_count() -> int:
    """Alerts nobody has acknowledged yet (served by the partial index alert_open_idx)."""
    return Alert.objects.filter(acknowledged_at__isnull=True).count()


def workflow_names() -> list[str]:
    """Registered workflows (from code, not a DISTINCT over the runs table)."""
    return registered_workflows()


def workflow_step_names() -> list[str]:
    """Every step name (forward and compensation) of every registered workflow, sorted."""
    names: set[str] = set()
    for workflow in registered_workflows():
        for step in get_workflow(workflow).steps:
            names.add(step.name)
            if step.compensation is not None:
                names.add(step.compensation.name)
    return sorted(names)


@dataclass(frozen=True)
class BreakerStatus:
    service: str
    state: str  # closed / open / half_open, or "unknown" when Redis cannot be read
    failures: int
    opened: int
    open_until: datetime | None
    error: str = ""


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
        statuses.append(
            BreakerStatus(
                service=service,
                state=raw.get("state", "closed"),
                failures=int(raw.get("failures") or 0),
                opened=int(raw.get("opened") or 0),
                open_until=datetime.fromtimestamp(float(open_until), tz=UTC) if open_until else None,
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


def engine_periodic_tasks() -> list[PeriodicTaskInfo]:
    """The engine's django-celery-beat rows (supervisor sweep, scheduler tick) with intervals."""
    from django_celery_beat.models import PeriodicTask

    names = [row[0] for row in PERIODIC_TASKS]
    rows = {t.name: t for t in PeriodicTask.objects.filter(name__in=names).select_related("interval")}
    infos: list[PeriodicTaskInfo] = []
    for name, task, _queue, _setting in PERIODIC_TASKS:
        row = rows.get(name)
        if row is None:
            infos.append(PeriodicTaskInfo(name, task, None, False, None, None))
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
            )
        )
    return infos


@dataclass(frozen=True)
class EngineHealth:
    run_states: dict[str, int]
    runs_need_attention: int
    steps_overdue: int
    alerts_open: int
    breakers: list[BreakerStatus]
    periodic_tasks: list[PeriodicTaskInfo]


def engine_health() -> EngineHealth:
    """Everything the admin's engine-health page shows, in a handful of indexed queries."""
    return EngineHealth(
        run_states=run_state_counts(),
        runs_need_attention=runs_need_attention_count(),
        steps_overdue=steps_overdue_count(),
        alerts_open=alerts_open_count(),
        breakers=breaker_statuses(),
        periodic_tasks=engine_periodic_tasks(),
    )
