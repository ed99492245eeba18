"""The driver of baseline (c): starts N Procrastinate worker processes for the app in
bench/baselines/procrastinate_app.py, times a burst and single orders, prints one JSON line.

Runs in the bench-only venv (.bench-venv/, bench/requirements-baselines.txt), started by
bench/compare.py; by hand, with PROCRASTINATE_DSN and SIMULATOR_URL exported:

    .bench-venv/bin/python -m bench.baselines.procrastinate_bench --processes 1 [--orders 300] [--samples 100]

Workers: N `procrastinate worker` processes, each with the default settings (concurrency 1,
LISTEN/NOTIFY on, so a deferred job wakes a worker at once; the 5 s polling only as a fallback),
to match N Celery pool processes each running one task at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.baselines.procrastinate_app import DSN, QUEUE, app, reserve  # noqa: E402
from bench.common import BURST_POLL_INTERVAL, POLL_INTERVAL, summary  # noqa: E402
from bench.cpu import busy_cpu_seconds  # noqa: E402

ITEMS = [{"sku": "B-1", "quantity": 1}]


async def submit_order() -> str:
    order_id = str(uuid.uuid4())
    await reserve.defer_async(order_id=order_id, items=ITEMS, amount="9.99", currency="EUR", card="tok_ok")
    return order_id


async def _prepare() -> None:
    import psycopg

    head, _, name = DSN.rpartition("/")
    async with await psycopg.AsyncConnection.connect(f"{head}/postgres", autocommit=True) as conn:
        cur = await conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if not await cur.fetchone():
            await conn.execute(f'CREATE DATABASE "{name}"')
    async with await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        cur = await conn.execute("SELECT to_regclass('procrastinate_jobs')")
        row = await cur.fetchone()
        if row is None or row[0] is None:
            async with app.open_async():
                await app.schema_manager.apply_schema_async()


async def _truncate(conn: Any) -> None:
    await conn.execute(
        # Not procrastinate_workers: the running workers are registered there.
        "TRUNCATE procrastinate_jobs, procrastinate_events, procrastinate_periodic_defers"
    )


async def _succeeded(conn: Any) -> int:
    cur = await conn.execute(
        "SELECT count(*) FROM procrastinate_jobs WHERE task_name = 'ship' AND status = 'succeeded'"
    )
    row = await cur.fetchone()
    return int(row[0])


async def _order_done(conn: Any, order_id: str) -> bool:
    cur = await conn.execute(
        "SELECT status FROM procrastinate_jobs WHERE task_name = 'ship' AND args->>'order_id' = %s",
        (order_id,),
    )
    row = await cur.fetchone()
    if row is not None and row[0] in ("failed", "cancelled", "aborted"):
        raise RuntimeError(f"procrastinate order {order_id} ended {row[0]}")
    return row is not None and row[0] == "succeeded"


async def _failed(conn: Any) -> int:
    cur = await conn.execute(
        "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('failed', 'cancelled', 'aborted')"
    )
    row = await cur.fetchone()
    return int(row[0])


async def _latencies(conn: Any, samples: int) -> list[float]:
    values = []
    for _ in range(samples):
        order_id = await submit_order()
        t0 = time.perf_counter()
        deadline = time.monotonic() + 30
        while not await _order_done(conn, order_id):
            if time.monotonic() > deadline:
                raise RuntimeError("a latency sample did not finish in 30 s")
            await asyncio.sleep(POLL_INTERVAL)
        values.append(time.perf_counter() - t0)
    return values


async def measure(orders: int, samples: int) -> dict[str, float]:
    import psycopg

    async with app.open_async(), await psycopg.AsyncConnection.connect(DSN, autocommit=True) as conn:
        # Warm-up (and readiness): the workers have run orders and hold their clients.
        await _latencies(conn, 10)
        await _truncate(conn)
        started = time.perf_counter()
        cpu0 = busy_cpu_seconds()
        for _ in range(orders):
            await submit_order()
        last, last_change = -1, time.monotonic()
        while (done := await _succeeded(conn)) < orders:
            if done != last:
                last, last_change = done, time.monotonic()
            elif time.monotonic() - last_change > 30:
                raise RuntimeError(f"procrastinate burst stalled at {done}/{orders}; see the worker logs")
            if await _failed(conn):
                raise RuntimeError("procrastinate jobs failed; see the worker logs")
            await asyncio.sleep(BURST_POLL_INTERVAL)
        elapsed = time.perf_counter() - started
        cpu_ms = (busy_cpu_seconds() - cpu0) * 1000 / orders
        await _truncate(conn)
        lat = summary(await _latencies(conn, samples))
    return {"per_s": orders / elapsed, "p50": lat["p50"], "p99": lat["p99"], "n": orders, "cpu_ms": cpu_ms}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--processes", type=int, default=1, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=1, help="jobs at once in each worker process")
    parser.add_argument("--orders", type=int, default=300)
    parser.add_argument("--samples", type=int, default=100)
    args = parser.parse_args()

    from sastools.harness import Proc

    asyncio.run(_prepare())
    log_dir = Path(os.environ.get("BENCH_LOG_DIR", "/tmp"))
    workers = []
    try:
        for i in range(args.processes):
            name = f"procrastinate-{args.processes}-{i}"
            workers.append(
                Proc(
                    name=name,
                    args=[
                        sys.executable,
                        "-m",
                        "procrastinate",
                        # Its own best: no log line per job (the Celery baselines run at WARNING too).
                        "--log-level=warning",
                        "--app=bench.baselines.procrastinate_app.app",
                        "worker",
                        f"--name={name}",
                        f"--queues={QUEUE}",
                        f"--concurrency={args.concurrency}",
                    ],
                    log_path=log_dir / f"{name}.log",
                    env=dict(os.environ),
                ).start(ready_marker=None)
            )
        figures = asyncio.run(measure(args.orders, args.samples))
    finally:
        for worker in workers:
            worker.stop()
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
