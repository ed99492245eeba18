"""Engine throughput and latency against the bare Celery round trip, on this machine, in one run.

    python bench/engine.py [--orders 300] [--latency-samples 100] [--concurrency 1 2] [--reply-mode inline]

For each worker concurrency (pool processes of one worker consuming every queue):
  - bare Celery: no-op tasks/s (3000 tasks), and the p50/p99 round trip of one no-op
    (publish -> run -> result fetched with AsyncResult.get, Redis result backend);
  - engine: 3-step orders/s end to end (submit -> Completed, burst of --orders), steps/s, and
    p50/p99 submit -> Completed for orders submitted one at a time.
The simulator runs with zero latency. Ratios are printed against the targets from issue 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_environment, fmt_ms, log_dir, print_table, summary, truncate_engine

ENGINE_QUEUES = "scheduler,supervisor,jobs,agent.inventory,agent.payment,agent.shipping,default"
ORDER = {"items": [{"sku": "B-1", "quantity": 1}], "amount": "9.99", "currency": "EUR"}


def bare_celery(env: dict[str, str], concurrency: int, tasks: int, samples: int) -> dict[str, float]:
    from celery import current_app

    from sasproject.redis_client import get_redis
    from sastools.harness import celery_worker

    worker = celery_worker(
        name=f"bench-noop-{concurrency}", queues="bench", log_dir=log_dir(), env=env, concurrency=concurrency
    ).start(ready_marker=" ready.")
    try:
        redis = get_redis()
        # Warm up the pool and connections.
        for _ in range(20):
            current_app.send_task("bench.noop").get(timeout=10)
        key = f"{env['SAS_REDIS_PREFIX']}noop:{uuid.uuid4()}"
        started = time.perf_counter()
        for _ in range(tasks):
            current_app.send_task("bench.noop", kwargs={"counter_key": key}, ignore_result=True)
        while int(redis.get(key) or 0) < tasks:
            time.sleep(0.002)
        elapsed = time.perf_counter() - started
        rtts = []
        for _ in range(samples):
            t0 = time.perf_counter()
            current_app.send_task("bench.noop").get(timeout=10)
            rtts.append(time.perf_counter() - t0)
        s = summary(rtts)
        return {"tasks_per_s": tasks / elapsed, "rtt_p50": s["p50"], "rtt_p99": s["p99"]}
    finally:
        worker.stop()


def engine(
    env: dict[str, str], concurrency: int, orders: int, samples: int, *, app: str = "sasproject"
) -> dict[str, float]:
    from django.contrib.auth import get_user_model

    from sastools.harness import celery_beat, celery_worker
    from scheduler.models import TaskExecutionHistory

    truncate_engine()
    user, _ = get_user_model().objects.get_or_create(username="bench")
    logs = log_dir()
    worker = celery_worker(
        name=f"bench-engine-{concurrency}",
        queues=ENGINE_QUEUES,
        log_dir=logs,
        env=env,
        concurrency=concurrency,
        app=app,
    ).start(ready_marker=" ready.")
    # Beat runs as in production: the supervisor sweep and the scheduler tick.
    beat = celery_beat(log_dir=logs, env=env).start(ready_marker="beat: Starting")
    try:
        # Warm-up: a few orders so pools, connections and caches are hot.
        orders_warm(user.id)
        elapsed = orders_burst(user.id, orders)
        attempts = TaskExecutionHistory.objects.filter(kind="attempt").exclude(ended_at=None)
        durations = [
            (a.ended_at - a.started_at).total_seconds() for a in attempts.only("started_at", "ended_at")
        ]
        attempt = summary(durations)
        truncate_engine()
        latencies = order_latencies(user.id, samples)
        lat = summary(latencies)
        return {
            "orders_per_s": orders / elapsed,
            "steps_per_s": 3 * orders / elapsed,
            "latency_p50": lat["p50"],
            "latency_p99": lat["p99"],
            "attempt_p50": attempt["p50"],
        }
    finally:
        beat.stop()
        worker.stop()
        truncate_engine()


def orders_warm(user_id: int) -> None:
    """A few orders so pools, connections and caches are hot; the engine's tables emptied after."""
    from orders.services import order_submit

    for _ in range(5):
        order_submit(owner_id=user_id, data=ORDER)
    _wait_all_completed(5, timeout=60)
    truncate_engine()


def orders_burst(user_id: int, orders: int) -> float:
    """Submit `orders` orders at once and wait for all; the seconds from the first submit to the
    last Completed (the database's clock)."""
    from django.db.models import Max, Min

    from orders.services import order_submit
    from scheduler.models import Run

    for _ in range(orders):
        order_submit(owner_id=user_id, data=ORDER)
    _wait_all_completed(orders, timeout=600)
    span = Run.objects.aggregate(first=Min("created_at"), last=Max("finished_at"))
    return (span["last"] - span["first"]).total_seconds()


def order_latencies(user_id: int, samples: int) -> list[float]:
    """`samples` orders one at a time: seconds from submit to Completed, each."""
    from orders.services import order_submit
    from scheduler.models import Run

    latencies = []
    for _ in range(samples):
        order = order_submit(owner_id=user_id, data=ORDER)
        while True:
            run = Run.objects.only("state", "created_at", "finished_at").get(pk=order.run_id)
            if run.state == Run.State.COMPLETED:
                break
            if run.is_terminal:
                raise RuntimeError(f"bench order ended {run.state}")
            time.sleep(0.003)
        latencies.append((run.finished_at - run.created_at).total_seconds())
    return latencies


def _wait_all_completed(n: int, timeout: float) -> None:
    from scheduler.models import Run

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = Run.objects.filter(state__in=Run.TERMINAL_STATES).count()
        if done >= n:
            bad = Run.objects.exclude(state=Run.State.COMPLETED).count()
            if bad:
                raise RuntimeError(f"{bad} bench runs did not complete")
            return
        time.sleep(0.05)
    raise RuntimeError(f"bench runs not done after {timeout}s")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=300)
    parser.add_argument("--noop-tasks", type=int, default=3000)
    parser.add_argument("--latency-samples", type=int, default=100)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--reply-mode", choices=["inline", "queue"], default="inline")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    import os

    os.environ["SAS_REPLY_MODE"] = args.reply_mode
    os.environ.setdefault("CELERY_RESULT_BACKEND", os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    env = bench_environment()
    from sastools.harness import simulator_process

    sim = simulator_process(url=env["SIMULATOR_URL"], log_dir=log_dir(), env=env).start(
        ready_marker="SIMULATOR_LISTENING"
    )
    results: dict[str, dict[str, float]] = {}
    try:
        for c in args.concurrency:
            bare = bare_celery(env, c, args.noop_tasks, args.latency_samples)
            eng = engine(env, c, args.orders, args.latency_samples)
            results[f"c{c}"] = {
                **{f"bare_{k}": v for k, v in bare.items()},
                **{f"engine_{k}": v for k, v in eng.items()},
            }
            print(f"\nworker processes: {c}   reply mode: {args.reply_mode}")
            print_table(
                [
                    ("bare no-op tasks/s", f"{bare['tasks_per_s']:.0f}"),
                    ("bare round trip p50 / p99", f"{fmt_ms(bare['rtt_p50'])} / {fmt_ms(bare['rtt_p99'])}"),
                    ("engine orders/s (3 steps)", f"{eng['orders_per_s']:.1f}"),
                    ("engine steps/s", f"{eng['steps_per_s']:.0f}"),
                    (
                        "submit->Completed p50 / p99",
                        f"{fmt_ms(eng['latency_p50'])} / {fmt_ms(eng['latency_p99'])}",
                    ),
                    ("agent attempt p50 (claim->reply)", fmt_ms(eng["attempt_p50"])),
                    (
                        "ratio steps/s : no-op/s (target >= 0.5)",
                        f"{eng['steps_per_s'] / bare['tasks_per_s']:.2f}",
                    ),
                    ("ratio p50 : bare RTT p50 (target <= 8)", f"{eng['latency_p50'] / bare['rtt_p50']:.1f}"),
                    (
                        "ratio p99 : bare RTT p99 (target <= 20)",
                        f"{eng['latency_p99'] / bare['rtt_p99']:.1f}",
                    ),
                ]
            )
    finally:
        sim.stop()
    if args.json:
        args.json.write_text(json.dumps({"reply_mode": args.reply_mode, **results}, indent=2))


if __name__ == "__main__":
    main()
