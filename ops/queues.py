"""The Celery queues as an operator sees them: depth, oldest message, consumers alive.

Read from the broker at request time through the one queue-depth reader,
sasproject/broker_queues.py (Redis or RabbitMQ), and from the workers' heartbeats in Redis
(sasproject/worker_heartbeat.py).
Used by the engine-health page and /metrics; a few pipelined commands, no scans.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from django.conf import settings

from sasproject.broker_queues import BrokerUnreadable, queue_depths
from sasproject.redis_client import get_redis
from sasproject.worker_heartbeat import consumers_key

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueStatus:
    name: str
    depth: int | None  # None: the broker could not be read
    oldest_age: float | None  # seconds since the oldest waiting message was published
    consumers: int  # workers heard from within CONSUMER_STALE seconds
    error: str = ""

    @property
    def stalled(self) -> bool:
        """Work waits and nobody consumes it: the health page shows the row red."""
        return bool(self.depth) and self.consumers == 0


def queue_names() -> list[str]:
    """Every queue the engine routes to (settings.SAS_QUEUES = CELERY_TASK_QUEUES)."""
    return list(settings.SAS_QUEUES)


def consumers_alive(names: list[str]) -> dict[str, int]:
    """How many workers consumed each queue within CONSUMER_STALE seconds (Redis heartbeats)."""
    since = time.time() - float(settings.SAS_MONITORING["CONSUMER_STALE"])
    try:
        pipe = get_redis().pipeline(transaction=False)
        for name in names:
            pipe.zcount(consumers_key(name), since, "+inf")
        return {name: int(count) for name, count in zip(names, pipe.execute(), strict=True)}
    except Exception:
        logger.warning("cannot read the consumers' heartbeats (Redis)", exc_info=True)
        return dict.fromkeys(names, 0)


def queue_statuses(*, oldest: bool = True) -> list[QueueStatus]:
    """Depth, oldest message age and live consumers of every engine queue."""
    names = queue_names()
    consumers = consumers_alive(names)
    error = ""
    try:
        depths = queue_depths(names=names, oldest=oldest)
    except BrokerUnreadable as exc:
        logger.warning("cannot read the queues from the broker", exc_info=True)
        depths, error = {}, str(exc)
    statuses = []
    for name in names:
        depth, age = depths.get(name, (None, None))
        statuses.append(QueueStatus(name, depth, age, consumers.get(name, 0), error))
    return statuses
