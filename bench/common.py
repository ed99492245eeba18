"""Shared set-up for the benchmarks: a database and a Redis key prefix of their own, real
worker/simulator subprocesses (the same helpers the tests use), and small statistics helpers.

Every bench script calls `bench_environment()` before importing Django models.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

BENCH_DB = os.environ.get("SAS_BENCH_DB", "sasproject_bench")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_environment(*, migrate: bool = True) -> dict[str, str]:
    """Point this process (and the subprocesses it starts) at the bench database and a bench
    Redis prefix, create and migrate the database, then set Django up."""
    base_db = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/sasproject")
    head, _, _ = base_db.rpartition("/")
    os.environ["DATABASE_URL"] = f"{head}/{BENCH_DB}"
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/0")
    os.environ["SAS_REDIS_PREFIX"] = f"bench{os.getpid()}:"
    os.environ.setdefault("SIMULATOR_URL", f"http://127.0.0.1:{_free_port()}")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sasproject.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ["DJANGO_DEBUG"] = "0"
    os.environ["DATABASE_CONN_MAX_AGE"] = "600"
    _ensure_database(f"{head}/postgres", BENCH_DB)
    if migrate:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=REPO,
            check=True,
            env=os.environ,
        )
    import django

    django.setup()
    return dict(os.environ)


def _ensure_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')


def log_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="sas-bench-"))
    return path


def truncate_engine() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scheduler_runevent, scheduler_taskexecutionhistory, supervisor_alert, orders_order, "
            "scheduler_step, scheduler_run CASCADE"
        )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": percentile(values, 0.5),
        "p99": percentile(values, 0.99),
        "mean": statistics.fmean(values) if values else float("nan"),
    }


def fmt_ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def print_table(rows: list[tuple[str, Any]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"  {key.ljust(width)}  {value}")
