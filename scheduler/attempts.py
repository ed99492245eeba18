"""Started attempts, marked in Redis: time in the queue is not time at work.

An agent marks the attempt it starts (its lease) with one Redis SET, so the hot path gains no
database round trip. The supervisor reads the marks of attempts whose start_by has passed: a
marked one is at work (only complete_by bounds it now), an unmarked one never left the queue
and is dispatched again with no failure counted. If Redis cannot be read, every attempt counts
as started - the conservative reading: it is then judged at complete_by, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings

from sasproject.redis_client import get_redis

logger = logging.getLogger(__name__)


def _key(lease: str) -> str:
    return f"{settings.REDIS_PREFIX}sas:started:{lease}"


@dataclass(frozen=True)
class StartMark:
    """An attempt's start mark: its Redis key and time to live. An agent sets it in the round
    trip of its first breaker check (`CircuitBreaker.allow(mark=...)`), or on its own (`set`)."""

    key: str
    ttl_ms: int

    def set(self) -> None:
        """Best effort: a lost mark only makes the supervisor send the step again (idempotent)."""
        try:
            get_redis().set(self.key, "1", px=self.ttl_ms)
        except Exception:
            logger.warning("could not mark attempt %s started (Redis)", self.key, exc_info=True)


def attempt_start_mark(*, lease: str, ttl_seconds: float) -> StartMark:
    """The mark of the attempt holding `lease`, kept `ttl_seconds` (at least 1 s)."""
    return StartMark(key=_key(lease), ttl_ms=max(1000, int(ttl_seconds * 1000)))


def attempt_mark_started(*, lease: str, ttl_seconds: float) -> None:
    """Set the attempt's start mark now (best effort, see `StartMark.set`)."""
    attempt_start_mark(lease=lease, ttl_seconds=ttl_seconds).set()


def attempts_started(*, leases: Sequence[str]) -> set[str] | None:
    """The leases among `leases` whose agent has started; None if Redis cannot be read."""
    if not leases:
        return set()
    try:
        marks = get_redis().mget([_key(lease) for lease in leases])
    except Exception:
        logger.warning("could not read started attempts (Redis); treating them as started", exc_info=True)
        return None
    return {lease for lease, mark in zip(leases, marks, strict=True) if mark is not None}
