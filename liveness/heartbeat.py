"""Consumers alive per queue: each worker says so in Redis every few seconds - the one worker
heartbeat (issue 27; there were two, this and a thread's TTL keys in alerting/liveness.py).

A worker's consumer (a Celery bootstep, added in sasproject/celery.py) writes its node name
into one sorted set per queue it consumes, scored with the time, every
SAS_MONITORING["CONSUMER_HEARTBEAT"] seconds, from its event loop's timer. A worker that is
frozen (SIGSTOP), killed, stuck in its event loop or cut off from Redis stops writing; readers
count only entries newer than CONSUMER_STALE seconds (`consumers_alive`: the engine-health page,
/metrics, the alert rule "a queue with work and no consumer"). A clean shutdown removes its
entries at once. Why this one was kept and the thread's dropped: docs/decisions.md, "One worker
heartbeat".

Why not `celery inspect active_queues`: it broadcasts over the broker and waits for replies up
to its timeout (1 s) on every read, for every page view and every scrape, and a frozen worker
is simply missing from the replies - indistinguishable from a slow one until the timeout. The
heartbeat costs each worker one pipelined Redis write per period (bench/README.md, "Metrics").

Written to REDIS_URL's Redis (the engine's own keys, as breakers), whatever the broker is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from celery import bootsteps
from django.conf import settings

from sasproject.redis_client import get_redis

logger = logging.getLogger(__name__)


def consumers_key(queue: str) -> str:
    return f"{settings.REDIS_PREFIX}sas:consumers:{queue}"


def consumers_beat(*, queues: Iterable[str], worker: str, gone: bool = False) -> None:
    """`worker` consumes `queues` now (with `gone`: no longer). One pipelined round trip; entries
    of workers long gone (renamed hosts) are dropped on the way. Raises redis.RedisError."""
    now = time.time()
    stale = now - float(settings.SAS_MONITORING["CONSUMER_STALE"]) * 4
    pipe = get_redis().pipeline(transaction=False)
    for queue in queues:
        key = consumers_key(queue)
        if gone:
            pipe.zrem(key, worker)
        else:
            pipe.zadd(key, {worker: now})
            pipe.zremrangebyscore(key, "-inf", stale)
    pipe.execute()


def consumers_alive(*, queues: Sequence[str]) -> dict[str, int]:
    """How many workers consumed each of `queues` within CONSUMER_STALE seconds, in one round
    trip (ZCOUNT each). Raises redis.RedisError (the caller says what unknown means)."""
    since = time.time() - float(settings.SAS_MONITORING["CONSUMER_STALE"])
    pipe = get_redis().pipeline(transaction=False)
    for name in queues:
        pipe.zcount(consumers_key(name), since, "+inf")
    return {name: int(count) for name, count in zip(queues, pipe.execute(), strict=True)}


class QueueHeartbeat(bootsteps.StartStopStep):
    """Writes `<node name>` with the current time into each consumed queue's sorted set."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.tref: Any = None

    def start(self, parent: Any) -> None:
        interval = float(settings.SAS_MONITORING["CONSUMER_HEARTBEAT"])
        self.beat(parent)
        self.tref = parent.timer.call_repeatedly(interval, self.beat, (parent,), priority=10)

    def stop(self, parent: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None
        self._write(parent, gone=True)

    def shutdown(self, parent: Any) -> None:
        self.stop(parent)

    def beat(self, parent: Any) -> None:
        self._write(parent, gone=False)

    def _write(self, parent: Any, *, gone: bool) -> None:
        try:
            queues = [queue.name for queue in parent.task_consumer.queues]
        except AttributeError:  # not consuming yet, or already torn down
            return
        try:
            consumers_beat(queues=queues, worker=parent.hostname, gone=gone)
        except Exception:
            logger.warning("queue heartbeat: cannot write to Redis", exc_info=True)
