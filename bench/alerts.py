"""The alert rules' evaluation tick over a big history (issue 21).

    python bench/alerts.py [--history 1000000] [--rules 50] [--samples 30] [--by-kind] [--plans]

Fills, with generate_series: 200,000 runs over 30 days (10 workflows, 5% compensated, 1%
failed, a fifth of them runs of 50 jobs), one step per run (2% in Error, half of those with the
outage's error text), and --history attempt rows in scheduler_taskexecutionhistory (5 per
step, over the same 30 days, 10% failed) - then
creates --rules enabled rules of every kind (failure rates per workflow, job and service,
consecutive failures, Error steps, runs needing an operator, overdue steps, dispatch lag, due
backlog, missed runs, breakers, queues, the dead man's switch) and times `alert_rules_evaluate`
- one tick, everything a beat tick does, announcements included - --samples times. Target: at
most 50 ms a tick. It counts a tick's round trips (SQL statements, BEGIN/COMMIT, Redis requests)
and, beside each tick sample, times the floor: the same number of empty round trips (SELECT 1,
PING) under the same load. --by-kind times each kind's statement alone; --plans prints EXPLAIN
(ANALYZE, BUFFERS) of each kind's statement with the bench's rules, and of the operator's bulk
resubmission search over an hour and a week (the plans in bench/README.md, "Alerting"). Rows
are deleted at the end (--keep and --no-fill reuse them).
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

# The session of a bench process: JIT off for all that follows (the tick sets it per transaction,
# alerting/conditions.py JIT_OFF_SQL).
JIT_OFF = "SET jit = off"
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
    from alerting.models import AlertRule

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


def _rules_by_kind() -> dict[str, list[Any]]:
    from alerting.models import AlertRule

    by_kind: dict[str, list[Any]] = {}
    for rule in AlertRule.objects.filter(enabled=True).order_by("id"):
        by_kind.setdefault(rule.kind, []).append(rule)
    return by_kind


def profile(tick: Any) -> None:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(10):
        tick()
    profiler.disable()
    print("\nProfile of 10 ticks (cumulative, top 25):")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    print("Profile of 10 ticks (own time, top 15):")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def by_kind() -> None:
    """Each kind's condition - every rule of the kind in one statement - timed alone."""
    from django.db import connection

    from alerting.conditions import CONDITIONS

    with connection.cursor() as cursor:
        cursor.execute(JIT_OFF)  # as in the tick's pipeline (there per transaction)
    rows = []
    for kind, rules in _rules_by_kind().items():
        CONDITIONS[kind](rules)
        t0 = time.perf_counter()
        for _ in range(10):
            CONDITIONS[kind](rules)
        rows.append((f"{kind} ({len(rules)} rules)", fmt_ms((time.perf_counter() - t0) / 10)))
    print_table(rows)


def plans() -> None:
    """EXPLAIN ANALYZE of each database kind's statement - the one the tick runs, with the bench's
    rules of that kind as its parameters."""
    from django.db import connection
    from django.utils import timezone

    from alerting.conditions import STATEMENTS
    from ops.bulk import steps_failed_matching_queryset

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
        cursor.execute(JIT_OFF)  # as in the tick's pipeline (there per transaction)
        for kind, rules in _rules_by_kind().items():
            if kind not in STATEMENTS:
                continue
            sql, params = STATEMENTS[kind].sql, STATEMENTS[kind].params
            cursor.execute(
                "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY ON) " + sql, params(rules)
            )
            print(f"\n-- {kind} ({len(rules)} rules)")
            print("\n".join(row[0] for row in cursor.fetchall()))


def floor(*, database: int, redis_trips: int) -> float:
    """What a tick's round trips cost with nothing in them, here and now: `database` times
    SELECT 1 and `redis_trips` times PING, one after the other - measured beside each tick
    sample, so under the same load. No tick can be faster than this."""
    from django.db import connection

    from sasproject.redis_client import get_redis

    client = get_redis()
    t0 = time.perf_counter()
    with connection.cursor() as cursor:
        for _ in range(database):
            cursor.execute("SELECT 1")
            cursor.fetchone()
    for _ in range(redis_trips):
        client.ping()
    return time.perf_counter() - t0


class RoundTrips:
    """Counts a tick's round trips: SQL statements, the BEGIN and COMMIT of each transaction
    (psycopg sends each on its own), and Redis requests (a pipeline is one)."""

    def __init__(self) -> None:
        self.statements = 0
        self.transactions = 0
        self.redis = 0
        self.pipelined = 0
        self.flushes = 0
        self._in_atomic = False
        self._pipelined = False

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        self.statements += 1
        db = context["connection"]
        in_atomic = db.in_atomic_block
        if in_atomic and not self._in_atomic:
            self.transactions += 1
        self._in_atomic = in_atomic
        # In psycopg's pipeline mode a statement is queued, not waited for: the pipeline's
        # statements are one round trip (its sync), counted on the first.
        pipelined = db.connection is not None and db.connection._pipeline is not None
        if pipelined:
            self.pipelined += 1
            if not self._pipelined:
                self.flushes += 1
        self._pipelined = pipelined
        return execute(sql, params, many, context)

    def count(self, fn: Any) -> None:
        import redis.connection
        from django.db import connection

        send = redis.connection.AbstractConnection.send_packed_command

        def counted(conn: Any, *args: Any, **kwargs: Any) -> Any:
            self.redis += 1
            return send(conn, *args, **kwargs)

        redis.connection.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign,assignment]
        try:
            with connection.execute_wrapper(self):
                fn()
        finally:
            redis.connection.AbstractConnection.send_packed_command = send  # type: ignore[method-assign]

    @property
    def database(self) -> int:
        return self.statements - self.pipelined + self.flushes + 2 * self.transactions


def days_partitions_make(*, keep: bool) -> None:
    """A partition of the history for each day the fill covers, as a deployment that has run for
    DAYS days has them (ops.storage's maintenance makes each day's ahead of time; issue 29).
    `keep` false: none before today (the fill lands in the default partition). The history is
    empty here (truncate_engine)."""
    from django.utils import timezone

    from scheduler.partitions import HISTORY, partition_detach_drop, partition_ensure, partitions_list

    today = timezone.now().date()
    if keep:
        for back in range(1, DAYS + 2):
            partition_ensure(HISTORY, today - timedelta(days=back))
    else:
        for partition in partitions_list(HISTORY):
            if partition.upper is not None and partition.upper.date() <= today:
                partition_detach_drop(HISTORY, partition.name)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--rules", type=int, default=50)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--plans", action="store_true")
    parser.add_argument("--profile", action="store_true", help="cProfile of 10 ticks: where the time goes")
    parser.add_argument(
        "--by-kind", action="store_true", help="also time each kind's condition (its rules in one statement)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the rows (a later --no-fill reuses them)")
    parser.add_argument(
        "--default-partition",
        action="store_true",
        help="fill the history's default partition only (no partition per day, as no deployment has"
        " after its first days: the storage maintenance makes each day's ahead of time)",
    )
    parser.add_argument("--no-fill", action="store_true")
    args = parser.parse_args()
    bench_environment()
    from django.db import connection

    from alerting.models import AlertRule
    from alerting.services import alert_rules_evaluate
    from scheduler.models import Job, TaskExecutionHistory

    t0 = time.perf_counter()
    if args.no_fill:
        jobs = list(
            Job.objects.filter(owner__username="bench-alerts").order_by("id").values_list("pk", flat=True)
        )
    else:
        truncate_engine()
        Job.objects.filter(owner__username="bench-alerts").delete()
        jobs = make_jobs(50)
        days_partitions_make(keep=not args.default_partition)
        with connection.cursor() as cursor:
            cursor.execute(
                FILL_SQL, {"runs": RUNS, "days": DAYS, "jobs": jobs, "per_step": max(1, args.history // RUNS)}
            )
    fill_s = time.perf_counter() - t0
    make_rules(args.rules, jobs)
    history = TaskExecutionHistory.objects.count()
    try:
        alert_rules_evaluate()  # warm: connections, plans, the first alerts opened
        trips = RoundTrips()
        trips.count(alert_rules_evaluate)
        times, floors = [], []
        for _ in range(args.samples):
            tick = alert_rules_evaluate()
            assert tick.ran
            times.append(tick.seconds)
            floors.append(floor(database=trips.database, redis_trips=trips.redis))
        s, f = summary(times), summary(floors)
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
                ("SQL statements a tick", trips.statements),
                ("of which in one pipeline flush", trips.pipelined),
                ("transactions a tick (BEGIN + COMMIT each)", trips.transactions),
                ("PostgreSQL round trips a tick", trips.database),
                ("Redis round trips a tick", trips.redis),
                ("floor: the same round trips, empty (SELECT 1, PING) p50", fmt_ms(f["p50"])),
                ("floor p99", fmt_ms(f["p99"])),
                ("tick / floor (p50)", f"{s['p50'] / f['p50']:.1f}x"),
                ("target", "<= 50 ms a tick " + ("MET" if s["p50"] <= 0.05 else "MISSED")),
            ]
        )
        if args.by_kind:
            by_kind()
        if args.profile:
            profile(alert_rules_evaluate)
        if args.plans:
            plans()
    finally:
        if not args.keep:
            truncate_engine()
            AlertRule.objects.all().delete()
            Job.objects.filter(owner__username="bench-alerts").delete()


if __name__ == "__main__":
    main()
