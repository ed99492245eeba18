"""The engine's counters and histograms, kept in Redis where every process can add to them.

Step attempts happen in agent processes on any host, sweeps in the control worker, scrapes in
a web process: a counter in one process's memory (prometheus_client's default) would be one of
many, and its multiprocess mode shares files on one host only. So each event is added once to a
Redis hash (HINCRBY is atomic across processes and hosts) by the process where it happens, in
one pipelined round trip, and /metrics (ops/metrics.py) reads the hashes at scrape time. What
the database already knows (runs, steps, alerts, jobs) is read from it there instead.
docs/decisions.md, "Metrics read at scrape time", says why and what it costs.

Writes are best effort: a Redis error is logged and the event is not counted (a metric must
never fail a step). Counters reset if Redis loses its data; Prometheus' rate() handles resets.

Layout (`<prefix>` is SAS_REDIS_PREFIX):
- `<prefix>sas:metrics:attempts` - hash: `o|<operation>|<outcome>` attempts by outcome;
  `l|<operation>|<i>` / `q|<operation>|<i>` step latency / schedule-to-start observations in
  bucket i of LATENCY_BUCKETS (non-cumulative; i = len(buckets) is +Inf); `ls|<operation>` /
  `qs|<operation>` their sums in seconds.
- `<prefix>sas:metrics:refused` - hash: `<operation>|<reason>` agent requests refused before
  any remote call (issue 26): `not_held` (no step of that operation is Processing under the
  request's lease - forged, replayed, or its run cancelled or deleted), `malformed`.
- `<prefix>sas:metrics:supervisor` - hash: `retried`, `errored`, `requeued` recoveries.

The periodic tasks' last runs are liveness/last_run.py's; moved here from scheduler/metrics.py
(issue 27) so the engine, /metrics and alerting read one low room.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Mapping

from django.conf import settings

from sasproject.redis_client import get_redis

logger = logging.getLogger(__name__)

# Seconds. An attempt's time at work spans a few ms (a local service) to its window (10-40 s).
LATENCY_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

# What an agent's attempt ended as: its reply's outcome, or why it sent none.
ATTEMPT_OUTCOMES: tuple[str, ...] = (
    "success",
    "permanent",
    "transient",
    "deferred",
    "continue",
    "deadline",
    "dropped",
    "lease_lost",
)


def attempts_key() -> str:
    return f"{settings.REDIS_PREFIX}sas:metrics:attempts"


def refused_key() -> str:
    return f"{settings.REDIS_PREFIX}sas:metrics:refused"


# Why an agent refused a request without calling anything (agents/base.py).
REFUSED_REASONS: tuple[str, ...] = ("not_held", "malformed")


def supervisor_key() -> str:
    return f"{settings.REDIS_PREFIX}sas:metrics:supervisor"


def _enabled() -> bool:
    return bool(settings.SAS_MONITORING["METRICS"])


def bucket_index(seconds: float) -> int:
    """The bucket an observation falls in: the first upper bound >= seconds (len: +Inf)."""
    return bisect.bisect_left(LATENCY_BUCKETS, seconds)


def attempt_observe(*, operation: str, outcome: str, seconds: float, queued: float | None) -> None:
    """Count one agent attempt of `operation`: its outcome, its time at work (`seconds`) and,
    when the request came through the broker, its time in the queue (`queued`, publish to
    start). One pipelined round trip."""
    if not _enabled():
        return
    key = attempts_key()
    try:
        pipe = get_redis().pipeline(transaction=False)
        pipe.hincrby(key, f"o|{operation}|{outcome}", 1)
        pipe.hincrby(key, f"l|{operation}|{bucket_index(seconds)}", 1)
        pipe.hincrbyfloat(key, f"ls|{operation}", seconds)
        if queued is not None:
            queued = max(0.0, queued)
            pipe.hincrby(key, f"q|{operation}|{bucket_index(queued)}", 1)
            pipe.hincrbyfloat(key, f"qs|{operation}", queued)
        pipe.execute()
    except Exception:
        logger.warning("metrics: could not count an attempt of %s (Redis)", operation, exc_info=True)


def agent_request_refused(*, operation: str, reason: str) -> None:
    """Count one agent request refused before any remote call (`REFUSED_REASONS`). Counted even
    with SAS_METRICS off: it is a security signal (a forged message, a replay), not a rate.
    `operation` is the agent's registered task name, never the message's: bounded."""
    try:
        get_redis().hincrby(refused_key(), f"{operation}|{reason}", 1)
    except Exception:
        logger.warning("metrics: could not count a refused request of %s (Redis)", operation, exc_info=True)


def supervisor_recoveries_add(counts: Mapping[str, int]) -> None:
    """Add a sweep's recoveries (steps sent back to Pending, marked Error, requeued)."""
    if not _enabled() or not any(counts.values()):
        return
    try:
        pipe = get_redis().pipeline(transaction=False)
        for name, count in counts.items():
            if count:
                pipe.hincrby(supervisor_key(), name, int(count))
        pipe.execute()
    except Exception:
        logger.warning("metrics: could not count the sweep's recoveries (Redis)", exc_info=True)
