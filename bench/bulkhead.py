"""Agent worker layouts compared: throughput, memory, database connections, and what a hanging
service does to the others (issue 7, bulkheads).

    python bench/bulkhead.py [--orders 150] [--latency-ms 0 100] [--hang-s 20] [--layouts ...]

Layouts (each runs the control worker -c 1 and beat as `make run` does):
- shared-prefork2: one worker on every agent queue, prefork, 2 processes (before issue 7);
- per-service-prefork2: a worker per service queue, prefork, 2 processes each;
- per-service-threads8: a worker per service queue, 8 threads each, a pool of 2 database
  connections per worker (replies borrow one; a thread waiting on the remote holds none).

Per layout: a burst of --orders orders with every service answering after --latency-ms
(orders/s, submit -> Completed p50), then shipping hanging for --hang-s seconds under a stream
of 4 orders/s (attempts of reserve_inventory / charge_payment that timed out, and whether every
order completed once the hang cleared). Step windows are 3 s as in the tests, with a failure
budget large enough to wait out the hang. Also: the agents' resident memory and the most
PostgreSQL connections they held.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_environment, fmt_ms, log_dir, print_table, summary, truncate_engine

SERVICES = ("inventory", "payment", "shipping", "webhook")
ORDER = {"items": [{"sku": "H-1", "quantity": 1}], "amount": "9.99", "currency": "EUR"}
APP_PREFIX = "sas-bench-agents"

# name -> [(worker name, queues, pool, concurrency, extra env)]
LAYOUTS: dict[str, list[tuple[str, str, str, int, dict[str, str]]]] = {
    "shared-prefork2": [("agents", ",".join(f"agent.{s}" for s in SERVICES), "prefork", 2, {})],
    "per-service-prefork2": [(f"agents-{s}", f"agent.{s}", "prefork", 2, {}) for s in SERVICES],
    "per-service-threads8": [
        (f"agents-{s}", f"agent.{s}", "threads", 8, {"DATABASE_POOL_MAX_SIZE": "2"}) for s in SERVICES
    ],
}


def rss_mb(pids: list[int]) -> float:
    """Resident memory of these processes and their children (Linux /proc)."""
    total = 0
    seen: set[int] = set()
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except FileNotFoundError:
            continue
        todo.extend(int(c) for c in children)
    return total / 1024


class ConnectionSampler:
    def __init__(self, url: str) -> None:
        self.url = url
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
                    (APP_PREFIX + "%",),
                ).fetchone()
                self.peak = max(self.peak, int(row[0]) if row else 0)
                time.sleep(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def wait_terminal(n: int, timeout: float) -> None:
    from scheduler.models import Run

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if Run.objects.filter(state__in=Run.TERMINAL_STATES).count() >= n:
            return
        time.sleep(0.1)
    raise RuntimeError(f"runs not terminal after {timeout}s")


def run_layout(name: str, env: dict[str, str], sim: Any, args: argparse.Namespace) -> list[tuple[str, Any]]:
    from django.contrib.auth import get_user_model

    from orders.services import order_submit
    from sastools.harness import celery_beat, celery_worker
    from scheduler.models import Run, TaskExecutionHistory

    user, _ = get_user_model().objects.get_or_create(username="bench-bulkhead")
    logs = log_dir()
    control = celery_worker(
        name="control", queues="scheduler,supervisor,jobs,default", log_dir=logs, env=env, concurrency=1
    )
    beat = celery_beat(log_dir=logs, env=env)
    agents = [
        celery_worker(
            name=w,
            queues=q,
            log_dir=logs,
            env={**env, **extra, "DATABASE_APPLICATION_NAME": f"{APP_PREFIX}-{w}"},
            concurrency=c,
            pool=pool,
        )
        for w, q, pool, c, extra in LAYOUTS[name]
    ]
    rows: list[tuple[str, Any]] = []
    try:
        for proc in [control, *agents]:
            proc.start(ready_marker=" ready.")
        beat.start(ready_marker="beat: Starting")
        sampler = ConnectionSampler(env["DATABASE_URL"])
        for latency in args.latency_ms:
            truncate_engine()
            sim.reset()
            for service in SERVICES[:3]:
                sim.set_faults(service, latency_ms=latency)
            for _ in range(5):
                order_submit(owner_id=user.id, data=ORDER)
            wait_terminal(5, 60)
            truncate_engine()
            started = time.monotonic()
            for _ in range(args.orders):
                order_submit(owner_id=user.id, data=ORDER)
            wait_terminal(args.orders, 600)
            elapsed = time.monotonic() - started
            done = Run.objects.filter(state=Run.State.COMPLETED)
            lat = summary([(r.finished_at - r.created_at).total_seconds() for r in done])
            rows += [
                (f"{name}: burst latency {latency} ms: orders/s", f"{args.orders / elapsed:.1f}"),
                (
                    f"{name}: burst latency {latency} ms: completed / p50",
                    f"{done.count()} / {fmt_ms(lat['p50'])}",
                ),
            ]
        rows.append((f"{name}: agents RSS", f"{rss_mb([p.pid for p in agents]):.0f} MB"))

        truncate_engine()
        sim.reset()
        sim.set_faults("shipping", hang=True)
        submitted = 0
        hang_until = time.monotonic() + args.hang_s
        while time.monotonic() < hang_until:
            order_submit(owner_id=user.id, data=ORDER)
            submitted += 1
            time.sleep(0.25)
        sim.set_faults("shipping", hang=False)
        wait_terminal(submitted, 300)
        timed_out = TaskExecutionHistory.objects.filter(
            status="timed_out", step__name__in=["reserve_inventory", "charge_payment"]
        ).count()
        completed = Run.objects.filter(state=Run.State.COMPLETED).count()
        rows += [
            (f"{name}: hang {args.hang_s}s: timed-out inventory/payment attempts", timed_out),
            (f"{name}: hang {args.hang_s}s: orders completed", f"{completed} / {submitted}"),
            (f"{name}: agents' PostgreSQL connections, most", sampler.stop()),
        ]
        return rows
    finally:
        sim.reset()
        for proc in [beat, *agents, control]:
            proc.stop()
        truncate_engine()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=150)
    parser.add_argument("--latency-ms", type=int, nargs="+", default=[0, 100])
    parser.add_argument("--hang-s", type=float, default=20)
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS))
    args = parser.parse_args()
    os.environ.update(
        {
            "SAS_ORDER_STEP_TIMEOUT": "3",
            "SAS_ORDER_MAX_FAILURES": "100",
            "SAS_ORDER_BACKOFF_BASE": "0.2",
            "SAS_ORDER_BACKOFF_MAX": "1",
            "SAS_SUPERVISOR_INTERVAL": "1",
            "SAS_SCHEDULER_TICK_INTERVAL": "1",
        }
    )
    env = bench_environment()
    from sastools.harness import simulator_process
    from simulator.client import SimulatorControl

    sim_proc = simulator_process(url=env["SIMULATOR_URL"], log_dir=log_dir(), env=env).start(
        ready_marker="SIMULATOR_LISTENING"
    )
    sim = SimulatorControl(env["SIMULATOR_URL"])
    try:
        for name in args.layouts:
            rows = run_layout(name, env, sim, args)
            print_table(rows)
    finally:
        sim_proc.stop()


if __name__ == "__main__":
    main()
