"""How many messages wait in a Celery queue, read from the broker - the one reader of queue
depth, whichever the broker (issue 27): the engine-health page and /metrics (`queue_statuses`,
below) and the alert rule "a queue with work and no consumer"
(alerting/platform_conditions.py) call it.

- Redis: LLEN of each queue's lists, its priority sub-queues included, under the broker's
  global key prefix (one pipeline); with `oldest`, the age of each list's tail message too.
- RabbitMQ: a passive queue_declare per queue (message_count: the ready messages, not the
  unacked ones; no age - AMQP cannot peek without consuming). A queue not declared yet has none.

Any failure (broker down, another scheme) raises `BrokerUnreadable`, one type the callers catch.

`queue_statuses` is the queues as an operator sees them: depth, oldest message and consumers
alive (liveness/heartbeat.py) of every engine queue, for the engine-health page and /metrics.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from sasproject.redis_client import get_redis

from .heartbeat import consumers_alive

logger = logging.getLogger(__name__)

# kombu's Redis transport keeps a queue's messages of priority p > 0 in the list
# "<queue><sep><p>"; priority 0 in "<queue>" itself.
# https://docs.celeryq.dev/projects/kombu/en/stable/reference/kombu.transport.redis.html
DEFAULT_PRIORITY_STEPS: tuple[int, ...] = (0, 3, 6, 9)
DEFAULT_SEP = "\x06\x16"
REDIS_SCHEMES = ("redis", "rediss")
AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")

# (depth, seconds since the oldest waiting message was published - None when unknown)
Depths = dict[str, tuple[int, float | None]]


class BrokerUnreadable(Exception):
    """The queues' depths could not be read from the broker (the cause is chained)."""


def _sent_at(raw: bytes | None) -> float | None:
    if not raw:
        return None
    try:
        value = json.loads(raw).get("headers", {}).get("sas_sent_at")
    except (ValueError, AttributeError):
        return None
    return float(value) if value is not None else None


def _redis_depths(names: Sequence[str], *, oldest: bool) -> Depths:
    options: dict[str, Any] = dict(settings.CELERY_BROKER_TRANSPORT_OPTIONS)
    prefix = str(options.get("global_keyprefix", ""))
    steps = tuple(options.get("priority_steps", DEFAULT_PRIORITY_STEPS))
    sep = str(options.get("sep", DEFAULT_SEP))
    client = get_redis(settings.CELERY_BROKER_URL)
    keys = {name: [prefix + (f"{name}{sep}{p}" if p else name) for p in steps] for name in names}
    pipe = client.pipeline(transaction=False)
    for name in names:
        for key in keys[name]:
            pipe.llen(key)
            if oldest:
                # LPUSH to publish, BRPOP to consume: the oldest message is the list's tail.
                pipe.lindex(key, -1)
    replies = iter(pipe.execute())
    now = time.time()
    result: Depths = {}
    for name in names:
        depth = 0
        first: float | None = None
        for _key in keys[name]:
            depth += int(next(replies))
            if oldest:
                sent = _sent_at(next(replies))
                if sent is not None and (first is None or sent < first):
                    first = sent
        result[name] = (depth, now - first if first is not None else None)
    return result


def _amqp_depths(names: Sequence[str]) -> Depths:
    from kombu import Connection

    result: Depths = {}
    with Connection(settings.CELERY_BROKER_URL, connect_timeout=2) as conn:
        conn.ensure_connection(max_retries=1)
        for name in names:
            channel: Any = conn.channel()
            try:
                declared = channel.queue_declare(queue=name, passive=True)
                result[name] = (int(declared.message_count), None)
            except Exception as exc:  # NOT_FOUND closes the channel
                if "NOT_FOUND" not in str(exc) and "404" not in str(exc):
                    raise
                result[name] = (0, None)
            finally:
                try:
                    channel.close()
                except Exception:
                    logger.debug("channel already closed", exc_info=True)
    return result


def queue_depths(*, names: Sequence[str], oldest: bool = False) -> Depths:
    """Depth (and, on Redis with `oldest`, oldest message age) of each of `names`, read from
    CELERY_BROKER_URL. Raises BrokerUnreadable when it cannot."""
    scheme = settings.CELERY_BROKER_URL.split("://", 1)[0]
    if scheme not in REDIS_SCHEMES + AMQP_SCHEMES:
        raise BrokerUnreadable(f"queue depth is not read from a {scheme} broker")
    if not names:
        return {}
    try:
        if scheme in REDIS_SCHEMES:
            return _redis_depths(names, oldest=oldest)
        return _amqp_depths(names)
    except Exception as exc:  # redis, kombu, amqp and socket errors alike: one type for callers
        raise BrokerUnreadable(f"broker unreachable: {exc.__class__.__name__}") from exc


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


def queue_statuses(*, oldest: bool = True) -> list[QueueStatus]:
    """Depth, oldest message age and live consumers of every engine queue. Never raises: an
    unreadable broker leaves depth None (with the error), unreadable heartbeats count 0."""
    names = queue_names()
    try:
        consumers = consumers_alive(queues=names)
    except Exception:
        logger.warning("cannot read the consumers' heartbeats (Redis)", exc_info=True)
        consumers = dict.fromkeys(names, 0)
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
