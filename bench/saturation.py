"""Saturation: drain a backlog of three-step orders submitted up front (issue 6).

    python bench/saturation.py [--orders 50000] [--concurrency 1 2] [--json out.json]

For each number of worker processes (one worker consuming every queue, beat running, the
simulator at zero latency):
  1. submit --orders real orders with `orders.services.order_submit` while no worker runs (in
     transactions of 500; claim-on-submit off in this process, so nothing is claimed before the
     workers start and every order waits as a Pending run - the scheduler's kicks queue up);
  2. start the worker and beat, and drain the backlog;
  3. report orders/s over the drain, the throughput of the first 10% of completions against the
     last 10% (from the runs' finished_at; it must not fall as the backlog is worked through),
     the RSS of the worker's processes (psutil, sampled every second), and the PostgreSQL size
     of the scheduler_* / orders_* tables (pg_total_relation_size) per 1,000 orders, after the
     submit and after the drain.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_environment, log_dir, print_table, truncate_engine
from bench.engine import ENGINE_QUEUES, ORDER

SUBMIT_BATCH = 500
# "Must not fall": the last 10% of completions at least this fraction of the first 10%'s rate
# (a margin for the noise of a shared 2-core machine).
NOT_FALLING = 0.9


def table_sizes() -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r' "
            "AND (c.relname LIKE 'scheduler\\_%%' OR c.relname LIKE 'orders\\_%%') ORDER BY 1"
        )
        return {name: int(size) for name, size in cursor.fetchall()}


def submit(n: int, owner_id: int) -> float:
    from django.db import transaction

    from orders.services import order_submit

    started = time.perf_counter()
    done = 0
    while done < n:
        batch = min(SUBMIT_BATCH, n - done)
        with transaction.atomic():
            for _ in range(batch):
                order_submit(owner_id=owner_id, data=ORDER)
        done += batch
        if done % max(n // 10, SUBMIT_BATCH) < SUBMIT_BATCH:
            print(f"    submitted {done}/{n}", flush=True)
    return time.perf_counter() - started


class RssSampler:
    """RSS of the worker's process tree: the Celery parent and its pool children."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.samples: list[tuple[float, dict[int, int]]] = []

    def sample(self) -> None:
        import psutil

        sizes: dict[int, int] = {}
        try:
            for proc in [self.root, *self.root.children(recursive=True)]:
                try:
                    sizes[proc.pid] = proc.memory_info().rss
                except psutil.NoSuchProcess:
                    continue
        except psutil.NoSuchProcess:
            return
        self.samples.append((time.monotonic(), sizes))

    def figures(self) -> dict[str, float]:
        mib = 1024 * 1024
        totals = [sum(s.values()) for _, s in self.samples]
        per_proc_max = max((max(s.values()) for _, s in self.samples if s), default=0)
        tenth = max(len(totals) // 10, 1)
        return {
            "rss_total_max_mib": max(totals, default=0) / mib,
            "rss_process_max_mib": per_proc_max / mib,
            "rss_total_first10pct_mib": sum(totals[:tenth]) / tenth / mib,
            "rss_total_last10pct_mib": sum(totals[-tenth:]) / tenth / mib,
            "processes": float(max((len(s) for _, s in self.samples), default=0)),
        }


def drain(env: dict[str, str], concurrency: int, orders: int) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.db.models import Count

    from sastools.harness import celery_beat, celery_worker
    from scheduler.models import Run, RunEvent

    truncate_engine()
    user, _ = get_user_model().objects.get_or_create(username="bench")
    print(f"  submitting {orders} orders (no worker running)", flush=True)
    submit_s = submit(orders, user.id)
    sizes_submitted = table_sizes()

    logs = log_dir()
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        drain_start = cursor.fetchone()[0]
    worker = celery_worker(
        name=f"saturation-{concurrency}", queues=ENGINE_QUEUES, log_dir=logs, env=env, concurrency=concurrency
    ).start(ready_marker=" ready.")
    beat = celery_beat(log_dir=logs, env=env).start(ready_marker="beat: Starting")
    rss = RssSampler(worker.pid)
    print(f"  draining with {concurrency} worker process(es) (logs in {logs})", flush=True)
    try:
        last, last_change, next_report = -1, time.monotonic(), orders // 10
        while True:
            rss.sample()
            done = Run.objects.filter(state__in=Run.TERMINAL_STATES).count()
            if done >= orders:
                break
            if done != last:
                last, last_change = done, time.monotonic()
            elif time.monotonic() - last_change > 120:
                raise RuntimeError(f"drain stalled at {done}/{orders}; see {logs}")
            if not worker.alive():
                raise RuntimeError(f"the worker died; see {logs}")
            if done >= next_report:
                print(f"    {done}/{orders} done", flush=True)
                next_report += orders // 10
            time.sleep(1.0)
        rss.sample()
    finally:
        beat.stop()
        worker.stop()

    # A run that ended otherwise (a step timed out past its failure limit under the backlog, and
    # the run was compensated) is a finding to report, not a reason to lose the figures.
    not_completed = dict(
        Run.objects.exclude(state=Run.State.COMPLETED)
        .values_list("state")
        .annotate(n=Count("id"))
        .values_list("state", "n")
    )
    timeouts = RunEvent.objects.filter(type=RunEvent.Type.STEP_RETRYING).count()
    finished = sorted(
        (t - drain_start).total_seconds() for t in Run.objects.values_list("finished_at", flat=True)
    )
    k = max(orders // 10, 2)
    first = (k - 1) / max(finished[k - 1] - finished[0], 1e-9)
    last_rate = (k - 1) / max(finished[-1] - finished[-k], 1e-9)
    sizes_drained = table_sizes()
    result = {
        "orders": orders,
        "submit_s": submit_s,
        "drain_s": finished[-1],
        "orders_per_s": orders / finished[-1],
        "first10_per_s": first,
        "last10_per_s": last_rate,
        "bytes_per_1000_submitted": sum(sizes_submitted.values()) * 1000 / orders,
        "bytes_per_1000_drained": sum(sizes_drained.values()) * 1000 / orders,
        "tables_drained": sizes_drained,
        "not_completed": not_completed,
        "step_retries": timeouts,
        **rss.figures(),
    }
    truncate_engine()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2], help="worker processes")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.orders < 20:
        parser.error("--orders must be at least 20")

    # Submit without claiming: every order waits until the workers start (this process only).
    os.environ["SAS_CLAIM_ON_SUBMIT"] = "0"
    env = bench_environment()
    worker_env = {k: v for k, v in env.items() if k != "SAS_CLAIM_ON_SUBMIT"}
    from sastools.harness import simulator_process

    sim = simulator_process(url=env["SIMULATOR_URL"], log_dir=log_dir(), env=env).start(
        ready_marker="SIMULATOR_LISTENING"
    )
    results: dict[str, dict[str, Any]] = {}
    try:
        for c in args.concurrency:
            print(f"\nworker processes: {c}", flush=True)
            r = drain(worker_env, c, args.orders)
            results[f"c{c}"] = r
            ratio = r["last10_per_s"] / r["first10_per_s"]
            kib = 1024
            print_table(
                [
                    ("orders", f"{r['orders']:,} (submitted in {r['submit_s']:.0f} s)"),
                    ("drain orders/s (steps/s)", f"{r['orders_per_s']:.1f} ({3 * r['orders_per_s']:.0f})"),
                    ("drain time", f"{r['drain_s']:.0f} s"),
                    (
                        "runs not Completed (target 0)",
                        f"{sum(r['not_completed'].values())} {r['not_completed'] or ''} "
                        f"{'met' if not r['not_completed'] else 'MISSED'}; step retries: {r['step_retries']}",
                    ),
                    (
                        "first 10% / last 10% of completions",
                        f"{r['first10_per_s']:.1f} / {r['last10_per_s']:.1f} /s",
                    ),
                    (
                        f"last : first (target >= {NOT_FALLING}: not falling)",
                        f"{ratio:.2f} {'met' if ratio >= NOT_FALLING else 'MISSED'}",
                    ),
                    (
                        "worker RSS, all processes: max (first 10% -> last 10%)",
                        f"{r['rss_total_max_mib']:.0f} MiB ({r['rss_total_first10pct_mib']:.0f} -> "
                        f"{r['rss_total_last10pct_mib']:.0f} MiB, {r['processes']:.0f} processes)",
                    ),
                    ("worker RSS, largest process", f"{r['rss_process_max_mib']:.0f} MiB"),
                    (
                        "PostgreSQL per 1,000 orders: submitted / drained",
                        f"{r['bytes_per_1000_submitted'] / kib:.0f} / "
                        f"{r['bytes_per_1000_drained'] / kib:.0f} KiB",
                    ),
                    (
                        "  of which (drained)",
                        ", ".join(
                            f"{name} {size * 1000 / r['orders'] / kib:.0f}"
                            for name, size in r["tables_drained"].items()
                            if size > 64 * kib
                        ),
                    ),
                ]
            )
    finally:
        sim.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
