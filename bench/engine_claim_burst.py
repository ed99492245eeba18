"""The engine's claim and the job settle right after a burst, on the statistics from before it
(issue 20, fifth session).

    SAS_BENCH_DB=benchclaim python bench/engine_claim_burst.py [--jobs 100000] [--claims 12]
        [--limit 500] [--settles 10] [--plans]

A burst of `--jobs` daily jobs of bench/jobs.py's 100 owners, due now, is fired by the
dispatcher's own code in this process (no worker), after an ANALYZE of the empty tables: the
planner then sees the statistics from before the burst, as it does until autovacuum's next
ANALYZE (up to a minute on a default server). Then, with nothing else running:
- `--claims` calls of the scheduler's claim of due steps (`step_claim_many`, `--limit` steps a
  call, no in-flight cap: the Processing rows pile up as they would behind slow agents), each
  timed: a claim's cost must not grow with the claims before it;
- every fired run marked completed, and `--settles` calls of the dispatcher's settle
  (`job_runs_settle`, 1,000 a call), each timed.
`--plans` logs every nested statement's plan of one more claim (auto_explain) and prints the
slowest three.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import os

os.environ["SAS_WORKFLOW_MODULES"] = "bench.jobs_tasks"

from bench.common import bench_environment

ENV = bench_environment()

from django.db import connection, transaction  # noqa: E402

from bench import jobs as bj  # noqa: E402
from scheduler import transitions as engine_transitions  # noqa: E402
from scheduler.dispatcher import transitions as job_transitions  # noqa: E402
from scheduler.services import jobs_dispatch  # noqa: E402


def _timed(call: Callable[[], object], times: int) -> list[float]:
    out = []
    for _ in range(times):
        started = time.perf_counter()
        with transaction.atomic():
            call()
        out.append((time.perf_counter() - started) * 1000)
    return out


def _row(name: str, ms: list[float]) -> str:
    shown = " ".join(f"{x:,.0f}" for x in ms)
    return (
        f"{name:<26} first {ms[0]:>8,.0f}  median {statistics.median(ms):>8,.0f}  last {ms[-1]:>8,.0f}"
        f"  max {max(ms):>8,.0f} ms   [{shown}]"
    )


def _plans(limit: int) -> list[str]:
    seen: list[str] = []
    with connection.cursor() as cursor:
        cursor.execute(
            "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;"
            " SET auto_explain.log_nested_statements = on; SET auto_explain.log_analyze = on;"
            " SET auto_explain.log_level = notice; SET client_min_messages = notice"
        )
    connection.connection.add_notice_handler(lambda diag: seen.append(diag.message_primary or ""))
    try:
        with transaction.atomic():
            engine_transitions.step_claim_many(instance="bench-claim", limit=limit)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET auto_explain.log_min_duration = -1; SET client_min_messages = warning")

    def took(plan: str) -> float:
        found = re.findall(r"actual time=[\d.]+\.\.([\d.]+)", plan)
        return max(map(float, found)) if found else 0.0

    return sorted(seen, key=took, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--claims", type=int, default=12)
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--settles", type=int, default=10)
    parser.add_argument("--plans", action="store_true")
    args = parser.parse_args()

    prefix = ENV["SAS_REDIS_PREFIX"]
    bj.reset(prefix)
    try:
        bj.due_now(bj.bench_owners(bj.OWNERS), args.jobs, prefix)
        bj.sql("ANALYZE")
        started, fired = time.perf_counter(), 0
        while claimed := jobs_dispatch(instance="bench-claim", batch=1000, max_batches=50).claimed:
            fired += claimed
        print(f"{fired:,} runs fired for {bj.OWNERS} owners in {time.perf_counter() - started:.1f} s")

        claims = _timed(
            lambda: engine_transitions.step_claim_many(instance="bench-claim", limit=args.limit), args.claims
        )
        print(_row(f"step_claim_many({args.limit})", claims))
        processing = bj.sql("SELECT count(*) FROM scheduler_step WHERE process_state = 'processing'")[0][0]
        print(f"{'':<26} ({processing:,} steps Processing after the claims)")
        if args.plans:
            for plan in _plans(args.limit)[:3]:
                print("\n" + "\n".join(line[:200] for line in plan.splitlines()))

        bj.sql(
            "UPDATE scheduler_run SET state = 'completed', finished_at = statement_timestamp()"
            " WHERE job_id IS NOT NULL AND state <> 'completed'"
        )
        settles = _timed(lambda: job_transitions.job_runs_mark_settled(limit=1000), args.settles)
        print(_row("job_runs_mark_settled(1000)", settles))
        print(
            f"ratio last/first claim: {claims[-1] / claims[0]:.2f}x;"
            f" settle ms per 1,000 runs at {fired:,} ended: {statistics.median(settles):,.0f}"
        )
    finally:
        bj.reset(prefix)


if __name__ == "__main__":
    main()
