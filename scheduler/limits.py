"""Fair share per owner (issue 18): rates, quotas and the customer priority band.

- **Rates** (`rate_take`): every path that creates work takes a token from its scope's budget
  for the user - pages and API alike, one limiter. A GCRA (generic cell rate algorithm) in one
  Lua script on the shared Redis, timed by Redis's clock: a burst of N, then one every
  period / N; atomic, so concurrent web processes share the budget exactly. Scopes and rates:
  `settings.SAS_RATES` (read per call). Refused: `RateLimited` with the seconds to wait.
- **Quotas** (`quota_check_*`): how much unfinished work an owner may hold (active jobs, runs in
  flight, exports in flight), `settings.SAS_QUOTAS`. Counted inside the caller's transaction
  under a per-owner advisory lock (`pg_advisory_xact_lock`), held until the insert commits, so
  concurrent requests of one owner count one after another and cannot overshoot. Refused:
  `QuotaExceeded`.
- **Priority band**: customers set job priorities in [CUSTOMER_PRIORITY_MIN,
  CUSTOMER_PRIORITY_MAX], strictly below every system priority (orders, exports and reprices
  run at 0, webhook deliveries at -1); staff may set any SMALLINT in the admin.

Both refusals are `LimitExceeded`: the API's exception handler answers 429 (with Retry-After
for a rate), the pages show the message on the form. Nothing is written before they are raised.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass

import redis
from django.conf import settings
from django.db import connection, models

from sasproject.redis_client import get_redis
from scheduler.models import Job, Run

logger = logging.getLogger(__name__)

# The priority scale (higher runs first). System work: orders, exports, reprices at
# SYSTEM_PRIORITY; webhook deliveries one below (webhooks.services.DELIVERY_PRIORITY). Customers'
# jobs live in a band strictly below both; staff may use the whole SMALLINT range in the admin.
SYSTEM_PRIORITY = 0
CUSTOMER_PRIORITY_MAX = -10
CUSTOMER_PRIORITY_MIN = -1000
CUSTOMER_PRIORITY_DEFAULT = CUSTOMER_PRIORITY_MAX
STAFF_PRIORITY_MIN, STAFF_PRIORITY_MAX = -32768, 32767

# What each rate scope counts, for the refusal's message.
RATE_LABELS = {
    "order_submit": "orders placed",
    "job_write": "job changes (create, edit, run now, backfill)",
    "export": "exports requested",
    "reprice": "reprices requested",
}
QUOTA_LABELS = {
    "ACTIVE_JOBS": "active jobs (not finished: enabled or paused)",
    "RUNS_IN_FLIGHT": "runs in flight (pending or running)",
    "EXPORTS_IN_FLIGHT": "exports in flight",
}
# pg_advisory_xact_lock(class, owner): the class keeps these locks apart from any other use.
QUOTA_LOCK_CLASS = 18_003
RUN_IN_FLIGHT_STATES = (Run.State.PENDING, Run.State.RUNNING)

_PERIODS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}
_PERIODS.update(d=86400, day=86400)


class LimitExceeded(Exception):
    """A limit refused the request; `message` names it. `retry_after`: seconds, when waiting helps."""

    def __init__(self, message: str, *, limit: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message, self.limit, self.retry_after = message, limit, retry_after


class RateLimited(LimitExceeded):
    """Over a rate scope's budget (SAS_RATES)."""


class QuotaExceeded(LimitExceeded):
    """At a per-owner quota (SAS_QUOTAS)."""


@dataclass(frozen=True)
class Rate:
    count: int
    period: int  # seconds

    @property
    def text(self) -> str:
        unit = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}[self.period]
        return f"{self.count} per {unit}"


def rate_parse(text: str) -> Rate:
    """DRF's rate syntax, "N/unit" (second, minute, hour, day or their first letter)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*([a-z]+)\s*", text.lower())
    if not match or match.group(2) not in _PERIODS or int(match.group(1)) < 1:
        raise ValueError(f"not a rate: {text!r} (N/second, N/minute, N/hour or N/day)")
    return Rate(int(match.group(1)), _PERIODS[match.group(2)])


def rate_of(scope: str) -> Rate:
    """The scope's rate from settings.SAS_RATES (empty: settings.SAS_SUBMIT_RATE)."""
    text = getattr(settings, "SAS_RATES", {}).get(scope) or settings.SAS_SUBMIT_RATE
    return rate_parse(str(text))


# GCRA: the key holds the theoretical arrival time (ms, Redis clock). A request is allowed when
# TAT + interval - period <= now; then TAT moves on by one interval. Returns 0, or ms to wait.
_GCRA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local new_tat = tat + tonumber(ARGV[1])
local allow_at = new_tat - tonumber(ARGV[2])
if allow_at > now then return allow_at - now end
redis.call('SET', KEYS[1], tostring(new_tat), 'PX', math.max(1, new_tat - now))
return 0
"""
_scripts: dict[int, object] = {}


def rate_take(*, scope: str, owner_id: int) -> None:
    """Take one request from `owner_id`'s budget in `scope`, or raise RateLimited (naming the
    rate, with the seconds to wait). Redis unreachable: allowed, and logged (like the breaker,
    the limiter fails open rather than take the site down with it). Writes only its Redis key."""
    rate = rate_of(scope)
    period_ms = rate.period * 1000
    client = get_redis()
    script = _scripts.get(id(client))
    if script is None:
        script = _scripts[id(client)] = client.register_script(_GCRA)
    key = f"{settings.REDIS_PREFIX}sas:rate:{scope}:{owner_id}"
    try:
        wait_ms = int(script(keys=[key], args=[period_ms / rate.count, period_ms]))  # type: ignore[operator]
    except redis.RedisError:
        logger.warning("rate limiter: Redis unreachable; %s of user %s let through", scope, owner_id)
        return
    if wait_ms > 0:
        wait = max(1, math.ceil(wait_ms / 1000))
        raise RateLimited(
            f"Too many {RATE_LABELS.get(scope, scope)}: the limit is {rate.text} per user. "
            f"Try again in {wait} s.",
            limit=f"{scope} {rate.text}",
            retry_after=wait,
        )


# -- quotas ------------------------------------------------------------------------------------


def quota_of(name: str) -> int:
    """settings.SAS_QUOTAS[name]; 0 means no limit."""
    return int(getattr(settings, "SAS_QUOTAS", {}).get(name, 0) or 0)


def quota_lock(*, owner_id: int) -> None:
    """Serialise `owner_id`'s quota checks until the caller's transaction ends (an advisory
    lock: no row is locked, other owners never wait). Must run inside a transaction."""
    if not connection.in_atomic_block:
        raise RuntimeError("a quota check must run inside the transaction that writes the work")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [QUOTA_LOCK_CLASS, owner_id])


def quota_check(*, name: str, owner_id: int, count: int, adding: int = 1) -> None:
    """Raise QuotaExceeded when `count` (what the owner holds now, read under `quota_lock`) plus
    `adding` would pass the quota `name`."""
    limit = quota_of(name)
    if limit and count + adding > limit:
        label = QUOTA_LABELS.get(name, name)
        raise QuotaExceeded(
            f"You have {count} {label}; the limit is {limit} per user. "
            + ("Wait for some to finish." if name != "ACTIVE_JOBS" else "Delete or finish some first."),
            limit=f"{name.lower()} {limit}",
        )


def quota_check_runs(*, owner_id: int, adding: int = 1) -> None:
    """Runs in flight: `owner_id`'s Pending and Running runs (partial index
    run_owner_in_flight_idx) plus `adding` within SAS_QUOTAS["RUNS_IN_FLIGHT"]. Locks the owner's
    quota until the caller's transaction ends."""
    if not quota_of("RUNS_IN_FLIGHT"):
        return
    quota_lock(owner_id=owner_id)
    count = Run.objects.filter(owner_id=owner_id, state__in=RUN_IN_FLIGHT_STATES).count()
    quota_check(name="RUNS_IN_FLIGHT", owner_id=owner_id, count=count, adding=adding)


def quota_check_active_jobs(*, owner_id: int, adding: int = 1) -> None:
    """Active jobs: `owner_id`'s jobs not finished (enabled or paused: a paused job can be
    resumed without asking) plus `adding` within SAS_QUOTAS["ACTIVE_JOBS"]. Locks as above."""
    if not quota_of("ACTIVE_JOBS"):
        return
    quota_lock(owner_id=owner_id)
    count = Job.objects.filter(owner_id=owner_id, finished_at__isnull=True).count()
    quota_check(name="ACTIVE_JOBS", owner_id=owner_id, count=count, adding=adding)


def quota_check_workflow_runs(*, owner_id: int, workflow: str, name: str, adding: int = 1) -> None:
    """`owner_id`'s runs in flight of one workflow (exports: EXPORTS_IN_FLIGHT) plus `adding`
    within SAS_QUOTAS[name]. Locks as above."""
    if not quota_of(name):
        return
    quota_lock(owner_id=owner_id)
    count = Run.objects.filter(owner_id=owner_id, state__in=RUN_IN_FLIGHT_STATES, workflow=workflow).count()
    quota_check(name=name, owner_id=owner_id, count=count, adding=adding)


def runs_in_flight_by_owner(*, owner_ids: list[int]) -> dict[int, int]:
    """Pending and Running runs per owner, for the jobs dispatcher's batch (one grouped query on
    run_owner_in_flight_idx). No lock: the dispatcher is the only writer that does not take one,
    so it may overshoot by one batch at most."""
    if not owner_ids:
        return {}
    rows = (
        Run.objects.filter(owner_id__in=owner_ids, state__in=RUN_IN_FLIGHT_STATES)
        .values("owner_id")
        .annotate(n=models.Count("id"))
    )
    return {row["owner_id"]: row["n"] for row in rows}
