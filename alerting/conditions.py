"""The rule kinds' conditions: each reads the database (or Redis for breakers, queues and
last runs) with one bounded, index-backed statement and returns the subjects for which the
rule holds now (`Finding`s). No Python loop over history: every statement reads one window of
an index (bench/alerts.py measures a tick over 1,000,000 history rows; plans in bench/README.md).

Which index serves what:
- failure rates of workflows and jobs, runs needing an operator: run_state_created_idx
  (state, created_at) - one range per terminal state;
- consecutive failures of a job: run_job_created_idx (job, created_at) - N rows per job;
- a remote service's failure rate: history_attempt_started_idx (started_at) WHERE attempt;
- a step in Error: step_error_finished_idx (finished_at) WHERE Error;
- steps overdue: step_processing_deadline_idx; missed runs, dispatch lag and due backlog:
  scheduledjob_due_idx (next_execution_at) - the due rows only, the backlog counted up to
  threshold + 1.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection

from agents.breaker import CircuitBreaker, _redis
from scheduler.models import RUN_TERMINAL_STATES, RunState
from supervisor.alerts import Finding
from supervisor.models import AlertRule, RuleKind
from supervisor.periodic import PERIODIC_TASKS

from . import liveness

# At most this many runs are linked to an alert per evaluation (the newest); the next ticks
# link the rest while the condition holds.
RUNS_PER_FINDING = 100
BREAKERS_READ = 500
# Run outcomes that count as failures: undone (compensated) or needing an operator (failed).
FAILED_STATES = [RunState.COMPENSATED.value, RunState.FAILED.value]
TERMINAL = [s.value for s in RUN_TERMINAL_STATES]


def _rows(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def _ids(values: Any) -> list[str]:
    return [str(v) for v in (values or [])]


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


WORKFLOW_FAILURE_RATE_SQL = """
SELECT workflow, count(*) AS total, count(*) FILTER (WHERE state = ANY(%(failed)s)) AS failed,
       (array_agg(id ORDER BY created_at DESC) FILTER (WHERE state = ANY(%(failed)s)))[1:%(limit)s]
  FROM scheduler_run
 WHERE state = ANY(%(terminal)s) AND created_at >= statement_timestamp() - %(window)s
   AND (%(target)s = '' OR workflow = %(target)s)
 GROUP BY workflow
HAVING count(*) >= %(min_runs)s
   AND count(*) FILTER (WHERE state = ANY(%(failed)s)) >= %(threshold)s * count(*)
   AND count(*) FILTER (WHERE state = ANY(%(failed)s)) > 0
"""


def workflow_failure_rate(rule: AlertRule) -> list[Finding]:
    rows = _rows(WORKFLOW_FAILURE_RATE_SQL, _rate_params(rule, target=rule.target))
    return [
        Finding(
            subject=workflow,
            message=f"workflow {workflow}: {failed} of {total} runs failed ({_pct(failed / total)})"
            f" in {rule.window}",
            run_ids=_ids(ids),
        )
        for workflow, total, failed, ids in rows
    ]


def _rate_params(rule: AlertRule, **extra: Any) -> dict[str, Any]:
    return {
        "failed": FAILED_STATES,
        "terminal": TERMINAL,
        "window": rule.window,
        "min_runs": rule.min_runs,
        "threshold": rule.threshold,
        "limit": RUNS_PER_FINDING,
        **extra,
    }


JOB_FAILURE_RATE_SQL = """
SELECT r.job_id, j.name, count(*), count(*) FILTER (WHERE r.state = ANY(%(failed)s)),
       (array_agg(r.id ORDER BY r.created_at DESC) FILTER (WHERE r.state = ANY(%(failed)s)))[1:%(limit)s]
  FROM scheduler_run r JOIN scheduler_job j ON j.id = r.job_id
 WHERE r.state = ANY(%(terminal)s) AND r.created_at >= statement_timestamp() - %(window)s
   AND r.job_id IS NOT NULL AND (%(job)s::bigint IS NULL OR r.job_id = %(job)s)
 GROUP BY r.job_id, j.name
HAVING count(*) >= %(min_runs)s
   AND count(*) FILTER (WHERE r.state = ANY(%(failed)s)) >= %(threshold)s * count(*)
   AND count(*) FILTER (WHERE r.state = ANY(%(failed)s)) > 0
"""


def job_failure_rate(rule: AlertRule) -> list[Finding]:
    rows = _rows(JOB_FAILURE_RATE_SQL, _rate_params(rule, job=rule.job_id))
    return [
        Finding(
            subject=str(job_id),
            message=f"job {name}: {failed} of {total} runs failed ({_pct(failed / total)}) in {rule.window}",
            run_ids=_ids(ids),
        )
        for job_id, name, total, failed, ids in rows
    ]


SERVICE_FAILURE_RATE_SQL = """
SELECT split_part(s.operation, '.', 2) AS service, count(*),
       count(*) FILTER (WHERE h.status <> 'succeeded')
  FROM scheduler_taskexecutionhistory h JOIN scheduler_step s ON s.id = h.step_id
 WHERE h.kind = 'attempt' AND h.started_at >= statement_timestamp() - %(window)s
   AND h.status IN ('succeeded', 'failed_transient', 'failed_permanent', 'timed_out')
   AND (%(target)s = '' OR split_part(s.operation, '.', 2) = %(target)s)
 GROUP BY 1
HAVING count(*) >= %(min_runs)s
   AND count(*) FILTER (WHERE h.status <> 'succeeded') >= %(threshold)s * count(*)
   AND count(*) FILTER (WHERE h.status <> 'succeeded') > 0
"""


def service_failure_rate(rule: AlertRule) -> list[Finding]:
    rows = _rows(SERVICE_FAILURE_RATE_SQL, _rate_params(rule, target=rule.target))
    return [
        Finding(
            subject=service,
            message=f"service {service}: {failed} of {total} attempts failed ({_pct(failed / total)})"
            f" in {rule.window}",
        )
        for service, total, failed in rows
    ]


# The jobs to look at: the rule's job, or every job with a run ended in the window.
JOB_CONSECUTIVE_FAILURES_SQL = """
SELECT j.id, j.name, x.ids
  FROM scheduler_job j
 CROSS JOIN LATERAL (
       SELECT array_agg(l.id) AS ids, count(*) AS n, bool_and(l.state = ANY(%(failed)s)) AS all_failed
         FROM (SELECT r.id, r.state FROM scheduler_run r
                WHERE r.job_id = j.id AND r.state = ANY(%(terminal)s)
                ORDER BY r.created_at DESC LIMIT %(n)s) l) x
 WHERE j.id IN (SELECT %(job)s::bigint WHERE %(job)s::bigint IS NOT NULL
                UNION SELECT DISTINCT r.job_id FROM scheduler_run r
                       WHERE %(job)s::bigint IS NULL AND r.job_id IS NOT NULL
                         AND r.state = ANY(%(terminal)s)
                         AND r.created_at >= statement_timestamp() - %(window)s)
   AND x.n >= %(n)s AND x.all_failed
"""


def job_consecutive_failures(rule: AlertRule) -> list[Finding]:
    n = max(1, int(rule.threshold))
    rows = _rows(
        JOB_CONSECUTIVE_FAILURES_SQL,
        {"failed": FAILED_STATES, "terminal": TERMINAL, "n": n, "job": rule.job_id, "window": rule.window},
    )
    return [
        Finding(subject=str(job_id), message=f"job {name}: its last {n} runs failed", run_ids=_ids(ids))
        for job_id, name, ids in rows
    ]


JOB_MISSED_RUNS_SQL = """
SELECT s.job_id, j.name, min(s.next_execution_at)
  FROM scheduler_scheduledjob s JOIN scheduler_job j ON j.id = s.job_id
 WHERE s.next_execution_at IS NOT NULL
   AND s.next_execution_at <= statement_timestamp() - %(late)s
   AND (%(job)s::bigint IS NULL OR s.job_id = %(job)s)
 GROUP BY s.job_id, j.name
 LIMIT 1000
"""


def job_missed_runs(rule: AlertRule) -> list[Finding]:
    rows = _rows(JOB_MISSED_RUNS_SQL, {"late": timedelta(seconds=rule.threshold), "job": rule.job_id})
    return [
        Finding(
            subject=str(job_id),
            message=f"job {name}: a run due at {due:%Y-%m-%d %H:%M:%S} UTC has not started",
        )
        for job_id, name, due in rows
    ]


STEP_ERROR_SQL = """
SELECT name, count(*), (array_agg(run_id ORDER BY finished_at DESC))[1:%(limit)s]
  FROM scheduler_step
 WHERE process_state = 'error' AND finished_at >= statement_timestamp() - %(window)s
   AND kind = 'forward' AND NOT error_permanent
   AND (%(target)s = '' OR name = %(target)s)
 GROUP BY name
"""


def step_error(rule: AlertRule) -> list[Finding]:
    rows = _rows(STEP_ERROR_SQL, {"window": rule.window, "target": rule.target, "limit": RUNS_PER_FINDING})
    return [
        Finding(subject=name, message=f"{name}: {count} step(s) in Error in {rule.window}", run_ids=_ids(ids))
        for name, count, ids in rows
    ]


RUN_NEEDS_OPERATOR_SQL = """
SELECT count(*), (array_agg(id ORDER BY created_at DESC))[1:%(limit)s]
  FROM scheduler_run
 WHERE state = 'failed' AND created_at >= statement_timestamp() - %(window)s
"""


def run_needs_operator(rule: AlertRule) -> list[Finding]:
    ((count, ids),) = _rows(RUN_NEEDS_OPERATOR_SQL, {"window": rule.window, "limit": RUNS_PER_FINDING})
    if not count:
        return []
    return [Finding(subject="", message=f"{count} run(s) need an operator (Failed)", run_ids=_ids(ids))]


COMPENSATION_STRUGGLING_SQL = """
SELECT name, count(*), (array_agg(run_id))[1:%(limit)s]
  FROM (SELECT name, run_id FROM scheduler_step
         WHERE process_state = 'pending' AND kind = 'compensation' AND failure_count >= max_failures
        UNION ALL
        SELECT name, run_id FROM scheduler_step
         WHERE process_state = 'processing' AND kind = 'compensation' AND failure_count >= max_failures) s
 WHERE (%(target)s = '' OR name = %(target)s)
 GROUP BY name
"""


def compensation_struggling(rule: AlertRule) -> list[Finding]:
    rows = _rows(COMPENSATION_STRUGGLING_SQL, {"target": rule.target, "limit": RUNS_PER_FINDING})
    return [
        Finding(
            subject=name, message=f"compensation {name} keeps failing on {count} run(s)", run_ids=_ids(ids)
        )
        for name, count, ids in rows
    ]


STEPS_OVERDUE_SQL = """
SELECT count(*), (array_agg(run_id))[1:%(limit)s]
  FROM (SELECT run_id FROM scheduler_step
         WHERE process_state = 'processing' AND COALESCE(start_by, complete_by) < statement_timestamp()
         LIMIT 10000) s
"""


def steps_overdue(rule: AlertRule) -> list[Finding]:
    ((count, ids),) = _rows(STEPS_OVERDUE_SQL, {"limit": RUNS_PER_FINDING})
    if count <= rule.threshold:
        return []
    return [Finding(subject="", message=f"{count} step(s) Processing past their deadline", run_ids=_ids(ids))]


DUE_SQL = """
SELECT count(*), min(next_execution_at)
  FROM (SELECT next_execution_at FROM scheduler_scheduledjob
         WHERE next_execution_at IS NOT NULL AND next_execution_at <= statement_timestamp()
         ORDER BY next_execution_at LIMIT %(cap)s) d
"""


def _due(cap: int) -> tuple[int, Any]:
    ((count, oldest),) = _rows(DUE_SQL, {"cap": cap})
    return int(count), oldest


def dispatch_lag(rule: AlertRule) -> list[Finding]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXTRACT(EPOCH FROM statement_timestamp() - next_execution_at) "
            "FROM scheduler_scheduledjob WHERE next_execution_at IS NOT NULL "
            "AND next_execution_at <= statement_timestamp() "
            "ORDER BY next_execution_at LIMIT 1"
        )
        row = cursor.fetchone()
    if row is None or float(row[0]) <= rule.threshold:
        return []
    return [Finding(subject="", message=f"the oldest due job occurrence is {float(row[0]):.0f} s late")]


def due_backlog(rule: AlertRule) -> list[Finding]:
    count, _ = _due(int(rule.threshold) + 1)
    if count <= rule.threshold:
        return []
    return [Finding(subject="", message=f"more than {int(rule.threshold)} job occurrences are due")]


def circuit_open(rule: AlertRule) -> list[Finding]:
    """Breakers not closed (open or probing). "Longer than `threshold` seconds" is the alert's
    for-duration (alerting/services.py): it fires once a breaker has stayed not-closed that
    long, through its half-open probes."""
    prefix = f"{settings.REDIS_PREFIX}sas:breaker:"
    findings = []
    for n, key in enumerate(_redis().scan_iter(match=f"{prefix}*", count=200)):
        if n >= BREAKERS_READ:
            break
        name = key.decode()[len(prefix) :]
        if rule.target and name != rule.target:
            continue
        state = CircuitBreaker(name).snapshot().get("state", "closed")
        if state != "closed":
            findings.append(Finding(subject=name, message=f"circuit breaker {name} is {state}"))
    return findings


def queue_no_consumer(rule: AlertRule) -> list[Finding]:
    queues = [rule.target] if rule.target else list(settings.SAS_ALERT_QUEUES)
    findings = []
    for queue in queues:
        depth = liveness.queue_depth(queue=queue)
        if depth > 0 and liveness.consumers_alive(queue=queue) == 0:
            findings.append(
                Finding(subject=queue, message=f"queue {queue}: {depth} message(s) and no live consumer")
            )
    return findings


def periodic_not_run(rule: AlertRule) -> list[Finding]:
    """The dead man's switch: the task of a periodic row has not completed within `threshold`
    x its interval (the interval as the row says, edited or not). Its last run is recorded by
    the worker that ran it (alerting/liveness.py), so a dead beat and a dead worker both show."""
    from django_celery_beat.models import PeriodicTask

    names = [rule.target] if rule.target else [row for row, *_ in PERIODIC_TASKS]
    findings = []
    rows = PeriodicTask.objects.filter(name__in=names, enabled=True).select_related("interval")
    for row in rows:
        if row.interval is None:
            continue
        every = row.interval.every * {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}.get(
            row.interval.period, 1
        )
        limit = max(1.0, rule.threshold) * every
        age = liveness.last_run_age(task=row.task)
        if age is None:
            liveness.last_run_start_counting(task=row.task)
            continue
        if age > limit:
            findings.append(
                Finding(
                    subject=row.name,
                    message=f"{row.name} ({row.task}) has not run for {age:.0f} s (limit {limit:.0f} s)",
                )
            )
    return findings


CONDITIONS: dict[str, Callable[[AlertRule], list[Finding]]] = {
    RuleKind.WORKFLOW_FAILURE_RATE: workflow_failure_rate,
    RuleKind.JOB_FAILURE_RATE: job_failure_rate,
    RuleKind.SERVICE_FAILURE_RATE: service_failure_rate,
    RuleKind.JOB_CONSECUTIVE_FAILURES: job_consecutive_failures,
    RuleKind.JOB_MISSED_RUNS: job_missed_runs,
    RuleKind.STEP_ERROR: step_error,
    RuleKind.RUN_NEEDS_OPERATOR: run_needs_operator,
    RuleKind.COMPENSATION_STRUGGLING: compensation_struggling,
    RuleKind.CIRCUIT_OPEN: circuit_open,
    RuleKind.STEPS_OVERDUE: steps_overdue,
    RuleKind.QUEUE_NO_CONSUMER: queue_no_consumer,
    RuleKind.DISPATCH_LAG: dispatch_lag,
    RuleKind.DUE_BACKLOG: due_backlog,
    RuleKind.PERIODIC_NOT_RUN: periodic_not_run,
}
