"""The sign-in throttle's cost per attempt (issue 26): the count-first Lua script (one EVAL) and
a success's take-back, beside the issue-22 throttle's two pipelines (read before the check,
count after) and one password check (the default PBKDF2 hasher), on the machine's Redis.

    python bench/login_throttle.py [--attempts 3000]

Prints p50 / p95 in microseconds. No database: Redis only, under a prefix of its own, deleted
afterwards."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e6, ordered[int(len(ordered) * 0.95)] * 1e6


def _timed(n: int, call: Callable[[int], object]) -> list[float]:
    out = []
    for i in range(n):
        start = time.perf_counter()
        call(i)
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--attempts", type=int, default=3000)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sasproject.settings")
    os.environ["SAS_REDIS_PREFIX"] = f"bench{os.getpid()}:"
    os.environ["LOG_LEVEL"] = "WARNING"
    # Thousands of failures from one process would pass the site's slow-down threshold: off here
    # (with it on, an attempt costs the same EVAL plus one SET in it).
    os.environ["SAS_LOGIN_SLOW_SITE"] = "0"
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth.hashers import check_password, make_password

    from sasproject.login_throttle import login_attempt_begin, login_success_record
    from sasproject.redis_client import get_redis

    redis = get_redis()
    n = args.attempts

    def count_first(i: int) -> None:
        assert (
            login_attempt_begin(
                username=f"user{i}", address=f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"
            )
            is None
        )

    def count_and_success(i: int) -> None:
        address = f"10.9.{i // 256 % 256}.{i % 256}"
        assert login_attempt_begin(username=f"ok{i}", address=address) is None
        login_success_record(username=f"ok{i}", address=address)

    old_prefix = f"{settings.REDIS_PREFIX}old:"

    def issue_22(i: int) -> None:
        keys = [f"{old_prefix}user:{i}", f"{old_prefix}ip:{i}"]
        pipe = redis.pipeline()
        for key in keys:
            pipe.get(key)
            pipe.ttl(key)
        pipe.execute()
        pipe = redis.pipeline()
        for key in keys:
            pipe.set(key, 0, ex=900, nx=True)
            pipe.incr(key)
        pipe.execute()

    encoded = make_password("correct horse battery staple")

    def password_check(i: int) -> None:
        check_password("wrong", encoded)

    rows = [
        ("count first (one EVAL), a failed attempt", _timed(n, count_first)),
        ("count first + success take-back (two EVALs)", _timed(n, count_and_success)),
        ("issue 22: read, then count (two pipelines)", _timed(n, issue_22)),
        ("one password check (PBKDF2, Django's default)", _timed(max(5, n // 100), password_check)),
    ]
    print(f"sign-in throttle, {n} attempts, Redis {settings.REDIS_URL.rpartition('@')[2]}")
    print(f"{'':48} {'p50 µs':>9} {'p95 µs':>9}")
    for label, samples in rows:
        p50, p95 = _percentiles(samples)
        print(f"{label:48} {p50:9.0f} {p95:9.0f}")
    keys = list(redis.scan_iter(f"{settings.REDIS_PREFIX}*", count=1000))
    for start in range(0, len(keys), 1000):
        redis.delete(*keys[start : start + 1000])


if __name__ == "__main__":
    main()
