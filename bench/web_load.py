"""Orders posted concurrently over the API against the web as `make run` serves it (gunicorn),
under several connection set-ups: the figures behind the web's database settings (issue 7).

    python bench/web_load.py [--orders 200] [--clients 32] [--configs pool4 ...]

For each configuration it starts the web (sasproject/gunicorn.conf.py) on a free port against the
bench database, posts --orders orders from --clients threads (two users, an Idempotency-Key
each, retried on 503 as a client would), samples the web's PostgreSQL connections
(pg_stat_activity, application_name) every 20 ms, and prints orders/s, p50/p99 latency, the
status codes seen and the most connections the web held. No Celery worker runs: the orders are
submitted (and their first steps claimed), not executed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    REPO,
    _free_port,
    bench_environment,
    fmt_ms,
    log_dir,
    print_table,
    summary,
    truncate_engine,
)

ORDER = {"items": [{"sku": "W-1", "quantity": 1}], "amount": "9.99", "currency": "EUR"}
APP_NAME = "sas-bench-web"

# name -> (environment of the web process, its connection bound)
CONFIGS: dict[str, dict[str, str]] = {
    # gunicorn 2 processes x 8 threads; a thread keeps its connection (CONN_MAX_AGE 300).
    "persistent": {"WEB_WORKERS": "2", "WEB_THREADS": "8", "DATABASE_CONN_MAX_AGE": "300"},
    # the same, a new connection per request.
    "per-request": {"WEB_WORKERS": "2", "WEB_THREADS": "8", "DATABASE_CONN_MAX_AGE": "0"},
    # a pool per process shared by its 8 threads.
    "pool2": {"WEB_WORKERS": "2", "WEB_THREADS": "8", "DATABASE_POOL_MAX_SIZE": "2"},
    "pool4": {"WEB_WORKERS": "2", "WEB_THREADS": "8", "DATABASE_POOL_MAX_SIZE": "4"},
    "pool8": {"WEB_WORKERS": "2", "WEB_THREADS": "8", "DATABASE_POOL_MAX_SIZE": "8"},
    "pool4-t16": {"WEB_WORKERS": "2", "WEB_THREADS": "16", "DATABASE_POOL_MAX_SIZE": "4"},
}


def web_command(port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "-c",
        str(REPO / "sasproject" / "gunicorn.conf.py"),
        "--bind",
        f"127.0.0.1:{port}",
        "--access-logfile",
        "/dev/null",
        "sasproject.wsgi",
    ]


def run_config(
    name: str, env: dict[str, str], tokens: list[str], orders: int, clients: int
) -> list[tuple[str, str]]:
    import httpx
    import psycopg

    port = _free_port()
    web_env = {
        **env,
        **CONFIGS[name],
        "DATABASE_APPLICATION_NAME": APP_NAME,
        "SAS_SUBMIT_RATE": "100000/minute",
    }
    web_env.setdefault("DATABASE_POOL_MAX_SIZE", "0")
    log = log_dir() / "web.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            web_command(port), cwd=REPO, env=web_env, stdout=out, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/accounts/login/", timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError(f"web did not start:\n{log.read_text()[-3000:]}") from None
                time.sleep(0.2)
        truncate_engine()
        statuses: Counter[int] = Counter()
        latencies: list[float] = []
        lock = threading.Lock()
        next_order = iter(range(orders))
        peak = [0]
        stop = threading.Event()

        def sample() -> None:
            with psycopg.connect(env["DATABASE_URL"], autocommit=True) as conn:
                while not stop.is_set():
                    row = conn.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (APP_NAME,)
                    ).fetchone()
                    peak[0] = max(peak[0], int(row[0]) if row else 0)
                    time.sleep(0.02)

        def client(i: int) -> None:
            token = tokens[i % len(tokens)]
            with httpx.Client(base_url=base, timeout=30, headers={"Authorization": f"Token {token}"}) as http:
                while True:
                    with lock:
                        n = next(next_order, None)
                    if n is None:
                        return
                    key = str(uuid.uuid4())
                    started = time.perf_counter()
                    while True:
                        response = http.post("/api/orders/", json=ORDER, headers={"Idempotency-Key": key})
                        with lock:
                            statuses[response.status_code] += 1
                        if response.status_code != 503:
                            break
                        time.sleep(float(response.headers.get("Retry-After", "1")))
                    with lock:
                        latencies.append(time.perf_counter() - started)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
        stop.set()
        sampler.join()
        s = summary(latencies)
        pool = CONFIGS[name].get("DATABASE_POOL_MAX_SIZE")
        bound = int(CONFIGS[name]["WEB_WORKERS"]) * (int(pool) if pool else int(CONFIGS[name]["WEB_THREADS"]))
        return [
            (f"{name}: orders/s", f"{orders / elapsed:.1f}"),
            (f"{name}: latency p50 / p99", f"{fmt_ms(s['p50'])} / {fmt_ms(s['p99'])}"),
            (f"{name}: statuses", str(dict(sorted(statuses.items())))),
            (f"{name}: web connections max (bound)", f"{peak[0]} ({bound})"),
        ]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--rounds", type=int, default=1, help="repeat every configuration, interleaved")
    args = parser.parse_args()
    env = bench_environment()
    env.pop("DATABASE_CONN_MAX_AGE", None)
    env["DJANGO_DEBUG"] = os.environ.get("BENCH_WEB_DEBUG", "1")  # as `make run` serves it
    from django.contrib.auth import get_user_model

    from sasproject.tokens.services import api_token_rotate

    tokens = []
    for username in ("bench-web-1", "bench-web-2"):
        user, _ = get_user_model().objects.get_or_create(username=username)
        tokens.append(api_token_rotate(user_id=user.pk).key)
    print(f"{args.orders} orders from {args.clients} clients, {os.cpu_count()} CPUs")
    for _ in range(args.rounds):
        for name in args.configs:
            print_table(run_config(name, env, tokens, args.orders, args.clients))
    from sasproject.redis_client import get_redis

    redis = get_redis()
    for key in redis.scan_iter(f"{env['SAS_REDIS_PREFIX']}*", count=1000):
        redis.delete(key)


if __name__ == "__main__":
    main()
