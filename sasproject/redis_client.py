"""One Redis client per process and URL, for the engine's own keys (breakers, counters)."""

from __future__ import annotations

import threading

import redis
from django.conf import settings

_lock = threading.Lock()
_clients: dict[str, redis.Redis] = {}


def get_redis(url: str | None = None) -> redis.Redis:
    """Short socket timeouts: a Redis hiccup must not stall an agent past its step deadline."""
    url = url or settings.SAS["BREAKER_REDIS_URL"]
    with _lock:
        client = _clients.get(url)
        if client is None:
            client = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
            _clients[url] = client
        return client
