"""The conditions of the platform's liveness (issue 21; split from the evaluator in issue 27):
steps past their deadline, the dispatcher's lag and due backlog, circuit breakers not closed,
queues with work and no consumer, and the dead man's switch over the periodic tasks. The first
three and the last are database `Statement`s (rule-independent reads: once per kind, each rule
compares its own threshold or target); breakers and queues are read from Redis and the broker."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings

from agents.breaker import CircuitBreaker, _redis
from alerting.models import AlertRule, RuleKind
from alerting.transitions import Finding
from liveness.heartbeat import consumers_alive
from liveness.last_run import last_run_ages, last_run_start_counting
from liveness.queues import queue_depths
from supervisor.periodic import periodic_tasks_shipped

from . import condition_kit as kit
from .condition_kit import Found, Rows, Rules, Statement
from .words import duration_words, plural

BREAKERS_READ = 500


STEPS_OVERDUE_SQL = """
SELECT count(*), (array_agg(run_id))[1:%(limit)s]
  FROM (SELECT run_id FROM scheduler_step
         WHERE process_state = 'processing' AND COALESCE(start_by, complete_by) < statement_timestamp()
         LIMIT 10000) s
"""


def _steps_overdue(rules: Rules, rows: Rows) -> Found:
    ((count, ids),) = rows
    message = f"{plural(count, 'step')} Processing past their deadline"
    return kit.over_threshold(rules, count, lambda rule: message, kit.ids_of(ids))


# The due occurrences, oldest first, counted up to `cap`: the backlog and, from the oldest,
# the dispatch lag.
DUE_SQL = """
SELECT count(*), EXTRACT(EPOCH FROM statement_timestamp() - min(next_execution_at))
  FROM (SELECT next_execution_at FROM scheduler_scheduledjob
         WHERE next_execution_at IS NOT NULL AND next_execution_at <= statement_timestamp()
         ORDER BY next_execution_at LIMIT %(cap)s) d
"""


def _dispatch_lag(rules: Rules, rows: Rows) -> Found:
    ((_, lag),) = rows
    return kit.over_threshold(
        rules, lag, lambda rule: f"the oldest due job occurrence is {float(lag):.0f} s late"
    )


def _backlog_params(rules: Rules) -> dict[str, Any]:
    # Counted up to the largest threshold + 1: enough to tell every rule whether it is exceeded.
    return {"cap": int(max(r.threshold for r in rules)) + 1}


def _due_backlog(rules: Rules, rows: Rows) -> Found:
    ((count, _),) = rows
    return kit.over_threshold(
        rules, count, lambda rule: f"more than {int(rule.threshold)} job occurrences are due"
    )


def circuit_open(rules: Rules) -> Found:
    """Breakers not closed (open or probing), read once for every rule (one SCAN, the states in
    one pipeline). "Longer than `threshold` seconds" is the alert's for-duration
    (alerting/services.py): it fires once a breaker has stayed not-closed that long, through its
    half-open probes."""
    found = kit.found_none(rules)
    prefix = f"{settings.REDIS_PREFIX}sas:breaker:"
    client = _redis()
    names: list[str] = []
    for key in client.scan_iter(match=f"{prefix}*", count=200):
        if len(names) >= BREAKERS_READ:
            break
        name = key.decode()[len(prefix) :]
        if name not in names:  # SCAN may return a key twice
            names.append(name)
    if not names:
        return found
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.hget(CircuitBreaker(name).key, "state")
    for name, raw in zip(names, pipe.execute(), strict=True):
        state = raw.decode() if raw else "closed"
        if state == "closed":
            continue
        for rule in kit.rules_targeting(rules, name):
            found[rule.pk].append(Finding(subject=name, message=f"circuit breaker {name} is {state}"))
    return found


def queue_no_consumer(rules: Rules) -> Found:
    found = kit.found_none(rules)
    queues: list[str] = []
    for rule in rules:
        for queue in [rule.target] if rule.target else settings.SAS_ALERT_QUEUES:
            if queue not in queues:
                queues.append(queue)
    depths = {name: depth for name, (depth, _) in queue_depths(names=queues).items()}
    # Consumers are looked for only where work waits (one round trip for those queues).
    waiting = [q for q, d in depths.items() if d > 0]
    alive = consumers_alive(queues=waiting) if waiting else {}
    idle = {q: depths[q] for q in waiting if alive.get(q, 0) == 0}
    for rule in rules:
        for queue in [rule.target] if rule.target else settings.SAS_ALERT_QUEUES:
            if queue in idle:
                found[rule.pk].append(
                    Finding(
                        subject=queue,
                        message=f"queue {queue}: {plural(idle[queue], 'message')} and no live consumer",
                    )
                )
    return found


# The dead man's switch reads the periodic rows as they are (edited or not): django-celery-beat's
# tables, by name (unique).
PERIODIC_SQL = """
SELECT t.name, t.task, i.every, i.period
  FROM django_celery_beat_periodictask t
  JOIN django_celery_beat_intervalschedule i ON i.id = t.interval_id
 WHERE t.enabled AND t.name = ANY(%(names)s::text[])
"""
_SECONDS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}


def _periodic_wanted(rule: AlertRule) -> list[str]:
    return [rule.target] if rule.target else [row for row, *_ in periodic_tasks_shipped()]


def _periodic_params(rules: Rules) -> dict[str, Any]:
    return {"names": sorted({name for rule in rules for name in _periodic_wanted(rule)})}


def _periodic_not_run(rules: Rules, rows: Rows) -> Found:
    """The dead man's switch: the task of a periodic row has not completed within `threshold`
    x its interval. Its last run is recorded by the worker that ran it (liveness/last_run.py),
    so a dead beat and a dead worker both show: the last runs of every row, one HMGET."""
    found = kit.found_none(rules)
    periodic = {name: (task, every * _SECONDS.get(period, 1)) for name, task, every, period in rows}
    ages = last_run_ages(tasks=sorted({task for task, _ in periodic.values()}))
    for task, age in ages.items():
        if age is None:
            last_run_start_counting(task=task)
    for rule in rules:
        for name in _periodic_wanted(rule):
            if name not in periodic:
                continue
            task, every = periodic[name]
            age = ages.get(task)
            limit = max(1.0, rule.threshold) * every
            if age is not None and age > limit:
                found[rule.pk].append(
                    Finding(
                        subject=name,
                        message=f"{name} ({task}) has not run for {duration_words(timedelta(seconds=age))}"
                        f" (limit {duration_words(timedelta(seconds=limit))})",
                    )
                )
    return found


PLATFORM_STATEMENTS: dict[str, Statement] = {
    RuleKind.STEPS_OVERDUE: Statement(STEPS_OVERDUE_SQL, lambda rules: kit.LIMIT_PARAMS, _steps_overdue),
    RuleKind.DISPATCH_LAG: Statement(DUE_SQL, lambda rules: {"cap": 1}, _dispatch_lag),
    RuleKind.DUE_BACKLOG: Statement(DUE_SQL, _backlog_params, _due_backlog),
    RuleKind.PERIODIC_NOT_RUN: Statement(PERIODIC_SQL, _periodic_params, _periodic_not_run),
}
# The kinds read from Redis and the broker alone.
REDIS_CONDITIONS: dict[str, Callable[[Rules], Found]] = {
    RuleKind.CIRCUIT_OPEN: circuit_open,
    RuleKind.QUEUE_NO_CONSUMER: queue_no_consumer,
}
