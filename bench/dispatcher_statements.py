"""Where a jobs dispatcher's firing goes, statement by statement (issue 20).

    SAS_BENCH_DB=benchdisp python bench/dispatcher_statements.py [--jobs 4300] [--reps 2]
        [--batch 1000] [--cprofile] [--explain-at 0.5]

`--jobs` daily jobs whose occurrence is due now (bench/jobs.py's `due_now`), fired by the
dispatcher's own code (`jobs_dispatch`) in this process until none is left, with no worker:
the wall time, the client's CPU, and every statement's time as the client sees it (the time
inside psycopg's `execute`, dumping its parameters included; COMMIT apart), summed over the
reps. Then the same rows by bench/jobs.py's `floor` (the dispatcher's claim, the next times in
Python, one set-based statement per batch) for comparison. The process freezes its start-up
heap first, as a worker's pool process does (sasproject/celery.py).

  --cprofile        cProfile the firing too (slower) and print the functions by own and by
                    cumulative time;
  --explain-at F    after firing a fraction F of the rows, EXPLAIN (ANALYZE, BUFFERS) the claim
                    and the batch's statements that read by id, on the rest (rolled back): the
                    plans a burst's stale statistics give.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import os
import pstats
import sys
import time
from collections import Counter, defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ["SAS_WORKFLOW_MODULES"] = "bench.jobs_tasks"

from bench.common import bench_environment

ENV = bench_environment()

import psycopg  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from bench import jobs as bj  # noqa: E402
from scheduler import transitions as engine_transitions  # noqa: E402
from scheduler.dispatcher import transitions as job_transitions  # noqa: E402
from scheduler.services import jobs_dispatch  # noqa: E402
from scheduler.sqlfiles import _binary  # noqa: E402

TIMES: defaultdict[str, float] = defaultdict(float)
CALLS: Counter[str] = Counter()


def _statement_names() -> dict[str, str]:
    names = {}
    for statements in (job_transitions.job_queries(), engine_transitions.engine_queries()):
        for name, text in statements.items():
            names[text.strip()[:200]] = name
            names[_binary(text).decode().strip()[:200]] = name  # as bulk_rows sends it
    return names


def _time_statements() -> None:
    """Count the time of every statement (named by jobs.sql / queries.sql where it is one)."""
    names = _statement_names()
    execute, commit = psycopg.Cursor.execute, psycopg.Connection.commit

    def timed_execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else bytes(query).decode()
        key = names.get(text.strip()[:200]) or " ".join(text.split())[:60]
        started = time.perf_counter()
        try:
            return execute(self, query, params, **kwargs)
        finally:
            TIMES[key] += time.perf_counter() - started
            CALLS[key] += 1

    def timed_commit(self: Any) -> None:
        started = time.perf_counter()
        try:
            commit(self)
        finally:
            TIMES["COMMIT"] += time.perf_counter() - started
            CALLS["COMMIT"] += 1

    psycopg.Cursor.execute = timed_execute  # type: ignore[method-assign]
    psycopg.Connection.commit = timed_commit  # type: ignore[method-assign]


def _print_times(title: str, total: float) -> None:
    print(f"  {title}: statements by time (ms, calls; of {total * 1000:.0f} ms)")
    for key, seconds in sorted(TIMES.items(), key=lambda kv: -kv[1])[:14]:
        print(f"    {seconds * 1000:9.1f}  {CALLS[key]:5d}  {key}")


def _fire_all(batch: int) -> int:
    fired = 0
    while True:
        done = jobs_dispatch(instance="bench-statements", batch=batch)
        fired += done.started
        if done.claimed == 0:
            return fired


def _explain(fraction: float, jobs: int, batch: int) -> None:
    """Fire `fraction` of the rows, then EXPLAIN the next batch's statements (rolled back)."""
    prefix = ENV["SAS_REDIS_PREFIX"]
    bj.due_now(bj.bench_owners(bj.OWNERS), jobs, prefix)
    bj.sql("ANALYZE")
    fired = 0
    while fired < jobs * fraction:
        fired += jobs_dispatch(instance="bench-statements", batch=batch, max_batches=5).claimed
    todo = bj.sql(
        "SELECT id, job_id, scheduled_for FROM scheduler_scheduledjob "
        "WHERE next_execution_at <= statement_timestamp() ORDER BY id LIMIT %s",
        [batch],
    )
    runs = bj.sql("SELECT id FROM scheduler_run ORDER BY created_at DESC LIMIT %s", [batch])
    cases: dict[str, dict[str, Any]] = {
        "scheduled_claim_due": {"limit": batch, "held": [0, 1], "shards": 12},
        "firing_context": {
            "job_ids": [r[1] for r in todo],
            "reasons": ["buffered", "cancel_other", "run_now"],
        },
        "scheduled_next_advance": {
            "ids": [r[0] for r in todo],
            "old_for": [r[2] for r in todo],
            "new_for": [r[2] + timedelta(days=1) for r in todo],
            "due": [r[2] + timedelta(days=1) for r in todo],
        },
        "job_history_open": {
            "run_ids": [r[0] for r in runs],
            "reasons": ["schedule"] * len(runs),
            "worker": "x",
        },
    }
    print(f"\n== EXPLAIN (ANALYZE, BUFFERS) with {fired:,} of {jobs:,} fired")
    for name, params in cases.items():
        with transaction.atomic():
            connection.ensure_connection()
            with psycopg.Cursor(connection.connection) as cursor:
                cursor.execute(
                    _binary("EXPLAIN (ANALYZE, BUFFERS) " + job_transitions.job_queries()[name]), params
                )
                plan = [row[0] for row in cursor.fetchall()]
            transaction.set_rollback(True)
        print(f"-- {name}")
        print("\n".join(line if len(line) < 200 else line[:200] + " ..." for line in plan))
    bj.reset(prefix)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=4300)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--explain-at", type=float, default=None)
    args = parser.parse_args()
    prefix = ENV["SAS_REDIS_PREFIX"]
    owners = bj.bench_owners(bj.OWNERS)
    gc.collect()
    gc.freeze()
    print(f"== {args.jobs:,} occurrences due, fired by jobs_dispatch in this process ({bj.load()})")
    _time_statements()
    profile = cProfile.Profile() if args.cprofile else None
    wall = cpu = 0.0
    fired = 0
    times: defaultdict[str, float] = defaultdict(float)
    calls: Counter[str] = Counter()
    for _ in range(args.reps):
        bj.due_now(owners, args.jobs, prefix)
        bj.sql("ANALYZE")
        TIMES.clear()
        CALLS.clear()
        started, cpu_started = time.perf_counter(), time.process_time()
        if profile:
            profile.enable()
        fired += _fire_all(args.batch)
        if profile:
            profile.disable()
        wall += time.perf_counter() - started
        cpu += time.process_time() - cpu_started
        for key, seconds in TIMES.items():
            times[key] += seconds
        calls.update(CALLS)
    TIMES.clear()
    CALLS.clear()
    TIMES.update(times)
    CALLS.update(calls)
    n = args.jobs * args.reps
    print(
        f"  fired {fired:,} of {n:,}: {wall / args.reps:.3f} s a rep, client CPU {cpu / args.reps:.3f} s "
        f"({wall / n * 1e6:.0f} us wall, {cpu / n * 1e6:.0f} us CPU a row)"
    )
    _print_times("dispatcher", wall)
    floor_s = 0.0
    times.clear()
    calls.clear()
    for _ in range(args.reps):
        # Its own set-up (the jobs, ANALYZE) is timed too: the figures are the floor's s alone.
        floor_s += bj.floor(owners, args.jobs, args.batch, prefix)["s"]
    print(f"  floor (claim + Python next times + one statement a batch): {floor_s / args.reps:.3f} s a rep")
    bj.reset(prefix)
    if profile:
        for order in ("tottime", "cumulative"):
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats(order).print_stats(30)
            print(f"\n== cProfile by {order}\n{out.getvalue()}")
    if args.explain_at is not None:
        _explain(args.explain_at, args.jobs, args.batch)


if __name__ == "__main__":
    main()
