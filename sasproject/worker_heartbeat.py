"""Consumers alive per queue: each worker says so in Redis every few seconds.

A worker's consumer (a Celery bootstep, added in sasproject/celery.py) writes its node name
into one sorted set per queue it consumes, scored with the time, every
SAS_MONITORING["CONSUMER_HEARTBEAT"] seconds, from its event loop's timer. A worker that is
frozen (SIGSTOP), killed or cut off from Redis stops writing; readers count only entries newer
than CONSUMER_STALE seconds (ops/queues.py: the engine-health page, /metrics). A clean shutdown
removes its entries at once.

Why not `celery inspect active_queues`: it broadcasts over the broker and waits for replies up
to its timeout (1 s) on every read, for every page view and every scrape, and a frozen worker
is simply missing from the replies - indistinguishable from a slow one until the timeout. The
heartbeat costs each worker one pipelined Redis write per period (bench/README.md, "Metrics").

Written to REDIS_URL's Redis (the engine's own keys, as breakers), whatever the broker is.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from celery import bootsteps
from django.conf import settings

logger = logging.getLogger(__name__)


def consumers_key(queue: str) -> str:
    return f"{settings.REDIS_PREFIX}sas:consumers:{queue}"


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
        self._write(parent, remove=True)

    def shutdown(self, parent: Any) -> None:
        self.stop(parent)

    def beat(self, parent: Any) -> None:
        self._write(parent, remove=False)

    def _write(self, parent: Any, *, remove: bool) -> None:
        from sasproject.redis_client import get_redis

        try:
            queues = [queue.name for queue in parent.task_consumer.queues]
        except AttributeError:  # not consuming yet, or already torn down
            return
        now = time.time()
        stale = now - float(settings.SAS_MONITORING["CONSUMER_STALE"]) * 4
        try:
            pipe = get_redis().pipeline(transaction=False)
            for queue in queues:
                key = consumers_key(queue)
                if remove:
                    pipe.zrem(key, parent.hostname)
                else:
                    pipe.zadd(key, {parent.hostname: now})
                    # Entries of workers long gone (renamed hosts) do not pile up.
                    pipe.zremrangebyscore(key, "-inf", stale)
            pipe.execute()
        except Exception:
            logger.warning("queue heartbeat: cannot write to Redis", exc_info=True)
