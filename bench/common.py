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
    # The engine benches submit thousands of runs for one user: per-user quotas off unless a
    # bench asks for them (bench/fairness.py measures with them on).
    for name in ("SAS_QUOTA_ACTIVE_JOBS", "SAS_QUOTA_RUNS_IN_FLIGHT", "SAS_QUOTA_EXPORTS_IN_FLIGHT"):
        os.environ.setdefault(name, "0")
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
    # The workers and beat it starts log at INFO, as `make run` and production do: they log
    # through the project's LOG_LEVEL (issue 19), and this process's WARNING would hide the
    # " ready." / "beat: Starting" lines the benches wait for (a bench may still pass its own).
    return {**os.environ, "LOG_LEVEL": "INFO"}


def _ensure_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
        others = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (name,)
        ).fetchone()
    if others and others[0]:
        # Every bench TRUNCATEs the engine's tables (and migrates its own branch's schema): two at
        # once on one database - say from two worktrees on one machine - ruin each other's figures.
        raise SystemExit(
            f"{others[0]} other connection(s) to the bench database {name!r}: another bench is running "
            "on it. Wait for it to finish, or give this one a database of its own: SAS_BENCH_DB=<name>."
        )


def log_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="sas-bench-"))
    return path


def truncate_engine() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scheduler_runevent, scheduler_taskexecutionhistory, alerting_alert, orders_order, "
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


# -- shared by bench/compare.py and its baselines (bench/baselines/) ---------------------------

# Every latency sample of every system is taken the same way: the clock starts when the
# submitting call returns, and the final state is polled at this interval until readable.
POLL_INTERVAL = 0.002
# A burst is timed from just before the first submit until a poll (at this interval) sees the
# last order done.
BURST_POLL_INTERVAL = 0.01

BENCH_VENV = REPO / ".bench-venv"
BASELINE_REQUIREMENTS = REPO / "bench" / "requirements-baselines.txt"


def ensure_bench_venv() -> Path:
    """The bench-only venv (Procrastinate and its pins), created or updated on demand: the
    runtime venv is never touched. Returns its python."""
    python = BENCH_VENV / "bin" / "python"
    stamp = BENCH_VENV / ".requirements-installed"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(BENCH_VENV)], check=True)
    if not stamp.exists() or stamp.stat().st_mtime < BASELINE_REQUIREMENTS.stat().st_mtime:
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "-r",
                str(BASELINE_REQUIREMENTS),
            ],
            check=True,
        )
        stamp.touch()
    return python


def baseline_env(env: dict[str, str]) -> dict[str, str]:
    """The environment for a baseline's processes: no Django (Celery's Django fix-up switches on
    when DJANGO_SETTINGS_MODULE is set), our code importable."""
    clean = {
        k: v for k, v in env.items() if k != "DJANGO_SETTINGS_MODULE" and not k.startswith("VIRTUAL_ENV")
    }
    clean["PYTHONPATH"] = str(REPO)
    return clean


def wait_until(predicate: Any, *, timeout: float, interval: float, what: str) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
