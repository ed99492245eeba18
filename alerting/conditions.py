"""The rule kinds' conditions, evaluated a kind at a time: every enabled rule of one kind in one
bounded, index-backed statement (or, for breakers and queues, one Redis pipeline). Each kind
takes the rules of its kind and returns, per rule id, the subjects for which the rule holds now
(`Finding`s). No Python loop over history.

A tick sends every kind's statement at once (`conditions_evaluate`: psycopg's pipeline mode, one
flush) and reads Redis while PostgreSQL works, so the conditions cost one round trip, not one
per kind or per rule (issue 21's benchmark: bench/alerts.py, plans and figures in
bench/README.md, "Alerting"). A statement that fails aborts the rest of the pipeline: the kinds
are then read again one statement each, so only the failing kind is skipped (logged).

How a batch stays index-backed: the rules travel as parallel arrays (`unnest`), and each rule's
condition is a LATERAL subquery that cannot be flattened (it aggregates), so it runs once per
rule as its own index range scan, parameterised by the rule's window - the same rows a
statement per rule read. A window that is a per-rule parameter is one the planner cannot
estimate (it assumes a third of the table), so every windowed scan also carries the batch's
widest window as a constant: the planner sizes the range from it, and chooses the index.

Which index serves what:
- failure rates of workflows and every job, runs needing an operator, the jobs seen by a
  consecutive-failures rule on every job: run_state_created_idx (state, created_at) - one range
  per terminal state;
- one job's failure rate and its last N runs: run_job_created_idx (job, created_at);
- a remote service's failure rate: history_attempt_started_idx (started_at) WHERE attempt;
- a step in Error: step_error_finished_idx (finished_at) WHERE Error;
- steps overdue: step_processing_deadline_idx; missed runs, dispatch lag and due backlog:
  scheduledjob_due_idx (next_execution_at) - the due rows only, the backlog counted up to the
  largest threshold + 1.
Rule-independent reads (overdue steps, the due backlog, struggling compensations) run once per
kind, whatever the number of rules; each rule compares its own threshold or target.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import redis
from django.conf import settings
from django.db import DatabaseError, connection, transaction

from agents.breaker import CircuitBreaker, _redis
from alerting.models import AlertRule, RuleKind
from alerting.transitions import Finding
from liveness.heartbeat import consumers_alive
from liveness.last_run import last_run_ages, last_run_start_counting
from liveness.queues import BrokerUnreadable, queue_depths
from scheduler.models import RUN_TERMINAL_STATES, RunState
from supervisor.periodic import periodic_tasks_shipped

from .words import duration_words, plural

logger = logging.getLogger("sas.alerts")

# At most this many runs are linked to an alert per evaluation (the newest); the next ticks
# link the rest while the condition holds.
RUNS_PER_FINDING = 100
BREAKERS_READ = 500
# Run outcomes that count as failures: undone (compensated) or needing an operator (failed).
FAILED_STATES = [RunState.COMPENSATED.value, RunState.FAILED.value]
TERMINAL = [s.value for s in RUN_TERMINAL_STATES]
_LIMIT = {"limit": RUNS_PER_FINDING}

Rules = Sequence[AlertRule]
Found = dict[int, list[Finding]]
Rows = list[tuple[Any, ...]]


@dataclass(frozen=True)
class Statement:
    """A database kind: its statement, its parameters built from the kind's rules, and its
    rows turned into findings."""

    sql: str
    params: Callable[[Rules], dict[str, Any]]
    findings: Callable[[Rules, Rows], Found]

    def run(self, rules: Rules) -> Found:
        """This kind alone, in one round trip."""
        return self.findings(rules, _rows(self.sql, self.params(rules)))


def _rows(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def _ids(values: Any) -> list[str]:
    return [str(v) for v in (values or [])]


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def _found(rules: Rules) -> Found:
    return {rule.pk: [] for rule in rules}


def _widest(rules: Rules) -> timedelta:
    return max((rule.window for rule in rules), default=timedelta(0))


def _rate_params(rules: Rules) -> dict[str, Any]:
    """The arrays of a failure-rate batch (one element per rule) and its constants."""
    return {
        "rule_ids": [r.pk for r in rules],
        "windows": [r.window for r in rules],
        "targets": [r.target for r in rules],
        "jobs": [r.job_id for r in rules],
        "min_runs": [r.min_runs for r in rules],
        # numeric, not float8: 0.3 x 10 runs must be 3 (as the literal was), not 3.0000000000000004.
        "thresholds": [r.threshold for r in rules],
        "widest": _widest(rules),
        "failed": FAILED_STATES,
        "terminal": TERMINAL,
        "limit": RUNS_PER_FINDING,
    }


# Whose failures page operators (issue 27): the operator rules watch the platform - runs of no
# job (orders, system workflows) and jobs of staff accounts. A customer's job (its owner not
# staff) is watched by the customer's own rules, and by an operator rule only one set on that
# job (an operator turned it on); an operator rule on every job or workflow leaves it out.
CUSTOMER_JOBS_SQL = (
    "SELECT cj.id FROM scheduler_job cj JOIN auth_user cu ON cu.id = cj.owner_id WHERE NOT cu.is_staff"
)
# A job the rule may page about: the rule names it, or its owner is staff.
_PLATFORM_JOB_SQL = (
    "(q.job_id IS NOT NULL OR EXISTS (SELECT 1 FROM auth_user u WHERE u.id = j.owner_id AND u.is_staff))"
)

WORKFLOW_FAILURE_RATE_SQL = """
SELECT q.rule_id, x.workflow, x.total, x.failed, x.run_ids
  FROM unnest(%(rule_ids)s::bigint[], %(windows)s::interval[], %(targets)s::text[],
              %(min_runs)s::bigint[], %(thresholds)s::numeric[])
       AS q(rule_id, win, target, min_runs, threshold)
 CROSS JOIN LATERAL (
       SELECT workflow, count(*) AS total, count(*) FILTER (WHERE state = ANY(%(failed)s)) AS failed,
              (array_agg(id ORDER BY created_at DESC) FILTER (WHERE state = ANY(%(failed)s)))[1:%(limit)s]
              AS run_ids
         FROM scheduler_run
        WHERE state = ANY(%(terminal)s)
          AND created_at >= statement_timestamp() - %(widest)s
          AND created_at >= statement_timestamp() - q.win
          AND (q.target = '' OR workflow = q.target)
          AND (job_id IS NULL OR job_id NOT IN (%(customer_jobs)s))
        GROUP BY workflow) x
 WHERE x.total >= q.min_runs AND x.failed >= q.threshold * x.total AND x.failed > 0
""".replace("%(customer_jobs)s", CUSTOMER_JOBS_SQL)


def _workflow_failure_rate(rules: Rules, rows: Rows) -> Found:
    found = _found(rules)
    windows = {r.pk: r.window for r in rules}
    for rule_id, workflow, total, failed, ids in rows:
        found[rule_id].append(
            Finding(
                subject=workflow,
                message=f"workflow {workflow}: {failed} of {total} runs failed ({_pct(failed / total)})"
                f" in {duration_words(windows[rule_id])}",
                run_ids=_ids(ids),
            )
        )
    return found


# A rule on one job reads that job's runs (run_job_created_idx); a rule on every job reads the
# window of every run (run_state_created_idx) - runs of no job make a group the join to
# scheduler_job drops (a `job_id IS NOT NULL` here lets the planner AND in a bitmap of every job
# run, run_job_occurrence_unique's predicate). Both branches are in the LATERAL, each switched
# on or off by the rule's job (a one-time filter, not a per-row OR).
JOB_FAILURE_RATE_SQL = """
SELECT q.rule_id, x.job_id, j.name, x.total, x.failed, x.run_ids
  FROM unnest(%(rule_ids)s::bigint[], %(jobs)s::bigint[], %(windows)s::interval[],
              %(min_runs)s::bigint[], %(thresholds)s::numeric[])
       AS q(rule_id, job_id, win, min_runs, threshold)
 CROSS JOIN LATERAL (
       SELECT r.job_id, count(*) AS total, count(*) FILTER (WHERE r.state = ANY(%(failed)s)) AS failed,
              (array_agg(r.id ORDER BY r.created_at DESC)
                 FILTER (WHERE r.state = ANY(%(failed)s)))[1:%(limit)s] AS run_ids
         FROM (SELECT id, job_id, state, created_at FROM scheduler_run
                WHERE q.job_id IS NOT NULL AND job_id = q.job_id
                  AND created_at >= statement_timestamp() - %(widest)s
                  AND created_at >= statement_timestamp() - q.win
                  AND state = ANY(%(terminal)s)
               UNION ALL
               SELECT id, job_id, state, created_at FROM scheduler_run
                WHERE q.job_id IS NULL
                  AND state = ANY(%(terminal)s)
                  AND created_at >= statement_timestamp() - %(widest)s
                  AND created_at >= statement_timestamp() - q.win) r
        GROUP BY r.job_id) x
  JOIN scheduler_job j ON j.id = x.job_id
 WHERE x.total >= q.min_runs AND x.failed >= q.threshold * x.total AND x.failed > 0
   AND %(platform_job)s
""".replace("%(platform_job)s", _PLATFORM_JOB_SQL)


def _job_failure_rate(rules: Rules, rows: Rows) -> Found:
    found = _found(rules)
    windows = {r.pk: r.window for r in rules}
    for rule_id, job_id, name, total, failed, ids in rows:
        found[rule_id].append(
            Finding(
                subject=str(job_id),
                message=f"job {name}: {failed} of {total} runs failed ({_pct(failed / total)})"
                f" in {duration_words(windows[rule_id])}",
                run_ids=_ids(ids),
            )
        )
    return found


SERVICE_FAILURE_RATE_SQL = """
SELECT q.rule_id, x.service, x.total, x.failed
  FROM unnest(%(rule_ids)s::bigint[], %(windows)s::interval[], %(targets)s::text[],
              %(min_runs)s::bigint[], %(thresholds)s::numeric[])
       AS q(rule_id, win, target, min_runs, threshold)
 CROSS JOIN LATERAL (
       SELECT split_part(s.operation, '.', 2) AS service, count(*) AS total,
              count(*) FILTER (WHERE h.status <> 'succeeded') AS failed
         FROM scheduler_taskexecutionhistory h JOIN scheduler_step s ON s.id = h.step_id
        WHERE h.kind = 'attempt'
          AND h.status IN ('succeeded', 'failed_transient', 'failed_permanent', 'timed_out')
          AND h.started_at >= statement_timestamp() - %(widest)s
          AND h.started_at >= statement_timestamp() - q.win
          AND (q.target = '' OR split_part(s.operation, '.', 2) = q.target)
        GROUP BY 1) x
 WHERE x.total >= q.min_runs AND x.failed >= q.threshold * x.total AND x.failed > 0
"""


def _service_failure_rate(rules: Rules, rows: Rows) -> Found:
    found = _found(rules)
    windows = {r.pk: r.window for r in rules}
    for rule_id, service, total, failed in rows:
        found[rule_id].append(
            Finding(
                subject=service,
                message=f"service {service}: {failed} of {total} attempts failed ({_pct(failed / total)})"
                f" in {duration_words(windows[rule_id])}",
            )
        )
    return found


# The jobs a rule looks at: its job, or every job with a run ended in its window (runs of no job
# give NULL, which the join drops); then each of those jobs' last N runs (run_job_created_idx,
# newest first). The last-N LATERAL hangs on `seen`, not on scheduler_job: hung on the job table
# the planner probed the last N runs of every job for every rule before keeping the seen ones.
JOB_CONSECUTIVE_FAILURES_SQL = """
SELECT q.rule_id, j.id, j.name, x.run_ids, q.n
  FROM unnest(%(rule_ids)s::bigint[], %(jobs)s::bigint[], %(ns)s::int[], %(windows)s::interval[])
       AS q(rule_id, job_id, n, win)
 CROSS JOIN LATERAL (
       SELECT q.job_id AS id WHERE q.job_id IS NOT NULL
       UNION
       SELECT r.job_id FROM scheduler_run r
        WHERE q.job_id IS NULL AND r.state = ANY(%(terminal)s)
          AND r.created_at >= statement_timestamp() - %(widest)s
          AND r.created_at >= statement_timestamp() - q.win) seen
 CROSS JOIN LATERAL (
       SELECT array_agg(l.id) AS run_ids, count(*) AS n, bool_and(l.state = ANY(%(failed)s)) AS all_failed
         FROM (SELECT r.id, r.state FROM scheduler_run r
                WHERE r.job_id = seen.id AND r.state = ANY(%(terminal)s)
                ORDER BY r.created_at DESC LIMIT q.n) l) x
  JOIN scheduler_job j ON j.id = seen.id
 WHERE x.n >= q.n AND x.all_failed AND %(platform_job)s
""".replace("%(platform_job)s", _PLATFORM_JOB_SQL)


def _consecutive_params(rules: Rules) -> dict[str, Any]:
    return {
        "rule_ids": [r.pk for r in rules],
        "jobs": [r.job_id for r in rules],
        "ns": [max(1, int(r.threshold)) for r in rules],
        "windows": [r.window for r in rules],
        # Only a rule on every job scans a window (one on a job reads its last N runs).
        "widest": _widest([r for r in rules if r.job_id is None]),
        "failed": FAILED_STATES,
        "terminal": TERMINAL,
    }


def _last_runs_failed(n: int) -> str:
    if n == 1:
        return "its last run failed"
    return f"its last {n} runs failed"


def _job_consecutive_failures(rules: Rules, rows: Rows) -> Found:
    found = _found(rules)
    for rule_id, job_id, name, ids, n in rows:
        found[rule_id].append(
            Finding(subject=str(job_id), message=f"job {name}: {_last_runs_failed(n)}", run_ids=_ids(ids))
        )
    return found


JOB_MISSED_RUNS_SQL = """
SELECT q.rule_id, x.job_id, j.name, x.due
  FROM unnest(%(rule_ids)s::bigint[], %(jobs)s::bigint[], %(lates)s::interval[]) AS q(rule_id, job_id, late)
 CROSS JOIN LATERAL (
       SELECT s.job_id, min(s.next_execution_at) AS due
         FROM scheduler_scheduledjob s
        WHERE s.next_execution_at IS NOT NULL
          AND s.next_execution_at <= statement_timestamp() - %(least_late)s
          AND s.next_execution_at <= statement_timestamp() - q.late
          AND (q.job_id IS NULL OR s.job_id = q.job_id)
        GROUP BY s.job_id
        LIMIT 1000) x
  JOIN scheduler_job j ON j.id = x.job_id
"""


def _missed_params(rules: Rules) -> dict[str, Any]:
    lates = [timedelta(seconds=r.threshold) for r in rules]
    return {
        "rule_ids": [r.pk for r in rules],
        "jobs": [r.job_id for r in rules],
        "lates": lates,
        "least_late": min(lates, default=timedelta(0)),
    }


def _job_missed_runs(rules: Rules, rows: Rows) -> Found:
    found = _found(rules)
    for rule_id, job_id, name, due in rows:
        found[rule_id].append(
            Finding(
                subject=str(job_id),
                message=f"job {name}: a run due at {due:%Y-%m-%d %H:%M:%S} UTC has not started",
            )
        )
    return found


STEP_ERROR_SQL = """
SELECT q.rule_id, x.name, x.n, x.run_ids
  FROM unnest(%(rule_ids)s::bigint[], %(windows)s::interval[], %(targets)s::text[]) AS q(rule_id, win, target)
 CROSS JOIN LATERAL (
       SELECT name, count(*) AS n, (array_agg(run_id ORDER BY finished_at DESC))[1:%(limit)s] AS run_ids
         FROM scheduler_step
        WHERE process_state = 'error'
          AND finished_at >= statement_timestamp() - %(widest)s
          AND finished_at >= statement_timestamp() - q.win
          AND kind = 'forward' AND NOT error_permanent
          AND (q.target = '' OR name = q.target)
        GROUP BY name) x
"""


def _window_params(rules: Rules) -> dict[str, Any]:
    return {
        "rule_ids": [r.pk for r in rules],
        "windows": [r.window for r in rules],
        "targets": [r.target for r in rules],
        "widest": _widest(rules),
        "limit": RUNS_PER_FINDING,
    }


def _step_error(rules: Rules, rows: Rows) -> Found:
    found = _found(rules)
    windows = {r.pk: r.window for r in rules}
    for rule_id, name, count, ids in rows:
        found[rule_id].append(
            Finding(
                subject=name,
                message=f"{name}: {plural(count, 'step')} in Error in {duration_words(windows[rule_id])}",
                run_ids=_ids(ids),
            )
        )
    return found


RUN_NEEDS_OPERATOR_SQL = """
SELECT q.rule_id, x.n, x.run_ids
  FROM unnest(%(rule_ids)s::bigint[], %(windows)s::interval[]) AS q(rule_id, win)
 CROSS JOIN LATERAL (
       SELECT count(*) AS n, (array_agg(id ORDER BY created_at DESC))[1:%(limit)s] AS run_ids
         FROM scheduler_run
        WHERE state = 'failed'
          AND created_at >= statement_timestamp() - %(widest)s
          AND created_at >= statement_timestamp() - q.win) x
 WHERE x.n > 0
"""


def _need_operator(count: int) -> str:
    if count == 1:
        return "1 run needs an operator (Failed)"
    return f"{count} runs need an operator (Failed)"


def _run_needs_operator(rules: Rules, rows: Rows) -> Found:
    found = _found(rules)
    for rule_id, count, ids in rows:
        found[rule_id].append(Finding(subject="", message=_need_operator(count), run_ids=_ids(ids)))
    return found


# Rule-independent: read once, each rule keeps the names it targets.
COMPENSATION_STRUGGLING_SQL = """
SELECT name, count(*), (array_agg(run_id))[1:%(limit)s]
  FROM (SELECT name, run_id FROM scheduler_step
         WHERE process_state = 'pending' AND kind = 'compensation' AND failure_count >= max_failures
        UNION ALL
        SELECT name, run_id FROM scheduler_step
         WHERE process_state = 'processing' AND kind = 'compensation' AND failure_count >= max_failures) s
 GROUP BY name
"""


def _compensation_struggling(rules: Rules, rows: Rows) -> Found:
    found = _found(rules)
    for name, count, ids in rows:
        for rule in rules:
            if rule.target in ("", name):
                found[rule.pk].append(
                    Finding(
                        subject=name,
                        message=f"compensation {name} keeps failing on {plural(count, 'run')}",
                        run_ids=_ids(ids),
                    )
                )
    return found


STEPS_OVERDUE_SQL = """
SELECT count(*), (array_agg(run_id))[1:%(limit)s]
  FROM (SELECT run_id FROM scheduler_step
         WHERE process_state = 'processing' AND COALESCE(start_by, complete_by) < statement_timestamp()
         LIMIT 10000) s
"""


def _steps_overdue(rules: Rules, rows: Rows) -> Found:
    found = _found(rules)
    ((count, ids),) = rows
    for rule in rules:
        if count > rule.threshold:
            found[rule.pk].append(
                Finding(
                    subject="",
                    message=f"{plural(count, 'step')} Processing past their deadline",
                    run_ids=_ids(ids),
                )
            )
    return found


# The due occurrences, oldest first, counted up to `cap`: the backlog and, from the oldest,
# the dispatch lag.
DUE_SQL = """
SELECT count(*), EXTRACT(EPOCH FROM statement_timestamp() - min(next_execution_at))
  FROM (SELECT next_execution_at FROM scheduler_scheduledjob
         WHERE next_execution_at IS NOT NULL AND next_execution_at <= statement_timestamp()
         ORDER BY next_execution_at LIMIT %(cap)s) d
"""


def _dispatch_lag(rules: Rules, rows: Rows) -> Found:
    found = _found(rules)
    ((_, lag),) = rows
    for rule in rules:
        if lag is not None and float(lag) > rule.threshold:
            found[rule.pk].append(
                Finding(subject="", message=f"the oldest due job occurrence is {float(lag):.0f} s late")
            )
    return found


def _backlog_params(rules: Rules) -> dict[str, Any]:
    # Counted up to the largest threshold + 1: enough to tell every rule whether it is exceeded.
    return {"cap": int(max(r.threshold for r in rules)) + 1}


def _due_backlog(rules: Rules, rows: Rows) -> Found:
    found = _found(rules)
    ((count, _),) = rows
    for rule in rules:
        if count > rule.threshold:
            found[rule.pk].append(
                Finding(subject="", message=f"more than {int(rule.threshold)} job occurrences are due")
            )
    return found


def circuit_open(rules: Rules) -> Found:
    """Breakers not closed (open or probing), read once for every rule (one SCAN, the states in
    one pipeline). "Longer than `threshold` seconds" is the alert's for-duration
    (alerting/services.py): it fires once a breaker has stayed not-closed that long, through its
    half-open probes."""
    found = _found(rules)
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
        for rule in rules:
            if rule.target in ("", name):
                found[rule.pk].append(Finding(subject=name, message=f"circuit breaker {name} is {state}"))
    return found


def queue_no_consumer(rules: Rules) -> Found:
    found = _found(rules)
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
    found = _found(rules)
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


# The database kinds (what bench/alerts.py EXPLAINs: the statements themselves, not copies).
STATEMENTS: dict[str, Statement] = {
    RuleKind.WORKFLOW_FAILURE_RATE: Statement(
        WORKFLOW_FAILURE_RATE_SQL, _rate_params, _workflow_failure_rate
    ),
    RuleKind.JOB_FAILURE_RATE: Statement(JOB_FAILURE_RATE_SQL, _rate_params, _job_failure_rate),
    RuleKind.SERVICE_FAILURE_RATE: Statement(SERVICE_FAILURE_RATE_SQL, _rate_params, _service_failure_rate),
    RuleKind.JOB_CONSECUTIVE_FAILURES: Statement(
        JOB_CONSECUTIVE_FAILURES_SQL, _consecutive_params, _job_consecutive_failures
    ),
    RuleKind.JOB_MISSED_RUNS: Statement(JOB_MISSED_RUNS_SQL, _missed_params, _job_missed_runs),
    RuleKind.STEP_ERROR: Statement(STEP_ERROR_SQL, _window_params, _step_error),
    RuleKind.RUN_NEEDS_OPERATOR: Statement(RUN_NEEDS_OPERATOR_SQL, _window_params, _run_needs_operator),
    RuleKind.COMPENSATION_STRUGGLING: Statement(
        COMPENSATION_STRUGGLING_SQL, lambda rules: _LIMIT, _compensation_struggling
    ),
    RuleKind.STEPS_OVERDUE: Statement(STEPS_OVERDUE_SQL, lambda rules: _LIMIT, _steps_overdue),
    RuleKind.DISPATCH_LAG: Statement(DUE_SQL, lambda rules: {"cap": 1}, _dispatch_lag),
    RuleKind.DUE_BACKLOG: Statement(DUE_SQL, _backlog_params, _due_backlog),
    RuleKind.PERIODIC_NOT_RUN: Statement(PERIODIC_SQL, _periodic_params, _periodic_not_run),
}
# The kinds read from Redis alone.
REDIS_CONDITIONS: dict[str, Callable[[Rules], Found]] = {
    RuleKind.CIRCUIT_OPEN: circuit_open,
    RuleKind.QUEUE_NO_CONSUMER: queue_no_consumer,
}
# Every kind, each alone (one round trip or pipeline): what the pipeline falls back to.
CONDITIONS: dict[str, Callable[[Rules], Found]] = {
    **{kind: statement.run for kind, statement in STATEMENTS.items()},
    **REDIS_CONDITIONS,
}
# What a condition's read may raise: the kind (or the rule) is skipped and logged, the tick goes on.
_ERRORS = (DatabaseError, redis.RedisError, OSError, BrokerUnreadable)
# JIT off for the pipeline's statements (the first and last of the flush: no round trip of its
# own). A per-rule window is estimated at a third of the table, so a batch's cost passes
# jit_above_cost and PostgreSQL compiled each statement, every tick (they are not prepared):
# 30-70 ms of compiling for well under a millisecond of index range scans (bench/README.md).
JIT_OFF_SQL = "SET jit = off"
JIT_RESET_SQL = "RESET jit"


# The kinds a clean restart trips on its own: the periodic tasks' last runs are as old as the
# downtime until beat's first sends complete, and work queued meanwhile waits until the workers
# are up. For SAS_ALERT_STARTUP_GRACE seconds after the evaluator's process started they are not
# evaluated - their alerts stay as they are (an incident open before the restart is neither
# resolved nor paged again) - docs/decisions.md, "A clean restart pages nobody".
STARTUP_GRACE_KINDS = frozenset({RuleKind.PERIODIC_NOT_RUN, RuleKind.QUEUE_NO_CONSUMER})
# When this process loaded the evaluator: a worker's main process at start-up (its prefork
# children, forked from it, and its watchdog thread inherit it).
PROCESS_STARTED = time.time()


def startup_grace_kinds() -> frozenset[str]:
    """The kinds left out of this tick: the grace kinds while the process is younger than
    SAS_ALERT_STARTUP_GRACE seconds, none after."""
    if time.time() - PROCESS_STARTED < float(settings.SAS_ALERT_STARTUP_GRACE):
        return STARTUP_GRACE_KINDS
    return frozenset()


def conditions_evaluate(by_kind: Mapping[str, Rules]) -> Found:
    """Every rule's findings, keyed by rule id; a rule whose condition could not be read (a
    Redis or database error) is missing, and logged - the caller leaves its alerts as they are.
    The database kinds' statements go in one pipeline (one flush, run back to back by the
    server) and the Redis kinds are read meanwhile. A failed statement aborts the ones after it
    in the pipeline: the kinds are then read again one statement each, and a kind that fails
    alone, one rule at a time - so one bad rule costs its own evaluation, not its kind's. Inside
    a caller's transaction, each of these reads is a savepoint (a failed statement must not
    abort the caller's transaction); outside one, none is needed. The kinds in their start-up
    grace (`startup_grace_kinds`) are not read: their rules are missing too."""
    found: Found = {}
    waiting = startup_grace_kinds()
    by_kind = {kind: rules for kind, rules in by_kind.items() if kind not in waiting}
    sent = [kind for kind in by_kind if kind in STATEMENTS]
    try:
        connection.ensure_connection()
        with _savepoint(), connection.wrap_database_errors, connection.connection.pipeline():
            cursors = []
            with connection.cursor() as cursor:
                cursor.execute(JIT_OFF_SQL)
            for kind in sent:
                cursor = connection.cursor()
                cursor.execute(STATEMENTS[kind].sql, STATEMENTS[kind].params(by_kind[kind]))
                cursors.append((kind, cursor))
            with connection.cursor() as cursor:
                cursor.execute(JIT_RESET_SQL)
            for kind in by_kind:
                if kind not in STATEMENTS:
                    _kind_read(kind, by_kind[kind], found)  # Redis, while PostgreSQL works
        rows = {kind: cursor.fetchall() for kind, cursor in cursors}
    except DatabaseError:
        logger.warning("alert conditions: the pipeline failed; reading each kind alone", exc_info=True)
        _jit_reset()  # the pipeline's RESET was aborted with it
        for kind in sent:
            _kind_read(kind, by_kind[kind], found)
        return found
    for kind in sent:
        try:
            found.update(STATEMENTS[kind].findings(by_kind[kind], rows[kind]))
        except _ERRORS:
            logger.exception("alert rules of kind %s could not be evaluated; next tick retries", kind)
    return found


def _jit_reset() -> None:
    try:
        with _savepoint(), connection.cursor() as cursor:
            cursor.execute(JIT_RESET_SQL)
    except DatabaseError:
        logger.warning("alert conditions: could not RESET jit", exc_info=True)


def _savepoint() -> AbstractContextManager[Any]:
    return transaction.atomic() if connection.in_atomic_block else nullcontext()


def _kind_read(kind: str, rules: Rules, found: Found) -> None:
    try:
        with _savepoint():
            found.update(CONDITIONS[kind](rules))
        return
    except _ERRORS:
        if len(rules) == 1:
            logger.exception(
                "alert rule %s (%s) could not be evaluated; next tick retries", rules[0].pk, kind
            )
            return
    for rule in rules:  # which rule of the kind is it?
        _kind_read(kind, [rule], found)
