"""Django's task framework: enqueue-to-done of one `@task` on the engine's backend
(tasksbackend/) against django-tasks-db, the framework's reference database backend, with its
own worker (`manage.py db_worker`), side by side in one run.

    python bench/djtasks.py [--n 200] [--burst 300] [--workers 2] [--db-interval 1.0]

Both run the same body (bench/djtasks_tasks.py: return its argument), enqueued through the
framework (`task.enqueue`) from this process, on the bench database (bench/common.py), with
`--workers` worker processes each: the engine's control worker, an agents worker of that many
prefork processes and beat; and that many `db_worker` processes, polling every `--db-interval`
seconds when idle (its default is 1 s; `--db-interval 0.1` is a tuned run).

- latency: `--n` tasks one at a time, the two backends alternating so both see the same machine;
  the clock starts before `enqueue()` and stops when a poll (every 2 ms, one indexed read of the
  task's row) sees it done. Each result is then read through the framework's API and checked.
- burst: `--burst` tasks enqueued back to back, then timed until the last is done.

Prints p50 / p99 / mean per backend, the burst's throughput, and the ratios (db / engine: above
1 means the engine is faster).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    POLL_INTERVAL,
    bench_environment,
    fmt_ms,
    log_dir,
    print_table,
    summary,
    truncate_engine,
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--burst", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--db-interval", type=float, default=1.0)
    args = parser.parse_args()
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.djtasks_settings"
    os.environ["SAS_WORKFLOW_MODULES"] = "bench.djtasks_tasks"
    env = bench_environment()

    from django.db import connection
    from django_tasks_db.models import DBTaskResult

    from bench.djtasks_tasks import echo_db, echo_engine
    from sastools.harness import CONTROL_QUEUES, Proc, celery_beat, celery_worker
    from scheduler.models import Run

    logs = log_dir()
    engine_procs = [
        celery_worker(name="control", queues=CONTROL_QUEUES, log_dir=logs, env=env, concurrency=2),
        celery_worker(name="agents", queues="agent.tasks", log_dir=logs, env=env, concurrency=args.workers),
        celery_beat(log_dir=logs, env=env),
    ]
    db_procs = [
        Proc(
            name=f"db_worker{i}",
            args=[
                sys.executable,
                "manage.py",
                "db_worker",
                "--backend",
                "db",
                "--queue-name",
                "default",
                "--interval",
                str(args.db_interval),
                "--no-reload",
                "--no-startup-delay",
            ],
            log_path=logs / f"db_worker{i}.log",
            env=env,
        )
        for i in range(args.workers)
    ]

    def clean() -> None:
        truncate_engine()
        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {DBTaskResult._meta.db_table}")

    engine_done = Run.objects.filter(state__in=Run.TERMINAL_STATES)
    db_done = DBTaskResult.objects.filter(status__in=["SUCCESSFUL", "FAILED"])
    systems: dict[str, tuple[Any, Any]] = {"engine": (echo_engine, engine_done), "db": (echo_db, db_done)}

    def one(kind: str, i: int) -> float:
        task, done = systems[kind]
        started = time.perf_counter()
        result = task.enqueue(i)
        row = done.filter(pk=result.id)
        while not row.exists():
            time.sleep(POLL_INTERVAL)
        elapsed = time.perf_counter() - started
        result.refresh()
        if result.return_value != i:
            raise SystemExit(f"{kind}: task {result.id} returned {result.return_value!r}, not {i}")
        return elapsed

    def burst(kind: str) -> float:
        task, done = systems[kind]
        started = time.perf_counter()
        ids = [task.enqueue(i).id for i in range(args.burst)]
        finished = done.filter(pk__in=ids)
        while finished.count() < len(ids):
            time.sleep(0.01)
        return time.perf_counter() - started

    try:
        for proc in engine_procs[:2]:
            proc.start(ready_marker=" ready.")
        engine_procs[2].start(ready_marker="beat: Starting")
        for proc in db_procs:
            proc.start(ready_marker="Starting worker")
        clean()
        for kind in systems:  # warm both: connections, imports, first claims
            for i in range(5):
                one(kind, i)
        samples: dict[str, list[float]] = {kind: [] for kind in systems}
        for i in range(args.n):
            for kind in systems if i % 2 == 0 else reversed(list(systems)):
                samples[kind].append(one(kind, i))
        clean()
        bursts = {kind: burst(kind) for kind in systems}
    finally:
        for proc in [*engine_procs, *db_procs]:
            proc.stop()
        clean()

    stats = {kind: summary(values) for kind, values in samples.items()}
    print(
        f"\nDjango tasks, enqueue-to-done, {args.n} one at a time; burst of {args.burst};"
        f" {args.workers} worker process(es) each; db_worker --interval {args.db_interval}"
    )
    rows: list[tuple[str, Any]] = []
    for kind, label in (("engine", "engine (tasksbackend)"), ("db", "django-tasks-db + db_worker")):
        s = stats[kind]
        rows.append(
            (
                label,
                f"p50 {fmt_ms(s['p50'])}  p99 {fmt_ms(s['p99'])}  mean {fmt_ms(s['mean'])}  |  burst "
                f"{bursts[kind]:.2f} s ({args.burst / bursts[kind]:.0f} tasks/s)",
            )
        )
    rows.append(
        (
            "ratio db / engine",
            f"p50 {stats['db']['p50'] / stats['engine']['p50']:.2f}x"
            f"  p99 {stats['db']['p99'] / stats['engine']['p99']:.2f}x"
            f"  burst time {bursts['db'] / bursts['engine']:.2f}x",
        )
    )
    print_table(rows)


if __name__ == "__main__":
    main()
