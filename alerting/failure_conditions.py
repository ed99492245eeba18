"""The conditions of runs, jobs, steps and remote services failing (issue 21; split from the
evaluator in issue 27): failure rates of a workflow, a job or a service, a job's consecutive
failures and missed runs, steps in Error, runs needing an operator, compensations that keep
failing. Each kind is one `Statement`: every rule of the kind in one bounded, index-backed
statement (the rules as parallel arrays, each rule's condition a LATERAL subquery that runs as
its own index range scan, with the batch's widest window as a constant for the planner; see
alerting/conditions.py for which index serves what)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from alerting.models import RuleKind
from alerting.transitions import Finding

from .condition_kit import (
    FAILED_STATES,
    LIMIT_PARAMS,
    RUNS_PER_FINDING,
    TERMINAL,
    Found,
    Rows,
    Rules,
    Statement,
    found_none,
    ids_of,
    rules_targeting,
    widest_window,
)
from .words import duration_words, failure_rate_words, last_runs_failed, need_operator, plural


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
        "widest": widest_window(rules),
        "failed": FAILED_STATES,
        "terminal": TERMINAL,
        "limit": RUNS_PER_FINDING,
    }


def _rate_found(rules: Rules, rows: Rows, units: str = "runs") -> Found:
    """A failure-rate kind's rows, each (rule id, subject, what, total, failed, run ids)."""
    found = found_none(rules)
    windows = {r.pk: r.window for r in rules}
    for rule_id, subject, what, total, failed, ids in rows:
        message = failure_rate_words(what, failed, total, windows[rule_id], units)
        found[rule_id].append(Finding(subject=subject, message=message, run_ids=ids_of(ids)))
    return found


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
    return _rate_found(rules, [(r, wf, f"workflow {wf}", t, f, ids) for r, wf, t, f, ids in rows])


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
    return _rate_found(rules, [(r, str(job), f"job {name}", t, f, ids) for r, job, name, t, f, ids in rows])


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
    return _rate_found(rules, [(r, svc, f"service {svc}", t, f, None) for r, svc, t, f in rows], "attempts")


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
        "widest": widest_window([r for r in rules if r.job_id is None]),
        "failed": FAILED_STATES,
        "terminal": TERMINAL,
    }


def _job_consecutive_failures(rules: Rules, rows: Rows) -> Found:
    found = found_none(rules)
    for rule_id, job_id, name, ids, n in rows:
        found[rule_id].append(
            Finding(subject=str(job_id), message=f"job {name}: {last_runs_failed(n)}", run_ids=ids_of(ids))
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
    found = found_none(rules)
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
        "widest": widest_window(rules),
        "limit": RUNS_PER_FINDING,
    }


def _step_error(rules: Rules, rows: Rows) -> Found:
    found = found_none(rules)
    windows = {r.pk: r.window for r in rules}
    for rule_id, name, count, ids in rows:
        message = f"{name}: {plural(count, 'step')} in Error in {duration_words(windows[rule_id])}"
        found[rule_id].append(Finding(subject=name, message=message, run_ids=ids_of(ids)))
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


def _run_needs_operator(rules: Rules, rows: Rows) -> Found:
    found = found_none(rules)
    for rule_id, count, ids in rows:
        found[rule_id].append(Finding(subject="", message=need_operator(count), run_ids=ids_of(ids)))
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
    found = found_none(rules)
    for name, count, ids in rows:
        message = f"compensation {name} keeps failing on {plural(count, 'run')}"
        for rule in rules_targeting(rules, name):
            found[rule.pk].append(Finding(subject=name, message=message, run_ids=ids_of(ids)))
    return found


# The failure kinds (what bench/alerts.py EXPLAINs: the statements themselves, not copies).
FAILURE_STATEMENTS: dict[str, Statement] = {
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
        COMPENSATION_STRUGGLING_SQL, lambda rules: LIMIT_PARAMS, _compensation_struggling
    ),
}
