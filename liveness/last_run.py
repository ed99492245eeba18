"""When each periodic task last ran to completion - the one record (issue 27).

There were two: one written by the task itself at its start (`periodic_mark`, for the health page
and /metrics) and one written at its success (`task_postrun`, for alerting's dead man's switch).
This is the second, kept for all three readers: a task that starts but fails or hangs every time
is not running as far as an operator is concerned, and only the success record says so; it needs
no call inside each task (one `task_postrun` receiver, for the tasks in
SAS_ALERT_WATCHED_TASKS), so a new periodic task cannot forget it. docs/decisions.md, "One
record of a periodic task's last run".

Layout: `<prefix>sas:periodic:last_run` - hash: task name -> epoch seconds of its last success
(the key the start record used: the health page keeps its history across the upgrade). Beat's
own `last_run_at` says when beat *sent* a task, and beat saves it only every few minutes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import redis
from django.conf import settings

from sasproject.redis_client import get_redis

logger = logging.getLogger(__name__)


def last_run_key() -> str:
    return f"{settings.REDIS_PREFIX}sas:periodic:last_run"


def last_run_record(*, task: str) -> None:
    """`task` completed now. Raises redis.RedisError (callers decide whether it matters)."""
    get_redis().hset(last_run_key(), task, f"{time.time():.3f}")


def last_run_start_counting(*, task: str) -> None:
    """Never recorded (a fresh deployment, Redis emptied): count from now, once (HSETNX) - the
    task gets its full N intervals before the dead man's switch fires."""
    get_redis().hsetnx(last_run_key(), task, f"{time.time():.3f}")


def last_run_ages(*, tasks: Sequence[str]) -> dict[str, float | None]:
    """Seconds since each of `tasks` last completed (None: never recorded), in one round trip.
    Raises redis.RedisError."""
    if not tasks:
        return {}
    raws: list[Any] = get_redis().hmget(last_run_key(), list(tasks))
    now = time.time()
    return {
        task: None if raw is None else max(0.0, now - float(raw))
        for task, raw in zip(tasks, raws, strict=True)
    }


def last_run_age(*, task: str) -> float | None:
    """`last_run_ages` of one task."""
    return last_run_ages(tasks=[task])[task]


def last_runs() -> dict[str, datetime]:
    """Every recorded task -> when it last completed; {} when Redis cannot be read (logged)."""
    try:
        raw = get_redis().hgetall(last_run_key())
    except redis.RedisError:
        logger.warning("cannot read the periodic tasks' last runs (Redis)", exc_info=True)
        return {}
    return {
        (k.decode() if isinstance(k, bytes) else str(k)): datetime.fromtimestamp(float(v), tz=UTC)
        for k, v in raw.items()
    }


def last_run_recorded(sender: Any = None, task: Any = None, state: str | None = None, **kwargs: Any) -> None:
    """`task_postrun`: a watched periodic task completed - record when. Best effort: a Redis
    error is logged (the task's own work is done)."""
    name = getattr(task, "name", "")
    if state == "SUCCESS" and name in settings.SAS_ALERT_WATCHED_TASKS:
        try:
            last_run_record(task=name)
        except redis.RedisError:
            logger.warning("last run of %s not recorded (Redis)", name)
