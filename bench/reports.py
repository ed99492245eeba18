"""The reporting service against a big execution history (issue 9).

    SAS_BENCH_DB=sasproject_bench_reports python bench/reports.py [--runs 294120] [--samples 40]

Builds its own database (SAS_BENCH_DB, migrated to this branch's schema) with 1,000 users, 2,000
jobs and --runs runs over the last 14 days, 3 steps each, and their execution history: every
step one attempt, every fifth run a retried step (a failed attempt - timed out, not started in
time, or a transient failure -, the supervisor's or the scheduler's decision, and a second
attempt). With the default --runs that is 1,000,008 history rows. User 0 is a heavy user with
a tenth of all runs (~29,400, ~2,100 a day); the others have ~265 each (~19 a day).
Everything is generated in SQL (generate_series), with foreign-key triggers off while loading.

Then, warm cache, it times the report as the page and the API build it (`reports.selectors.
user_report`: its three statements and the Python around them) for a typical and the heavy
user over the last day and the last week, and prints p50 / p95, the statements' EXPLAIN
(ANALYZE, BUFFERS), and for contrast the plan of the first design (a plain join to the history).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_environment, fmt_ms, percentile, print_table

USERS = 1000
DAYS = 14

FILL_SQL = """
-- No FK triggers while loading (the data is consistent by construction).
SET session_replication_role = replica;
TRUNCATE scheduler_runevent, scheduler_taskexecutionhistory, alerting_alert, orders_order,
         scheduler_step, scheduler_run, scheduler_job CASCADE;
DELETE FROM auth_user WHERE username LIKE 'rbench%%';

INSERT INTO auth_user (password, is_superuser, username, first_name, last_name, email, is_staff, is_active,
                       date_joined)
SELECT '!', false, 'rbench' || lpad(u::text, 4, '0'), '', '', '', false, true, now()
FROM generate_series(0, %(users)s - 1) AS u;

DROP TABLE IF EXISTS bench_users, bench_jobs, bench_runs;

CREATE TEMP TABLE bench_users AS
SELECT substr(username, 7)::int AS idx, id FROM auth_user WHERE username LIKE 'rbench%%';

INSERT INTO scheduler_job (owner_id, name, workflow, input, is_recurring, cron, timezone, max_retry,
                           priority, idempotent, enabled, created_at)
SELECT u.id, 'job ' || k, 'order_fulfilment', '{}'::jsonb, k = 0,
       CASE WHEN k = 0 THEN '*/15 * * * *' ELSE '' END, 'UTC', 0, 0, true, true, now()
FROM bench_users AS u, generate_series(0, 1) AS k;

CREATE TEMP TABLE bench_jobs AS
SELECT u.idx, substr(j.name, 5)::int AS k, j.id
FROM scheduler_job AS j JOIN bench_users AS u ON u.id = j.owner_id;

CREATE TEMP TABLE bench_runs AS
SELECT n, md5('rbench' || n)::uuid AS id,
       CASE WHEN n %% 10 = 0 THEN 0 ELSE 1 + n %% (%(users)s - 1) END AS owner_idx,
       now() - make_interval(secs => (%(runs)s - n)::float8 * %(days)s * 86400 / %(runs)s
                                     + (n * 7919 %% 1000) / 1000.0) AS created_at,
       0.2 + (n * 31 %% 100) / 20.0 AS seconds,
       n %% 5 = 0 AS retried,
       CASE WHEN n %% 50 = 5 THEN 'compensated' WHEN n %% 100 = 7 THEN 'cancelled'
            WHEN n %% 200 = 9 THEN 'failed' ELSE 'completed' END AS state
FROM generate_series(1::bigint, %(runs)s) AS n;

INSERT INTO scheduler_run (id, workflow, input, owner_id, priority, deadline, state, cancel_requested,
                           observed, job_id, correlation_id, error, created_at, updated_at, finished_at)
SELECT r.id, 'order_fulfilment', '{}'::jsonb, u.id, 0,
       CASE WHEN r.n %% 7 = 0 THEN r.created_at + interval '5 seconds' END,
       r.state, false, false, j.id, '', '', r.created_at, r.created_at,
       r.created_at + make_interval(secs => r.seconds)
FROM bench_runs AS r
JOIN bench_users AS u ON u.idx = r.owner_idx
LEFT JOIN bench_jobs AS j ON j.idx = r.owner_idx AND j.k = r.n %% 2 AND r.n %% 10 IN (1, 2, 3)
ORDER BY r.n;

INSERT INTO scheduler_step (id, run_id, name, kind, seq, operation, process_state, failure_count, not_before,
                            idempotency_key, timeout, queue_timeout, max_failures, backoff_base, backoff_max,
                            priority, attempts, last_error, error_permanent, reached, created_at, updated_at,
                            finished_at)
SELECT r.n * 3 + s, r.id, 'step' || s, 'forward', s, 'agents.bench.op' || s, 'processed',
       CASE WHEN s = 1 AND r.retried THEN 1 ELSE 0 END, r.created_at, r.id || ':' || s,
       interval '30 seconds', interval '10 seconds', 3, 1.0, 60.0, 0,
       CASE WHEN s = 1 AND r.retried THEN 2 ELSE 1 END, '', false, true, r.created_at, r.created_at,
       r.created_at + make_interval(secs => r.seconds)
FROM bench_runs AS r, generate_series(0, 2) AS s
ORDER BY r.n, s;
SELECT setval(pg_get_serial_sequence('scheduler_step', 'id'), (SELECT max(id) FROM scheduler_step));

-- Every step's first attempt; a retried step's first one failed (timed out, not started in
-- time, or transiently) and was followed by a decision row and a second, successful attempt.
INSERT INTO scheduler_taskexecutionhistory (step_id, run_id, kind, status, lease, retry_count, worker, error,
                                            detail, started_at, ended_at)
SELECT r.n * 3 + s, r.id, 'attempt',
       CASE WHEN s = 1 AND r.retried
            THEN (ARRAY['timed_out', 'requeued', 'failed_transient', 'failed_transient'])[1 + (r.n / 5) %% 4]
            ELSE 'succeeded' END,
       md5('lease' || r.n || ':' || s)::uuid, 0, 'bench-host:' || (r.n %% 8), '', '{"attempt": 1}'::jsonb,
       r.created_at + make_interval(secs => r.seconds * s / 3),
       r.created_at + make_interval(secs => r.seconds * (s + 0.5) / 3)
FROM bench_runs AS r, generate_series(0, 2) AS s
UNION ALL
SELECT r.n * 3 + 1, r.id,
       CASE WHEN (r.n / 5) %% 4 < 2 THEN 'supervisor' ELSE 'scheduler' END,
       'retry_scheduled', NULL, 1, 'bench-host:9', '',
       jsonb_build_object('cause', (ARRAY['timed_out', 'requeued', 'failed_transient', 'failed_transient'])
                                   [1 + (r.n / 5) %% 4],
                          'counted', (r.n / 5) %% 4 <> 1, 'backoff_seconds', 0.5,
                          'failed_lease', md5('lease' || r.n || ':1')::uuid::text),
       r.created_at + make_interval(secs => r.seconds * 1.5 / 3),
       r.created_at + make_interval(secs => r.seconds * 1.5 / 3)
FROM bench_runs AS r WHERE r.retried
UNION ALL
SELECT r.n * 3 + 1, r.id, 'attempt', 'succeeded', md5('lease2' || r.n)::uuid, 1,
       'bench-host:' || (r.n %% 8), '',
       '{"attempt": 2}'::jsonb,
       r.created_at + make_interval(secs => r.seconds * 1.6 / 3),
       r.created_at + make_interval(secs => r.seconds * 1.9 / 3)
FROM bench_runs AS r WHERE r.retried
ORDER BY 11;

SET session_replication_role = DEFAULT;
VACUUM ANALYZE auth_user;
VACUUM ANALYZE scheduler_job;
VACUUM ANALYZE scheduler_run;
VACUUM ANALYZE scheduler_step;
VACUUM ANALYZE scheduler_taskexecutionhistory;
"""


def fill(runs: int) -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        for statement in _split(FILL_SQL % {"users": USERS, "runs": runs, "days": DAYS}):
            cursor.execute(statement)
        counts = {}
        for table in (
            "auth_user",
            "scheduler_job",
            "scheduler_run",
            "scheduler_step",
            "scheduler_taskexecutionhistory",
        ):
            cursor.execute(f"SELECT count(*) FROM {table}")
            counts[table] = cursor.fetchone()[0]
    return counts


def _split(sql: str) -> list[str]:
    """The fill script's statements (VACUUM cannot run inside a multi-statement string)."""
    return [part.strip() for part in sql.split(";\n") if part.strip()]


def time_report(user, window_name: str, samples: int) -> list[float]:
    from django.utils import timezone

    from reports.selectors import user_report
    from reports.windows import window_parse

    took = []
    for _ in range(samples):
        now = timezone.now()
        started = time.perf_counter()
        report = user_report(user=user, window=window_parse({"window": window_name}, now=now), now=now)
        took.append(time.perf_counter() - started)
    assert report.total.runs > 0, "the bench data must be in the window"
    return took


# The first design of report_groups, kept for contrast: the history joined to the window's runs
# as a CTE. Past a few thousand runs the planner hashes the whole history table for it, and its
# cost estimate turns JIT on (bench/README.md).
PLAIN_JOIN_GROUPS = """
WITH runs AS (
    SELECT r.id, r.job_id, r.state FROM scheduler_run AS r
    WHERE r.owner_id = %(owner)s AND r.created_at >= %(start)s AND r.created_at < %(end)s
), history AS (
    SELECT h.run_id,
           count(*) FILTER (WHERE h.kind = 'attempt'
                            AND coalesce((h.detail ->> 'attempt')::int, 1) > 1) AS retries,
           count(*) FILTER (WHERE h.kind = 'attempt' AND h.status = 'timed_out') AS missed_complete
    FROM runs JOIN scheduler_taskexecutionhistory AS h ON h.run_id = runs.id
    GROUP BY h.run_id
)
SELECT runs.job_id, count(*), sum(history.retries), sum(history.missed_complete)
FROM runs LEFT JOIN history ON history.run_id = runs.id
GROUP BY GROUPING SETS ((runs.job_id), ())
"""


def explain(sql: str, params: dict, *, report_settings: bool = True) -> str:
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        if report_settings:  # as reports.selectors runs them
            cursor.execute("SET LOCAL jit = off")
            cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=294_120)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--skip-fill", action="store_true", help="reuse the data of the last run")
    args = parser.parse_args()

    bench_environment()
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    if not args.skip_fill:
        started = time.perf_counter()
        counts = fill(args.runs)
        print(f"filled in {time.perf_counter() - started:.1f} s:")
        print_table([(table, f"{n:,}") for table, n in counts.items()])

    users = get_user_model().objects
    subjects = {
        "typical user": users.get(username="rbench0500"),
        "heavy user": users.get(username="rbench0000"),
    }
    rows = []
    for label, user in subjects.items():
        for window_name in ("day", "week"):
            took = time_report(user, window_name, args.samples)
            rows.append(
                (
                    f"{label}, last {window_name}",
                    f"p50 {fmt_ms(percentile(took, 0.5))}  p95 {fmt_ms(percentile(took, 0.95))}"
                    f"  max {fmt_ms(max(took))}  (n={len(took)})",
                )
            )
    print("\nreport latency (user_report: 3 statements + Python; warm cache):")
    print_table(rows)

    from reports.selectors import statements

    now = timezone.now()
    heavy = subjects["heavy user"]
    day = {"owner": heavy.pk, "start": now - timedelta(days=1), "end": now, "now": now}
    week = {**day, "start": now - timedelta(days=7)}
    for label, name, params in (
        ("heavy user, last day", "report_groups", day),
        ("heavy user, last week", "report_groups", week),
        ("heavy user, last day", "report_buckets", {**day, "bucket": timedelta(hours=1), "tz": "UTC"}),
        ("heavy user", "report_jobs", day),
    ):
        print(f"\n-- {name}, {label}\n{explain(statements()[name], params)}")
    print(
        "\n-- for contrast: the plain join (first design), heavy user, last week, server defaults\n"
        + explain(PLAIN_JOIN_GROUPS, week, report_settings=False)
    )


if __name__ == "__main__":
    main()
