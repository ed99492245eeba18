"""A circuit breaker per remote service, shared by every worker process through Redis.

States: closed (calls flow; consecutive failures are counted), open (calls fail fast until
`reset_timeout` has passed), half-open (exactly one probe call is let through; its success closes
the breaker, its failure opens it again). Every transition is one Lua script, so concurrent
workers agree, and time comes from Redis's clock (`TIME`), so workers' clocks do not matter.

If Redis itself cannot be reached the breaker fails open (lets calls through) and logs: losing
the breaker must not stop work that the remote service could still do.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from django.conf import settings

from sasproject.redis_client import get_redis
from scheduler.attempts import StartMark

logger = logging.getLogger(__name__)

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

# KEYS[1] = breaker hash. ARGV[1] = probe timeout. Returns {allowed (0/1), state, retry_after
# [, failures]} where retry_after (a string, seconds) says when a call may be let through again,
# and failures (closed only) the consecutive failures counted so far. With KEYS[2] (a marker key,
# an attempt's start mark) and ARGV[3] (its TTL in ms), the marker is set first, in the same
# round trip.
_ALLOW = """
if KEYS[2] then redis.call('SET', KEYS[2], '1', 'PX', ARGV[3]) end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'
if state == 'closed' then
  local failures = redis.call('HGET', KEYS[1], 'failures') or '0'
  return {1, state, '0', failures}
end
if state == 'open' then
  local until_ = tonumber(redis.call('HGET', KEYS[1], 'open_until') or '0')
  if now < until_ then return {0, state, tostring(until_ - now)} end
  redis.call('HSET', KEYS[1], 'state', 'half_open', 'probe_until', tostring(now + tonumber(ARGV[1])))
  return {1, 'half_open', '0'}
end
-- half_open: one probe at a time; a probe that never reported (worker died) expires.
local probe_until = tonumber(redis.call('HGET', KEYS[1], 'probe_until') or '0')
if now >= probe_until then
  redis.call('HSET', KEYS[1], 'probe_until', tostring(now + tonumber(ARGV[1])))
  return {1, 'half_open', '0'}
end
return {0, 'half_open', tostring(math.min(probe_until - now, tonumber(ARGV[2])))}
"""

# ARGV[1] = failure threshold, ARGV[2] = reset timeout (s). Returns the new state.
_FAILURE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'
if state == 'half_open' then
  redis.call('HSET', KEYS[1], 'state', 'open', 'open_until', tostring(now + tonumber(ARGV[2])), 'failures', 0)
  redis.call('HINCRBY', KEYS[1], 'opened', 1)
  return 'open'
end
if state == 'open' then return 'open' end
local failures = redis.call('HINCRBY', KEYS[1], 'failures', 1)
-- Held closed by an operator until a time: failures are counted but do not open it.
local held = tonumber(redis.call('HGET', KEYS[1], 'held_closed_until') or '0')
if failures >= tonumber(ARGV[1]) and now >= held then
  redis.call('HSET', KEYS[1], 'state', 'open', 'open_until', tostring(now + tonumber(ARGV[2])), 'failures', 0)
  redis.call('HINCRBY', KEYS[1], 'opened', 1)
  return 'open'
end
return 'closed'
"""

# An operator's hand (ARGV[1] = "open" or "closed", ARGV[2] = seconds it lasts, ARGV[3] = who).
# Open: fail fast until then, then the usual half-open probe. Closed: calls flow and failures do
# not open it until then. Returns the state set.
_FORCE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local until_ = tostring(now + tonumber(ARGV[2]))
if ARGV[1] == 'open' then
  redis.call('HSET', KEYS[1], 'state', 'open', 'open_until', until_, 'failures', 0, 'held_closed_until', 0,
             'by_hand', ARGV[3])
  redis.call('HINCRBY', KEYS[1], 'opened', 1)
else
  redis.call('HSET', KEYS[1], 'state', 'closed', 'failures', 0, 'open_until', 0, 'held_closed_until', until_,
             'by_hand', ARGV[3])
end
return ARGV[1]
"""

_SUCCESS = """
local state = redis.call('HGET', KEYS[1], 'state') or 'closed'
if state ~= 'closed' or redis.call('HGET', KEYS[1], 'failures') ~= '0' then
  redis.call('HSET', KEYS[1], 'state', 'closed', 'failures', 0)
end
return state
"""


def _redis() -> redis.Redis:
    return get_redis()


_scripts: dict[tuple[int, str], Any] = {}


def _script(source: str) -> Any:
    """The script bound to this process's client, made once (a call runs EVALSHA; the body is
    sent only if Redis lacks it). Keyed by the client too: a cached script keeps its client
    alive, so a new client (after a fork) never takes an old one's id."""
    client = _redis()
    key = (id(client), source)
    script = _scripts.get(key)
    if script is None:
        script = _scripts[key] = client.register_script(source)
    return script


@dataclass(frozen=True)
class Decision:
    allowed: bool
    state: str
    # When refused: seconds until the breaker may let a call through again.
    retry_after: float = 0.0
    # Closed with no failures counted: a success has nothing to reset, so the caller may skip
    # `record_success` (one Redis round trip per call saved). A failure another worker records
    # in between is then not reset by this success - the breaker errs towards opening sooner.
    clean: bool = False


class CircuitBreaker:
    def __init__(
        self,
        service: str,
        *,
        failure_threshold: int | None = None,
        reset_timeout: float | None = None,
        probe_timeout: float = 30.0,
    ) -> None:
        self.service = service
        self.key = f"{settings.REDIS_PREFIX}sas:breaker:{service}"
        self.failure_threshold = failure_threshold or settings.SAS["BREAKER_FAILURE_THRESHOLD"]
        self.reset_timeout = reset_timeout or settings.SAS["BREAKER_RESET_TIMEOUT"]
        self.probe_timeout = probe_timeout

    def _eval(self, script: str, *args: Any, extra_keys: Sequence[str] = ()) -> Any:
        return _script(script)(keys=[self.key, *extra_keys], args=list(args))

    def allow(self, *, mark: StartMark | None = None) -> Decision:
        """May a call go through now? With `mark`, the attempt's start mark is set in the same
        round trip (an agent's first check: one Redis round trip per step, not two)."""
        try:
            if mark is None:
                reply = self._eval(_ALLOW, self.probe_timeout, self.reset_timeout)
            else:
                reply = self._eval(
                    _ALLOW, self.probe_timeout, self.reset_timeout, mark.ttl_ms, extra_keys=[mark.key]
                )
        except redis.RedisError:
            logger.warning("breaker %s: Redis unreachable, failing open", self.service, exc_info=True)
            if mark is not None:
                logger.warning("could not mark attempt %s started (Redis)", mark.key)
            return Decision(True, CLOSED)
        allowed, state, retry_after = reply[:3]
        state = state.decode() if isinstance(state, bytes) else str(state)
        clean = state == CLOSED and len(reply) > 3 and int(reply[3]) == 0
        return Decision(bool(allowed), state, max(0.0, float(retry_after)), clean=clean)

    def record_failure(self) -> str:
        try:
            state = self._eval(_FAILURE, self.failure_threshold, self.reset_timeout)
        except redis.RedisError:
            logger.warning("breaker %s: Redis unreachable, failure not counted", self.service)
            return CLOSED
        state = state.decode() if isinstance(state, bytes) else str(state)
        if state == OPEN:
            logger.warning("breaker %s is open: failing fast for %.1fs", self.service, self.reset_timeout)
        return state

    def record_success(self) -> None:
        try:
            previous = self._eval(_SUCCESS)
        except redis.RedisError:
            return
        previous = previous.decode() if isinstance(previous, bytes) else str(previous)
        if previous != CLOSED:
            logger.warning("breaker %s closed again (was %s)", self.service, previous)

    def snapshot(self) -> dict[str, str]:
        """Current state for admin/metrics: state, failures, open_until, opened (count)."""
        raw: dict[bytes, bytes] = _redis().hgetall(self.key)  # type: ignore[assignment]
        data = {k.decode(): v.decode() for k, v in raw.items()}
        data.setdefault("state", CLOSED)
        return data

    def reset(self) -> None:
        _redis().delete(self.key)

    def force(self, *, state: str, seconds: float, by: str) -> None:
        """An operator's hand: open (fail fast) or closed (failures do not open it) for
        `seconds`, then the breaker's own rules again. Raises redis.RedisError (the operator
        must know it did not take)."""
        if state not in (OPEN, CLOSED):
            raise ValueError("state must be open or closed")
        self._eval(_FORCE, state, float(seconds), by)


class NoBreaker:
    """For an agent whose work is no remote service (a schedulable task run in-process): every
    call is let through and nothing is counted."""

    def allow(self, *, mark: StartMark | None = None) -> Decision:
        if mark is not None:
            mark.set()
        return Decision(True, CLOSED, clean=True)

    def record_failure(self) -> str:
        return CLOSED

    def record_success(self) -> None:
        return None
