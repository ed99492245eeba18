"""The supervisor's sweep against a big state store.

    python bench/sweep.py [--rows 1000000] [--expired-fraction 0.01]

Fills scheduler_step with --rows rows (10,000 runs x 100 steps, generated in SQL) of which
98% are Processed, 1% Processing with a future complete_by and --expired-fraction Processing
with a passed one. Measures:
  - the idle sweep (nothing expired) at 10,000 rows and at --rows rows: it must not grow;
  - one bounded batch (500) and the whole sweep of the expired rows.
The rows are deleted at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_environment, fmt_ms, print_table, summary, truncate_engine

FILL_SQL = """
INSERT INTO scheduler_run (id, workflow, input, priority, state, cancel_requested, correlation_id, error,
                           created_at, updated_at)
SELECT md5('run' || g)::uuid, 'order_fulfilment', '{}'::jsonb, 0, 'running', false, '', '', now(), now()
FROM generate_series(1, %(runs)s) AS g;

INSERT INTO scheduler_step (run_id, name, kind, seq, operation, process_state, locked_by, complete_by,
                            failure_count, not_before, lease, idempotency_key, timeout, max_failures,
                            backoff_base, backoff_max, priority, attempts, last_error, error_permanent,
                            created_at, updated_at)
SELECT md5('run' || r)::uuid, 's' || s, 'forward', s, 'agents.shipping.create',
       CASE WHEN (r * 100 + s) %% 10000 < %(expired_per_10k)s THEN 'processing'
            WHEN (r * 100 + s) %% 10000 < %(expired_per_10k)s + 100 THEN 'processing'
            ELSE 'processed' END,
       CASE WHEN (r * 100 + s) %% 10000 < %(expired_per_10k)s + 100 THEN 'bench' END,
       CASE WHEN (r * 100 + s) %% 10000 < %(expired_per_10k)s THEN now() - interval '1 minute'
            WHEN (r * 100 + s) %% 10000 < %(expired_per_10k)s + 100 THEN now() + interval '1 hour' END,
       0, now(),
       CASE WHEN (r * 100 + s) %% 10000 < %(expired_per_10k)s + 100 THEN gen_random_uuid() END,
       md5('run' || r) || ':s' || s, interval '30 seconds', 3, 1.0, 60.0, 0, 1, '', false, now(), now()
FROM generate_series(1, %(runs)s) AS r, generate_series(0, 99) AS s;
ANALYZE scheduler_step;
ANALYZE scheduler_run;
"""


def fill(rows: int, expired_fraction: float) -> None:
    from django.db import connection

    truncate_engine()
    with connection.cursor() as cursor:
        cursor.execute(FILL_SQL, {"runs": rows // 100, "expired_per_10k": round(expired_fraction * 10000)})


def idle_sweep_times(samples: int = 50) -> list[float]:
    from supervisor.services import step_expire_batch

    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        result = step_expire_batch(batch=500, instance="bench")
        times.append(time.perf_counter() - t0)
        assert result.examined == 0
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--expired-fraction", type=float, default=0.01)
    args = parser.parse_args()
    bench_environment()
    from django.db import connection
    from django.utils import timezone

    from scheduler.models import Step
    from supervisor.services import step_expire_batch, step_expire_sweep

    try:
        fill(10_000, 0.0)
        small = summary(idle_sweep_times())

        t0 = time.perf_counter()
        fill(args.rows, 0.0)
        fill_seconds = time.perf_counter() - t0
        big = summary(idle_sweep_times())

        fill(args.rows, args.expired_fraction)
        expired = Step.objects.filter(process_state="processing", complete_by__lt=timezone.now()).count()
        t0 = time.perf_counter()
        first = step_expire_batch(batch=500, instance="bench")
        batch_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        rest = step_expire_sweep(batch=500, instance="bench", max_batches=10_000, budget_seconds=3600)
        sweep_seconds = time.perf_counter() - t0
        after = summary(idle_sweep_times(10))

        with connection.cursor() as cursor:
            cursor.execute(
                "EXPLAIN (ANALYZE, BUFFERS) SELECT id FROM scheduler_step WHERE process_state = 'processing' "
                "AND complete_by < now() ORDER BY complete_by LIMIT 500 FOR UPDATE SKIP LOCKED"
            )
            plan = "\n".join("    " + row[0] for row in cursor.fetchall())

        print(f"\nsupervisor sweep, {args.rows:,} step rows (filled in {fill_seconds:.1f} s)")
        print_table(
            [
                ("idle sweep at 10,000 rows p50 / p99", f"{fmt_ms(small['p50'])} / {fmt_ms(small['p99'])}"),
                (
                    f"idle sweep at {args.rows:,} rows p50 / p99",
                    f"{fmt_ms(big['p50'])} / {fmt_ms(big['p99'])}",
                ),
                ("idle ratio big : small (flat = ~1)", f"{big['p50'] / small['p50']:.2f}"),
                ("idle target (< 5 ms at 1M rows)", "met" if big["p50"] < 0.005 else "MISSED"),
                (f"expired rows ({args.expired_fraction:.0%})", f"{expired:,}"),
                ("one batch of 500 expired", f"{fmt_ms(batch_seconds)} ({first.retried} retried)"),
                (
                    "rest of the expired rows",
                    f"{sweep_seconds:.2f} s, {rest.batches} batches, {rest.retried} retried "
                    f"({(rest.retried + first.retried) / (batch_seconds + sweep_seconds):.0f} steps/s)",
                ),
                ("idle sweep afterwards p50", fmt_ms(after["p50"])),
            ]
        )
        print("  plan of the sweep's select (the last batch, nothing left):")
        print(plan)
    finally:
        truncate_engine()


if __name__ == "__main__":
    main()
