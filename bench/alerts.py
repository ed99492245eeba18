"""The alert rules' evaluation tick over a big history (issue 21).

    python bench/alerts.py [--history 1000000] [--rules 50] [--samples 30] [--plans]

Fills, with generate_series: 200,000 runs over 30 days (10 workflows, 5% compensated, 1%
failed, a fifth of them runs of 50 jobs), one step per run (2% in Error, half of those with the
outage's error text), and --history attempt rows in scheduler_taskexecutionhistory (5 per
step, over the same 30 days, 10% failed) - then
creates --rules enabled rules of every kind (failure rates per workflow, job and service,
consecutive failures, Error steps, runs needing an operator, overdue steps, dispatch lag, due
backlog, missed runs, breakers, queues, the dead man's switch) and times `alert_rules_evaluate`
- one tick, everything a beat tick does, announcements included - --samples times. Target: at
most 50 ms a tick. With --plans it prints EXPLAIN (ANALYZE, BUFFERS) of each condition's
statement, and of the operator's bulk resubmission search over an hour and a week (the plans
in bench/README.md, "Alerting"). Rows are deleted at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_environment, fmt_ms, print_table, summary, truncate_engine

RUNS = 200_000
DAYS = 30

FILL_SQL = """
INSERT INTO scheduler_run (id, workflow, input, priority, state, cancel_requested, correlation_id, error,
                           created_at, updated_at, job_id)
SELECT md5('run' || g)::uuid, 'w' || (g %% 10), '{}'::jsonb, 0,
       CASE WHEN g %% 100 = 0 THEN 'failed' WHEN g %% 20 = 1 THEN 'compensated' ELSE 'completed' END,
       false, '', '', now() - (g::float / %(runs)s) * interval '%(days)s days', now(),
       CASE WHEN g %% 5 = 0 THEN (%(jobs)s)[1 + (g / 5) %% array_length(%(jobs)s, 1)] END
FROM generate_series(1, %(runs)s) AS g;

INSERT INTO scheduler_step (run_id, name, kind, seq, operation, process_state, failure_count, not_before,
                            idempotency_key, timeout, max_failures, backoff_base, backoff_max, priority,
                            attempts, last_error, error_permanent, created_at, updated_at, finished_at)
SELECT md5('run' || g)::uuid, 'charge', 'forward', 0,
       'agents.' || (ARRAY['inventory', 'payment', 'shipping'])[1 + g %% 3] || '.call',
       CASE WHEN g %% 50 = 0 THEN 'error' ELSE 'processed' END, 0, now(), 'bench:' || g,
       interval '30 seconds', 3, 1.0, 60.0, 0, 1,
       CASE WHEN g %% 100 = 0 THEN 'payment service unavailable' ELSE '' END, false, now(), now(),
       now() - (g::float / %(runs)s) * interval '%(days)s days'
FROM generate_series(1, %(runs)s) AS g;

INSERT INTO scheduler_taskexecutionhistory (step_id, run_id, kind, status, retry_count, worker, error, detail,
                                            started_at, ended_at)
SELECT s.id, s.run_id, 'attempt',
       CASE WHEN (s.id + a) %% 10 = 0 THEN 'failed_transient' ELSE 'succeeded' END, a, 'bench', '',
       '{}'::jsonb,
       s.finished_at - a * interval '1 second', s.finished_at
FROM scheduler_step s, generate_series(0, %(per_step)s - 1) AS a;
ANALYZE scheduler_run;
ANALYZE scheduler_step;
ANALYZE scheduler_taskexecutionhistory;
"""


def make_jobs(count: int) -> list[int]:
    from django.contrib.auth import get_user_model

    from scheduler.services import job_create

    owner, _ = get_user_model().objects.get_or_create(username="bench-alerts")
    return [
        job_create(
            by_staff=True,
            owner_id=owner.pk,
            name=f"bench-{n}",
            workflow="order_fulfilment",
            input={"items": [{"sku": "SKU-1", "quantity": 1}], "amount": "5.00", "currency": "EUR"},
            cron="*/5 * * * *",
            timezone_name="UTC",
        ).pk
        for n in range(count)
    ]


def make_rules(count: int, jobs: list[int]) -> None:
    from supervisor.models import AlertRule

    AlertRule.objects.all().delete()
    specs: list[dict[str, object]] = []
    specs += [{"kind": "workflow_failure_rate", "target": f"w{n}", "min_runs": 5} for n in range(10)]
    specs += [
        {"kind": "job_failure_rate", "job_id": jobs[n], "window": timedelta(hours=6)} for n in range(10)
    ]
    specs += [{"kind": "job_consecutive_failures", "job_id": jobs[n], "threshold": 3} for n in range(10, 20)]
    specs += [{"kind": "job_missed_runs", "job_id": jobs[n], "threshold": 300} for n in range(20, 23)]
    specs += [
        {"kind": "service_failure_rate", "target": s, "min_runs": 5}
        for s in ("inventory", "payment", "shipping")
    ]
    specs += [
        {"kind": "workflow_failure_rate", "window": timedelta(hours=1)},
        {"kind": "job_failure_rate", "window": timedelta(hours=1)},
        {"kind": "job_consecutive_failures", "threshold": 3, "window": timedelta(hours=1)},
        {"kind": "service_failure_rate", "window": timedelta(minutes=15)},
        {"kind": "step_error", "window": timedelta(hours=1)},
        {"kind": "step_error", "target": "charge", "window": timedelta(hours=6)},
        {"kind": "run_needs_operator", "window": timedelta(days=7)},
        {"kind": "compensation_struggling"},
        {"kind": "steps_overdue", "threshold": 0},
        {"kind": "dispatch_lag", "threshold": 60},
        {"kind": "due_backlog", "threshold": 10_000},
        {"kind": "circuit_open", "threshold": 120},
        {"kind": "queue_no_consumer", "target": "agent.payment"},
        {"kind": "periodic_not_run", "target": "sas: supervisor sweep", "threshold": 1e9},
        {"kind": "periodic_not_run", "target": "sas: jobs dispatcher", "threshold": 1e9},
    ]
    for n, spec in enumerate(specs[:count]):
        AlertRule.objects.create(name=f"bench {n}", notify_email=False, cooldown=timedelta(0), **spec)


def by_rule() -> None:
    from alerting.conditions import CONDITIONS
    from supervisor.models import AlertRule

    rows = []
    for rule in AlertRule.objects.filter(enabled=True).order_by("id"):
        t0 = time.perf_counter()
        for _ in range(10):
            CONDITIONS[rule.kind](rule)
        rows.append(
            (f"{rule.kind} {rule.target or rule.job_id or ''}", fmt_ms((time.perf_counter() - t0) / 10))
        )
    print_table(rows)


def plans() -> None:
    from django.db import connection

    from alerting import conditions as c

    window = timedelta(minutes=15)
    statements = {
        "workflow failure rate": (c.WORKFLOW_FAILURE_RATE_SQL, {"target": "w1"}),
        "job failure rate (every job)": (c.JOB_FAILURE_RATE_SQL, {"job": None}),
        "job consecutive failures (every job)": (c.JOB_CONSECUTIVE_FAILURES_SQL, {"job": None, "n": 3}),
        "service failure rate": (c.SERVICE_FAILURE_RATE_SQL, {"target": ""}),
        "step in Error": (c.STEP_ERROR_SQL, {"target": ""}),
        "runs needing an operator": (c.RUN_NEEDS_OPERATOR_SQL, {"window": timedelta(days=7)}),
    }
    base = {
        "failed": c.FAILED_STATES,
        "terminal": c.TERMINAL,
        "window": window,
        "min_runs": 5,
        "threshold": 0.5,
        "limit": c.RUNS_PER_FINDING,
    }
    from django.utils import timezone

    from supervisor.operator import steps_failed_matching_queryset

    now = timezone.now()
    with connection.cursor() as cursor:
        # The operator's bulk resubmission search (issue 21): an hour and a whole week.
        for label, span in (("an hour", timedelta(hours=1)), ("a week", timedelta(days=7))):
            sql, bulk_params = steps_failed_matching_queryset(
                reason="service unavailable", since=now - span, until=now
            ).query.sql_with_params()
            explain = "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY ON) "
            cursor.execute(explain + sql, bulk_params)
            print(f"\n-- bulk resubmit search: error contains 'service unavailable', {label}")
            print("\n".join(row[0] for row in cursor.fetchall()))
        for name, (sql, params) in statements.items():
            cursor.execute(
                "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY ON) " + sql,
                {**base, **params},  # type: ignore[dict-item]
            )
            print(f"\n-- {name}")
            print("\n".join(row[0] for row in cursor.fetchall()))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--rules", type=int, default=50)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--plans", action="store_true")
    parser.add_argument("--by-rule", action="store_true", help="also time each rule's condition")
    parser.add_argument("--keep", action="store_true", help="keep the rows (a later --no-fill reuses them)")
    parser.add_argument("--no-fill", action="store_true")
    args = parser.parse_args()
    bench_environment()
    from django.db import connection

    from alerting.services import alert_rules_evaluate
    from scheduler.models import Job, TaskExecutionHistory
    from supervisor.models import AlertRule

    t0 = time.perf_counter()
    if args.no_fill:
        jobs = list(
            Job.objects.filter(owner__username="bench-alerts").order_by("id").values_list("pk", flat=True)
        )
    else:
        truncate_engine()
        Job.objects.filter(owner__username="bench-alerts").delete()
        jobs = make_jobs(50)
        with connection.cursor() as cursor:
            cursor.execute(
                FILL_SQL, {"runs": RUNS, "days": DAYS, "jobs": jobs, "per_step": max(1, args.history // RUNS)}
            )
    fill_s = time.perf_counter() - t0
    make_rules(args.rules, jobs)
    history = TaskExecutionHistory.objects.count()
    try:
        alert_rules_evaluate()  # warm: connections, plans, the first alerts opened
        times = []
        for _ in range(args.samples):
            tick = alert_rules_evaluate()
            assert tick.ran
            times.append(tick.seconds)
        s = summary(times)
        statements: list[str] = []

        def count(execute: Any, sql: str, *rest: Any) -> Any:
            statements.append(sql)
            return execute(sql, *rest)

        with connection.execute_wrapper(count):
            alert_rules_evaluate()
        rtt = []
        with connection.cursor() as cursor:
            for _ in range(50):
                t1 = time.perf_counter()
                cursor.execute("SELECT 1")
                rtt.append(time.perf_counter() - t1)
        print(
            f"\nAlert rule evaluation: {AlertRule.objects.filter(enabled=True).count()} rules, "
            f"{history:,} history rows (filled in {fill_s:.0f} s)"
        )
        print_table(
            [
                ("tick p50", fmt_ms(s["p50"])),
                ("tick p99", fmt_ms(s["p99"])),
                ("tick mean", fmt_ms(s["mean"])),
                ("open alerts after", tick.open_alerts),
                ("statements a tick", len(statements)),
                ("SELECT 1 round trip p50 (this machine now)", fmt_ms(summary(rtt)["p50"])),
                ("target", "<= 50 ms a tick " + ("MET" if s["p50"] <= 0.05 else "MISSED")),
            ]
        )
        if args.by_rule:
            by_rule()
        if args.plans:
            plans()
    finally:
        if not args.keep:
            truncate_engine()
            AlertRule.objects.all().delete()
            Job.objects.filter(owner__username="bench-alerts").delete()


if __name__ == "__main__":
    main()
