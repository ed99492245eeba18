"""Who is alive, read from Redis and written by the workers themselves (issue 21).

- Consumer heartbeats: every worker's watchdog thread (alerting/watchdog.py) sets
  `sas:consumer:<queue>:<worker>` with a TTL of a few beats for each queue it consumes. A
  worker killed with SIGKILL stops writing, and its keys expire: "a queue with work and no
  consumer" needs no broadcast to the workers (celery inspect waits for a timeout per call).
- Last runs: a `task_success`-side hook records when the supervisor's sweep, the jobs
  dispatcher and the evaluator itself last ran to completion, `sas:lastrun:<task>` (the dead
  man's switch reads it; beat's own `last_run_at` says when beat *sent* a task, and beat saves
  it only every few minutes).
- Queue depth is not read here: sasproject/broker_queues.py is the one reader (Redis or
  RabbitMQ), shared with the engine-health page and /metrics (issue 27).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

import redis
from django.conf import settings

from sasproject.redis_client import get_redis

CONSUMER_KEY = "sas:consumer:"
LASTRUN_KEY = "sas:lastrun:"


def _client() -> redis.Redis:
    return get_redis(settings.REDIS_URL)


def consumers_beat(*, queues: Iterable[str], worker: str, ttl: float) -> None:
    """This worker consumes `queues` (its keys live `ttl` seconds)."""
    pipe = _client().pipeline(transaction=False)
    for queue in queues:
        pipe.set(
            f"{settings.REDIS_PREFIX}{CONSUMER_KEY}{queue}:{worker}", str(time.time()), ex=max(1, int(ttl))
        )
    pipe.execute()


def consumers_alive(*, queue: str) -> int:
    """How many workers beat for `queue` within their TTL (a SCAN over that queue's keys)."""
    pattern = f"{settings.REDIS_PREFIX}{CONSUMER_KEY}{queue}:*"
    return sum(1 for _ in _client().scan_iter(match=pattern, count=100))


def last_run_record(*, task: str) -> None:
    _client().set(f"{settings.REDIS_PREFIX}{LASTRUN_KEY}{task}", str(time.time()))


def last_run_start_counting(*, task: str) -> None:
    """Never recorded (a fresh deployment, Redis emptied): count from now, once (SET NX) - the
    task gets its full N intervals before the dead man's switch fires."""
    _client().set(f"{settings.REDIS_PREFIX}{LASTRUN_KEY}{task}", str(time.time()), nx=True)


def last_run_age(*, task: str) -> float | None:
    """Seconds since `task` last completed, or None if never recorded."""
    return last_run_ages(tasks=[task])[task]


def last_run_ages(*, tasks: Sequence[str]) -> dict[str, float | None]:
    """`last_run_age` of each of `tasks`, in one round trip (MGET)."""
    if not tasks:
        return {}
    keys = [f"{settings.REDIS_PREFIX}{LASTRUN_KEY}{task}" for task in tasks]
    raws: list[bytes | None] = _client().mget(keys)  # type: ignore[assignment]
    now = time.time()
    return {
        task: None if raw is None else max(0.0, now - float(raw))
        for task, raw in zip(tasks, raws, strict=True)
    }
