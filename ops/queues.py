"""The Celery queues as an operator sees them: depth, oldest message, consumers alive.

Read from the broker at request time - Redis (LLEN of each queue's keys, its priority
sub-queues included, under the broker's global key prefix) or RabbitMQ (a passive
queue_declare) - and from the workers' heartbeats in Redis (sasproject/worker_heartbeat.py).
Used by the engine-health page and /metrics; a few pipelined commands, no scans.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from sasproject.redis_client import get_redis
from sasproject.worker_heartbeat import consumers_key

logger = logging.getLogger(__name__)

# kombu's Redis transport keeps a queue's messages of priority p > 0 in the list
# "<queue><sep><p>"; priority 0 in "<queue>" itself.
# https://docs.celeryq.dev/projects/kombu/en/stable/reference/kombu.transport.redis.html
DEFAULT_PRIORITY_STEPS: tuple[int, ...] = (0, 3, 6, 9)
DEFAULT_SEP = "\x06\x16"


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


def _sent_at(raw: bytes | None) -> float | None:
    if not raw:
        return None
    try:
        value = json.loads(raw).get("headers", {}).get("sas_sent_at")
    except (ValueError, AttributeError):
        return None
    return float(value) if value is not None else None


def _redis_depths(names: list[str], *, oldest: bool) -> dict[str, tuple[int, float | None]]:
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
    result: dict[str, tuple[int, float | None]] = {}
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


def _amqp_depths(names: list[str]) -> dict[str, tuple[int, float | None]]:
    """RabbitMQ: a passive queue_declare per queue (message count; no age - AMQP cannot peek
    without consuming). A queue that does not exist yet has no messages."""
    from kombu import Connection

    result: dict[str, tuple[int, float | None]] = {}
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


def queue_statuses(*, oldest: bool = True) -> list[QueueStatus]:
    """Depth, oldest message age and live consumers of every engine queue."""
    names = queue_names()
    consumers = consumers_alive(names)
    scheme = settings.CELERY_BROKER_URL.split("://", 1)[0]
    error = ""
    try:
        if scheme in ("redis", "rediss"):
            depths = _redis_depths(names, oldest=oldest)
        elif scheme in ("amqp", "amqps", "pyamqp"):
            depths = _amqp_depths(names)
        else:
            depths = {}
            error = f"queue depth is not read from a {scheme} broker"
    except Exception as exc:
        logger.warning("cannot read the queues from the broker", exc_info=True)
        depths, error = {}, f"broker unreachable: {exc.__class__.__name__}"
    statuses = []
    for name in names:
        depth, age = depths.get(name, (None, None))
        statuses.append(QueueStatus(name, depth, age, consumers.get(name, 0), error))
    return statuses
