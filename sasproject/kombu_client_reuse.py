"""Reuse one Redis client per kombu channel for its synchronous commands (kombu 5.x).

kombu's Redis channel builds a new `redis.Redis` client object for every synchronous command
it sends through `conn_or_acquire()`: every publish (LPUSH), every acknowledgement (the QoS
pipeline), every restore. The client object is only a handle on the channel's connection pool
- the sockets are pooled either way - but building one costs ~0.15 ms of CPU in redis-py 5
(measured with cProfile: 0.17 of send_task's 0.46 ms; `bench/README.md`, issue 6). An engine
step pays it on its publish and again on its ack.

The patch keeps the first client built for the channel's current pool and hands it out again.
A `redis.Redis` client with a given pool is safe to share between threads (each command takes
a connection from the pool). A channel whose pool is replaced (kombu drops it on close and
after a connection error) gets a new client for the new pool. The asynchronous client (BRPOP,
the consumer's) is kombu's own `Channel.client` and is not touched.

A channel whose connection is gone (the broker went away, the worker reconnected on a new one)
and whose pool was dropped has nothing to build a pool from: kombu failed there with
AttributeError ('NoneType' object has no attribute 'hostname'), which Celery does not expect from
an ack - a threads-pool agent whose task ended after the reconnect took its whole worker down
("Unrecoverable error"; found by the chaos soak's Redis restart, issue 22). That is raised as a
ConnectionError now, one of the transport's connection errors: Celery logs "Couldn't ack" and
goes on (the message is redelivered by the broker, or its step taken back by the supervisor).
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis

_Channel: Any = kombu_redis.Channel
_original = _Channel._create_client
_CACHE = "_sas_sync_client"


def _create_client(self: Any, asynchronous: bool = False) -> Any:
    if asynchronous:
        return _original(self, asynchronous=True)
    if self._pool is None and getattr(self.connection, "client", None) is None:
        raise ConnectionError("the broker connection of this channel is closed (the worker reconnected)")
    pool = self.pool
    cached = self.__dict__.get(_CACHE)
    if cached is not None and cached[0] is pool:
        return cached[1]
    client = _original(self, asynchronous=False)
    self.__dict__[_CACHE] = (pool, client)
    return client


def redis_client_reuse_install() -> None:
    """Idempotent: patch `kombu.transport.redis.Channel._create_client` once."""
    if _Channel._create_client is not _create_client:
        _Channel._create_client = _create_client
