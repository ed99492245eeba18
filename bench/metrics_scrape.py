"""/metrics at 1,000,000 runs (issue 19): seed the runs table cheaply with generate_series,
then time the scrape and print the EXPLAIN plan of each of its statements.

    python bench/metrics_scrape.py [--runs 1000000] [--live 300] [--scrapes 30]

Seeded: `--runs` finished runs (order_fulfilment, webhook_delivery, http.call; completed with
some compensated, failed, cancelled), the newest 10,000 over the last 100 s (100 a second), the
rest one a second over the ~11 days before, a tenth of them job runs, in
one INSERT ... SELECT FROM generate_series; then `--live` orders submitted for real
(run_submit: their steps Pending and the first claimed, its request in the agent queue) with no
worker running, so the live figures have rows to count. The first scrape folds the whole
history into the stored totals once (ops/metrics.py); the figure that matters is every scrape
after it (target <= 100 ms).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("SAS_BENCH_DB", "sasproject_bench_metrics")

from bench.common import bench_environment, fmt_ms, print_table, truncate_engine

TOKEN = "bench-metrics-token"
# The newest runs ended at 100 a second over the last 100 s (a busy engine): every scrape counts
# the ones created after its cutoff (2 minutes ago) itself.
RECENT = 10_000

SEED_RUNS = """
INSERT INTO scheduler_run (id, workflow, input, priority, state, cancel_requested, correlation_id, error,
                           created_at, updated_at, finished_at, observed, job_attempt, job_settled, job_id,
                           scheduled_for)
SELECT gen_random_uuid(),
       (ARRAY['order_fulfilment', 'webhook_delivery', 'http.call'])[1 + g %% 3],
       '{}'::jsonb, 0,
       CASE WHEN g %% 97 = 0 THEN 'failed' WHEN g %% 13 = 0 THEN 'compensated'
            WHEN g %% 101 = 0 THEN 'cancelled' ELSE 'completed' END,
       false, '', '',
       now() - CASE WHEN g <= %(recent)s THEN g * interval '10 milliseconds' ELSE g * interval '1 second' END,
       now(),
       now() - CASE WHEN g <= %(recent)s THEN g * interval '10 milliseconds' ELSE g * interval '1 second' END
             + interval '1 second',
       false, 0, true,
       CASE WHEN g %% 10 = 0 THEN %(job)s END,
       CASE WHEN g %% 10 = 0 THEN now() - (g || ' seconds')::interval END
FROM generate_series(1, %(runs)s) AS g
"""


def seed(runs: int, live: int) -> None:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from scheduler.models import Job
    from scheduler.services import run_submit

    truncate_engine()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE scheduler_job CASCADE")
    user, _ = get_user_model().objects.get_or_create(username="bench-metrics")
    job = Job.objects.create(owner=user, name="bench", workflow="http.call", input={}).pk
    with connection.cursor() as cursor:
        started = time.perf_counter()
        cursor.execute(SEED_RUNS, {"runs": runs, "job": job, "recent": RECENT})
        print(f"seeded {runs} runs in {time.perf_counter() - started:.1f}s", flush=True)
        cursor.execute("VACUUM ANALYZE scheduler_run")
    data = {"items": [{"sku": "B-1", "quantity": 1}], "amount": "9.99", "currency": "EUR"}
    for _ in range(live):
        run_submit(workflow="order_fulfilment", input=data, kick=False)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE scheduler_step")


def explain() -> list[tuple[str, str]]:
    from datetime import UTC, datetime

    from django.db import connection

    from ops import metrics

    now = time.time()
    cutoff = datetime.fromtimestamp(now - metrics.RUNS_SETTLE_SECONDS, tz=UTC)
    later = datetime.fromtimestamp(now + 86400, tz=UTC)
    statements: list[tuple[str, str, dict[str, Any]]] = [
        ("live runs", metrics.SQL_RUNS_LIVE, {"states": list(metrics.UNFINISHED)}),
        (
            "finished runs since the cutoff (each scrape)",
            metrics.SQL_RUNS_FINISHED_BETWEEN,
            {"states": list(metrics.TERMINAL), "since": cutoff, "until": later},
        ),
        (
            "runs going since the last cutoff (each fold)",
            metrics.SQL_RUNS_GOING_BETWEEN,
            {"states": list(metrics.UNFINISHED), "since": cutoff, "until": later},
        ),
        ("pending steps", metrics.SQL_STEPS_PENDING, {}),
        ("processing steps", metrics.SQL_STEPS_PROCESSING, {}),
        ("waiting steps", metrics.SQL_STEPS_WAITING, {"states": list(metrics.UNFINISHED)}),
        ("due jobs", metrics.SQL_JOBS_DUE, {}),
        ("open alerts", metrics.SQL_ALERTS_OPEN, {}),
    ]
    plans = []
    with connection.cursor() as cursor:
        for title, sql, params in statements:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, SUMMARY ON) " + sql, params)
            plans.append((title, "\n".join(row[0] for row in cursor.fetchall())))
    return plans


def consumers_cost() -> list[tuple[str, str]]:
    """Workers alive per queue: the heartbeats' read (every scrape and page view) and write
    (every worker, every SAS_CONSUMER_HEARTBEAT s) against `celery inspect active_queues`."""
    from celery import current_app

    from liveness.heartbeat import consumers_alive, consumers_key
    from liveness.queues import queue_names
    from sasproject.redis_client import get_redis

    names = queue_names()
    started = time.perf_counter()
    for _ in range(50):
        consumers_alive(queues=names)
    read = (time.perf_counter() - started) / 50
    started = time.perf_counter()
    for _ in range(50):
        pipe = get_redis().pipeline(transaction=False)
        for name in names:
            pipe.zadd(consumers_key(name), {"bench@host": time.time()})
            pipe.zremrangebyscore(consumers_key(name), "-inf", time.time() - 60)
        pipe.execute()
    write = (time.perf_counter() - started) / 50
    started = time.perf_counter()
    current_app.control.inspect(timeout=1.0).active_queues()
    inspect = time.perf_counter() - started
    return [
        (f"consumers per queue from heartbeats ({len(names)} queues), per read", fmt_ms(read)),
        ("one worker's heartbeat write (every 5 s)", fmt_ms(write)),
        ("celery inspect active_queues (timeout 1 s), per read", fmt_ms(inspect)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--live", type=int, default=300)
    parser.add_argument("--scrapes", type=int, default=30)
    parser.add_argument("--no-seed", action="store_true", help="reuse the rows of a previous run")
    args = parser.parse_args()
    bench_environment()
    from django.conf import settings
    from django.test import Client

    from scheduler.models import Run

    settings.SAS_MONITORING = {**settings.SAS_MONITORING, "METRICS_TOKEN": TOKEN}
    if not args.no_seed:
        seed(args.runs, args.live)
    total = Run.objects.count()
    client = Client()

    def scrape() -> float:
        started = time.perf_counter()
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        elapsed = time.perf_counter() - started
        assert response.status_code == 200, response.content[:300]
        return elapsed

    first = scrape()
    times = sorted(scrape() for _ in range(args.scrapes))
    print(f"\n/metrics at {total} runs ({args.live} live orders), {args.scrapes} scrapes after the first")
    print_table(
        [
            ("first scrape (folds the whole history once)", fmt_ms(first)),
            ("scrape p50", fmt_ms(statistics.median(times))),
            ("scrape p95", fmt_ms(times[int(0.95 * (len(times) - 1))])),
            ("scrape max", fmt_ms(times[-1])),
        ]
    )
    print_table(consumers_cost())
    for title, plan in explain():
        print(f"\n-- {title}\n{plan}")


if __name__ == "__main__":
    main()
