"""Baselines (a) and (b) of issue 6: a standalone Celery app - no Django, no task events - with
our workers' settings (prefork pool, late acks, reject on worker lost, prefetch multiplier 1,
JSON only).

(a) `noop`: a task that does nothing but tell the bench it ran (one Redis INCR or SET);
(b) `chain`: the order's three steps as a plain Celery chain - what a user would write without
    durability - each task making the same HTTP call to the simulator as our agents make (same
    endpoint, body and Idempotency-Key header; httpx with one keep-alive pooled client per
    process, as agents/base.py does). The last task SETs a Redis key: that is the order's
    "final state readable".
(f) `durable`: the floor of a durable engine (issue 27): the same chain, where each task, after
    its call, records the step's result in PostgreSQL (BARE_DATABASE_URL) with one INSERT and
    its durable COMMIT - the least a state store that keeps every step's outcome must make the
    hardware do (one WAL flush per step); nothing else: no lookup, no state machine, no events.

Run by bench/compare.py (which starts the simulator); by hand, with REDIS_URL and SIMULATOR_URL
exported and DJANGO_SETTINGS_MODULE unset:

    python -m bench.baselines.bare_celery noop --concurrency 1 [--tasks 3000] [--samples 100]
    python -m bench.baselines.bare_celery chain --concurrency 1 [--orders 300] [--samples 100]

Each run starts its own worker (`celery -A bench.baselines.bare_celery worker`, its own Redis key
prefix and queue), measures, stops it, and prints one JSON line of figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import redis
from celery import Celery, chain

REPO = Path(__file__).resolve().parent.parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.common import BURST_POLL_INTERVAL, POLL_INTERVAL, summary  # noqa: E402
from bench.cpu import busy_cpu_seconds  # noqa: E402

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("BARE_PREFIX", "benchbare:")
SIMULATOR_URL = os.environ.get("SIMULATOR_URL", "http://127.0.0.1:8055").rstrip("/")
QUEUE = "bare"

# Not the current app: importing this module (tests/bench/ does) must not redirect
# `current_app.send_task` elsewhere in that process to this app's broker and prefix.
app = Celery("bare", broker=REDIS_URL, set_as_current=False)
app.conf.update(
    # The settings our workers run with (sasproject/settings/), less what needs Django.
    task_serializer="json",
    accept_content=["json"],
    result_serializer="json",
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    broker_transport_options={"global_keyprefix": PREFIX, "visibility_timeout": 3600},
    # Its own best: no result backend, no task events (bench/monitoring.py measures the floor
    # of what task events cost with them on: the worker's -E, and BARE_TASK_SENT_EVENT=1).
    task_ignore_result=True,
    worker_send_task_events=False,
    task_send_sent_event=os.environ.get("BARE_TASK_SENT_EVENT") == "1",
    task_default_queue=QUEUE,
    enable_utc=True,
)

# -- in the worker ---------------------------------------------------------------------------

_local = threading.local()


def _redis() -> redis.Redis:
    client: redis.Redis | None = getattr(_local, "redis", None)
    if client is None or getattr(_local, "redis_pid", None) != os.getpid():
        client = redis.Redis.from_url(REDIS_URL)
        _local.redis, _local.redis_pid = client, os.getpid()
    return client


def _http() -> httpx.Client:
    """One pooled keep-alive client per process, created after fork (as agents/base.py)."""
    client: httpx.Client | None = getattr(_local, "http", None)
    if client is None or getattr(_local, "http_pid", None) != os.getpid():
        client = httpx.Client(limits=httpx.Limits(max_connections=20, max_keepalive_connections=10))
        _local.http, _local.http_pid = client, os.getpid()
    return client


DATABASE_URL = os.environ.get("BARE_DATABASE_URL", "")
FLOOR_TABLE = "bench_bare_step_record"


def _db() -> psycopg.Connection[Any]:
    """One autocommit connection per process (after fork): each INSERT is its own durable commit."""
    conn: psycopg.Connection[Any] | None = getattr(_local, "db", None)
    if conn is None or getattr(_local, "db_pid", None) != os.getpid():
        conn = psycopg.connect(DATABASE_URL, autocommit=True)
        _local.db, _local.db_pid = conn, os.getpid()
    return conn


def _record(order_id: str, step: str, result: Any) -> None:
    _db().execute(
        f"INSERT INTO {FLOOR_TABLE} (order_id, step, result) VALUES (%s, %s, %s)",
        (order_id, step, json.dumps(result)),
    )


def _post(path: str, body: dict[str, Any], idempotency_key: str) -> Any:
    response = _http().post(
        SIMULATOR_URL + path,
        json=body,
        headers={"Idempotency-Key": idempotency_key},
        timeout=httpx.Timeout(10.0),
    )
    response.raise_for_status()
    return response.json()


def _signal_done(done_key: str, counter_key: str) -> None:
    pipe = _redis().pipeline(transaction=False)
    if done_key:
        pipe.set(done_key, "1", ex=600)
    if counter_key:
        pipe.incr(counter_key)
        pipe.expire(counter_key, 600)
    pipe.execute()


@app.task(name="bare.noop")
def noop(done_key: str = "", counter_key: str = "") -> None:
    if done_key or counter_key:
        _signal_done(done_key, counter_key)


# The same bodies as orders/workflows.py builds for the agents.
@app.task(name="bare.reserve")
def reserve(order_id: str, items: list[dict[str, Any]]) -> None:
    _post("/inventory/reserve", {"items": items, "order_id": order_id}, f"{order_id}:reserve")


@app.task(name="bare.charge")
def charge(order_id: str, amount: str, currency: str, card: str) -> None:
    _post(
        "/payment/charge",
        {"amount": amount, "currency": currency, "card": card, "order_id": order_id},
        f"{order_id}:charge",
    )


@app.task(name="bare.ship")
def ship(order_id: str, items: list[dict[str, Any]], done_key: str = "", counter_key: str = "") -> None:
    _post("/shipping/create", {"order_id": order_id, "items": items}, f"{order_id}:ship")
    _signal_done(done_key, counter_key)


ITEMS = [{"sku": "B-1", "quantity": 1}]


# (f) the durable floor: the same calls, each step's result committed before the next is sent.
@app.task(name="bare.durable_step")
def durable_step(order_id: str, name: str, done_key: str = "", counter_key: str = "") -> None:
    path, body = CALLS[name]
    _record(order_id, name, _post(path, body(order_id), f"{order_id}:{name}"))
    if done_key or counter_key:
        _signal_done(done_key, counter_key)


def submit_durable(*, done_key: str = "", counter_key: str = "") -> str:
    order_id = str(uuid.uuid4())
    chain(
        durable_step.si(order_id, "reserve"),
        durable_step.si(order_id, "charge"),
        durable_step.si(order_id, "ship", done_key=done_key, counter_key=counter_key),
    ).apply_async()
    return order_id


def floor_table_ready() -> None:
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (id bigserial PRIMARY KEY, order_id uuid NOT NULL, "
            "step text NOT NULL, result jsonb NOT NULL, recorded_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute(f"TRUNCATE {FLOOR_TABLE}")


# For bench/monitoring.py's floor: an order as `tasks` chained tasks sharing the same three calls.
CALLS = {
    "reserve": ("/inventory/reserve", lambda o: {"items": ITEMS, "order_id": o}),
    "charge": (
        "/payment/charge",
        lambda o: {"amount": "9.99", "currency": "EUR", "card": "tok_ok", "order_id": o},
    ),
    "ship": ("/shipping/create", lambda o: {"order_id": o, "items": ITEMS}),
}


@app.task(name="bare.calls")
def calls(order_id: str, names: list[str], done_key: str = "", counter_key: str = "") -> None:
    for name in names:
        path, body = CALLS[name]
        _post(path, body(order_id), f"{order_id}:{name}")
    if done_key or counter_key:
        _signal_done(done_key, counter_key)


def submit_calls(*, tasks: int, done_key: str = "", counter_key: str = "") -> str:
    """One order of the three calls in `tasks` chained tasks (1: one task makes all three;
    3: one each, as `submit_order`; more: the extra ones make none)."""
    order_id = str(uuid.uuid4())
    names = list(CALLS)
    groups = [names[i * len(names) // tasks : (i + 1) * len(names) // tasks] for i in range(tasks)]
    signatures = [calls.si(order_id, group) for group in groups[:-1]]
    signatures.append(calls.si(order_id, groups[-1], done_key=done_key, counter_key=counter_key))
    chain(*signatures).apply_async()
    return order_id


# -- the driver ------------------------------------------------------------------------------


def submit_order(*, done_key: str = "", counter_key: str = "") -> str:
    order_id = str(uuid.uuid4())
    chain(
        reserve.si(order_id, ITEMS),
        charge.si(order_id, "9.99", "EUR", "tok_ok"),
        ship.si(order_id, ITEMS, done_key=done_key, counter_key=counter_key),
    ).apply_async()
    return order_id


def submit_noop(*, done_key: str = "", counter_key: str = "") -> None:
    noop.apply_async(kwargs={"done_key": done_key, "counter_key": counter_key})


def _burst(submit: Any, n: int, r: redis.Redis) -> float:
    counter = f"{PREFIX}count:{uuid.uuid4()}"
    started = time.perf_counter()
    for _ in range(n):
        submit(counter_key=counter)
    last, last_change = -1, time.monotonic()
    while (done := int(r.get(counter) or 0)) < n:
        if done != last:
            last, last_change = done, time.monotonic()
        elif time.monotonic() - last_change > 30:
            raise RuntimeError(f"burst stalled at {done}/{n}; see the worker log")
        time.sleep(BURST_POLL_INTERVAL)
    return time.perf_counter() - started


def _latencies(submit: Any, samples: int, r: redis.Redis) -> list[float]:
    values = []
    for _ in range(samples):
        done = f"{PREFIX}done:{uuid.uuid4()}"
        submit(done_key=done)
        t0 = time.perf_counter()
        deadline = time.monotonic() + 30
        while not r.exists(done):
            if time.monotonic() > deadline:
                raise RuntimeError("a latency sample did not finish in 30 s")
            time.sleep(POLL_INTERVAL)
        values.append(time.perf_counter() - t0)
    return values


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["noop", "chain", "durable"])
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="0: prefork with --concurrency processes; K: --concurrency workers of -P threads -c K",
    )
    parser.add_argument("--tasks", type=int, default=3000, help="noop: tasks in the burst")
    parser.add_argument("--orders", type=int, default=300, help="chain: orders in the burst")
    parser.add_argument("--samples", type=int, default=100, help="latency samples, one at a time")
    parser.add_argument("--loglevel", default="WARNING", help="the worker's -l (default: Celery's own)")
    args = parser.parse_args()

    from sastools.harness import Proc

    app.set_current()  # this process is the baseline's client and nothing else
    log_dir = Path(os.environ.get("BENCH_LOG_DIR", "/tmp"))
    name = f"bare-{args.mode}-{args.concurrency}"
    pool = ["-c", str(args.concurrency), "-P", "prefork"]
    if args.threads:
        pool = ["-c", str(args.threads), "-P", "threads"]
    workers = [
        Proc(
            name=f"{name}-{i}",
            args=[
                sys.executable,
                "-m",
                "celery",
                "-A",
                "bench.baselines.bare_celery",
                "worker",
                "-Q",
                QUEUE,
                *pool,
                "-n",
                f"{name}-{i}@%h",
                "--without-mingle",
                "--without-gossip",
                "-l",
                args.loglevel,
            ],
            log_path=log_dir / f"{name}-{i}.log",
            env=dict(os.environ),
        ).start(ready_marker=None)
        for i in range(args.concurrency if args.threads else 1)
    ]
    r = redis.Redis.from_url(REDIS_URL)
    submit = {"noop": submit_noop, "chain": submit_order, "durable": submit_durable}[args.mode]
    if args.mode == "durable":
        if not DATABASE_URL:
            parser.error("durable needs BARE_DATABASE_URL (the PostgreSQL the steps are recorded in)")
        floor_table_ready()
    try:
        # Warm-up (and readiness): every pool process has run something and holds its clients.
        _latencies(submit, 20, r)
        n = args.tasks if args.mode == "noop" else args.orders
        cpu0 = busy_cpu_seconds()
        elapsed = _burst(submit, n, r)
        cpu_ms = (busy_cpu_seconds() - cpu0) * 1000 / n
        lat = summary(_latencies(submit, args.samples, r))
    finally:
        for worker in workers:
            worker.stop()
    print(json.dumps({"per_s": n / elapsed, "p50": lat["p50"], "p99": lat["p99"], "n": n, "cpu_ms": cpu_ms}))


if __name__ == "__main__":
    main()
