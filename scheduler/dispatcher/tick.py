"""The jobs dispatcher (seed 004's Scheduler Service): fires due occurrences, settles ended runs.

One tick (`jobs_dispatch`, run by celery beat through the `scheduler.jobs_dispatch` task):
1. in batches, one transaction each: claim due ScheduledJob rows with their jobs (SKIP LOCKED,
   database clock), decide each occurrence (overlap, misfire, catch-up, max firings), start the
   runs in bulk, write the next occurrence - and commit. A crash before commit leaves every row
   due and no run written; two dispatchers never hold the same row; a double firing is refused
   by the unique (job, scheduled_for, job_attempt) on runs;
2. settle the job runs that ended since the last tick (retry rows, the next buffered start),
   and fire what that made due.
The rules: `scheduler/jobs.md`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from celery import current_app
from django.conf import settings
from django.db import transaction

from sasproject.database import transaction_idle_limit
from sasproject.redis_client import get_redis
from scheduler.models import Job, Run, ScheduledJob

from . import transitions
from .dependents import dependents_settle
from .firing import FiringPlan, retry_delay

logger = logging.getLogger(__name__)

# Settle batches per tick (see jobs_dispatch).
SETTLE_BATCHES = 10

# Marker a test waits for (the dispatcher paused between claim and commit; see settings).
PAUSE_MARKER = "JOBS_DISPATCH_CLAIMED_PAUSING"
DEPENDENTS_PAUSE_MARKER = "JOBS_DISPATCH_DEPENDENTS_PAUSING"


@dataclass
class DispatchResult:
    claimed: int = 0
    # Rows the claim locked: `claimed`, and those whose job another held (left due).
    locked: int = 0
    started: int = 0
    skipped: int = 0
    buffered: int = 0
    # Occurrences queued due now (catch-up): started by the next batch of the same tick.
    queued: int = 0
    settled: int = 0
    retries: int = 0
    # Dependent runs queued by the settle (issue 30): children whose gate it completed.
    dependents: int = 0
    # Shards this tick held (each drained, then released); a batch that found its lease gone.
    shards: list[int] = field(default_factory=list)
    lost: bool = False
    # The firing ended with no shard left to take (every due row fired, or held by another).
    drained: bool = False
    # ANALYZEs of the hot tables this tick ran (`statistics_refresh`).
    analyzed: int = 0


def _pause_for_tests(setting: str = "JOBS_TEST_PAUSE_AFTER_CLAIM", marker: str = PAUSE_MARKER) -> None:
    """A test-only pause before a commit, so a test can kill the process there."""
    pause = float(settings.SAS.get(setting, 0) or 0)
    if pause > 0:
        logger.warning(marker)
        time.sleep(pause)


def jobs_dispatch_batch(
    *,
    instance: str,
    limit: int,
    held: Sequence[int] = (0,),
    shards: int = 1,
    lease: float | None = None,
) -> DispatchResult:
    """Claim up to `limit` due rows of the shards `held` and fire them, in one transaction (see
    the module doc). With `lease`: first renew `instance`'s leases on them for that many seconds;
    a lease that had ended (the shard may be another's now) fires nothing (`lost`)."""
    result = DispatchResult()
    with transaction.atomic():
        # Behind a pooler, the idle-in-transaction limit a cut-off dispatcher's row locks need
        # (sasproject/settings/base.py, DATABASE_IDLE_IN_TRANSACTION_TIMEOUT) is this transaction's.
        transaction_idle_limit()
        if lease is not None and not transitions.shard_lease_renew(held=held, holder=instance, lease=lease):
            result.lost = True
            return result
        claim = transitions.scheduled_claim_due(limit=limit, held=held, shards=shards)
        claimed = claim.rows
        result.locked = claim.locked
        if not claimed:
            return result
        _pause_for_tests()
        result.claimed = len(claimed)
        jobs = {row.job_id: row.job for row in claimed}
        plan = FiringPlan.load(jobs=jobs, now=claimed[0].now, instance=instance)
        for row in claimed:
            plan.due(row.job, row)
        result.queued = len(plan.queued)
        for firing in plan.apply():
            if firing.outcome == "started":
                result.started += 1
            elif firing.outcome == "buffered":
                result.buffered += 1
            else:
                result.skipped += 1
    return result


def job_runs_settle(*, limit: int, instance: str = "") -> DispatchResult:
    """Job runs that ended: close their attempt's history row; a run that ended Failed or
    Compensated below the job's max retry gets a retry row after its backoff; the job's oldest
    parked row becomes due (its turn has come); an occurrence that ended for good (no retry)
    reaches its dependents (`dependents_settle`: their runs queued, or a history row saying why
    not). One transaction; each run settled once (`job_settled`, SKIP LOCKED on the run and its
    job)."""
    result = DispatchResult()
    with transaction.atomic():
        transaction_idle_limit()  # as in jobs_dispatch_batch
        ended = transitions.job_runs_mark_settled(limit=limit)
        if not ended:
            return result
        result.settled = len(ended)
        transitions.job_history_close(run_ids=[r.run_id for r in ended])
        # What a settle decides on: retries, enabled (not the whole row).
        jobs = Job.objects.only("id", "owner_id", "enabled", "max_retry", "retry_backoff").in_bulk(
            {r.job_id for r in ended}
        )
        retries: list[ScheduledJob] = []
        retried: set[object] = set()
        for r in ended:
            job = jobs[r.job_id]
            if (
                r.state in (Run.State.FAILED, Run.State.COMPENSATED)
                and r.scheduled_for is not None
                and r.attempt < job.max_retry
            ):
                retried.add(r.run_id)
                retries.append(
                    ScheduledJob(
                        job_id=job.id,
                        owner_id=job.owner_id,
                        kind=ScheduledJob.Kind.RETRY,
                        reason="retry",
                        scheduled_for=r.scheduled_for,
                        attempt=r.attempt + 1,
                        next_execution_at=r.now + retry_delay(job, r.attempt) if job.enabled else None,
                    )
                )
        if retries:
            ScheduledJob.objects.bulk_create(retries, ignore_conflicts=True)
            result.retries = len(retries)
        transitions.scheduled_unpark_oldest(job_ids=[j.id for j in jobs.values() if j.enabled])
        result.dependents = dependents_settle(
            ended=ended, retried=retried, worker=instance, at=ended[0].now
        ).fired
        if result.dependents:
            _pause_for_tests("JOBS_TEST_PAUSE_AFTER_DEPENDENTS", DEPENDENTS_PAUSE_MARKER)
    return result


def jobs_dispatch(
    *,
    instance: str,
    batch: int | None = None,
    max_batches: int | None = None,
    relay: Callable[[], object] | None = None,
) -> DispatchResult:
    """One dispatcher tick: fire due occurrences, then settle the job runs that ended (and fire
    again what the settle made due: a buffered occurrence's turn, a retry due now). Firing comes
    first because it is what is late when it waits (bench/README.md, "Jobs": the settle took a
    quarter of the dispatcher's time in a minute's burst). Safe to run in any number of
    processes at once. `instance` names the holder; `relay`: see `_fire`."""
    batch = batch or int(settings.SAS.get("JOBS_DISPATCH_BATCH", 1000))
    max_batches = max_batches or int(settings.SAS.get("JOBS_DISPATCH_MAX_BATCHES", 1000))
    total = DispatchResult()
    # One firing budget for the whole tick, both passes: a tick still ends.
    firing_ends = time.monotonic() + float(settings.SAS.get("JOBS_DISPATCH_TICK_SECONDS", 20.0))
    batches = _fire(
        total, instance=instance, batch=batch, max_batches=max_batches, ends=firing_ends, relay=relay
    )
    # Settling is not time-critical: at most SETTLE_BATCHES a tick (after a burst's runs end,
    # the rest waits for the next ticks).
    settled_before = total.settled
    for _ in range(min(max_batches, SETTLE_BATCHES)):
        done = job_runs_settle(limit=batch, instance=instance)
        total.settled += done.settled
        total.retries += done.retries
        total.dependents += done.dependents
        if done.settled < batch:
            break
    # When a burst is over, not while it goes on: the burst's own statements read by key
    # whatever the statistics say (bench/README.md, "Issue 20, fourth session"), an ANALYZE at
    # 100,000 rows takes seconds, and what follows the burst - the idle ticks, the settle,
    # /metrics - is what stale statistics slow down.
    total.analyzed += statistics_refresh(written=total.started, drained=total.drained)
    if total.settled > settled_before:
        # The settle may have made rows due now (a parked occurrence's turn): fired in this tick.
        # Nothing due costs one statement (`shard_lease_take` finds no shard).
        _fire(
            total,
            instance=instance,
            batch=batch,
            max_batches=max_batches - batches,
            ends=firing_ends,
            relay=None,
            again=True,
        )
    return total


def _fire(
    total: DispatchResult,
    *,
    instance: str,
    batch: int,
    max_batches: int,
    ends: float,
    relay: Callable[[], object] | None,
    again: bool = False,
) -> int:
    """Shards in groups - each group leased by this tick (no other dispatcher holds them), the
    least recently ticked first, SAS["JOBS_DISPATCH_SHARDS_PER_CLAIM"] at a time - fire their
    due occurrences in batches until a batch comes back short, and release them. Bounded by
    `max_batches` and by the tick's firing deadline `ends` (SAS["JOBS_DISPATCH_TICK_SECONDS"]), so
    a burst is written in one tick rather than a batch count per beat interval, and a tick still
    ends. `relay`: called
    once, when this tick has taken shards with work and another free shard has some too (before
    the first batch) - it sends one more tick, which an idle dispatcher takes (so K dispatchers
    join a burst at once, not one per beat send). `again`: a second pass in the same tick (shards
    drained by the first may be taken again). Adds to `total`; returns the batches it ran."""
    shards = max(1, int(settings.SAS.get("JOBS_DISPATCH_SHARDS", 1)))
    per_claim = max(1, int(settings.SAS.get("JOBS_DISPATCH_SHARDS_PER_CLAIM", 1)))
    lease = float(settings.SAS.get("JOBS_DISPATCH_LEASE_SECONDS", 10.0))
    if not again:
        transitions.shards_ensure(shards=shards)
    drained: list[int] = []
    batches = 0
    relayed = relay is None
    while batches < max_batches and time.monotonic() <= ends:
        held = transitions.shard_lease_take(
            holder=instance, shards=shards, lease=lease, skip=drained, take=per_claim
        )
        if not held:
            total.drained = True
            break  # every shard drained by this pass or held by another dispatcher
        drained.extend(held)
        total.shards.extend(held)
        if not relayed:
            # Before this tick's first batch, not after it: an idle dispatcher joins the burst
            # while this one claims (the shards were taken because a row of each is due).
            relayed = True
            if transitions.shards_free_due(shards=shards, skip=drained):
                assert relay is not None
                relay()
        try:
            while batches < max_batches:
                done = jobs_dispatch_batch(
                    instance=instance, limit=batch, held=held, shards=shards, lease=lease
                )
                batches += 1
                total.claimed += done.claimed
                total.started += done.started
                total.skipped += done.skipped
                total.buffered += done.buffered
                total.queued += done.queued
                if done.lost:
                    total.lost = True
                    break
                # Rows this batch queued due now (catch-up) are started by the next one, in this tick.
                if (done.locked < batch and not done.queued) or time.monotonic() > ends:
                    break
        finally:
            transitions.shard_lease_release(held=held, holder=instance)
    return batches


ANALYZE_KEY = "sas:jobs:analyze"
# This process's ticks reached the threshold and owe an ANALYZE (a tick that ended with rows
# still due, or was refused by the interval): the next tick that drains runs it, even an idle
# one, without asking Redis on every idle tick.
_analyze_owed = False


def statistics_refresh(*, written: int, drained: bool) -> int:
    """Issue 29, item 5: the planner's statistics of the tables a burst changes, refreshed by the
    tick that writes runs and drains what was due (`drained`: the burst is over), once
    SAS["JOBS_ANALYZE_AFTER_ROWS"] runs have been written by all dispatchers since the last
    refresh (a Redis counter each tick that writes adds its runs to), at most once per
    SAS["JOBS_ANALYZE_INTERVAL"] seconds (a Redis SET NX that lives that long). Called after a
    tick's firing, no transaction of the tick open; an idle tick asks nothing unless this process
    owes one. Best effort: without it autovacuum's ANALYZE comes later. Returns 1 if it ran one,
    else 0."""
    global _analyze_owed
    threshold = int(settings.SAS.get("JOBS_ANALYZE_AFTER_ROWS", 0) or 0)
    if threshold <= 0 or (written <= 0 and not (drained and _analyze_owed)):
        return 0
    interval = float(settings.SAS.get("JOBS_ANALYZE_INTERVAL", 60.0))
    key = f"{settings.REDIS_PREFIX}{ANALYZE_KEY}"
    try:
        client = get_redis()
        if written > 0 and int(client.incrby(f"{key}:written", written)) >= threshold:
            _analyze_owed = True
        if not (drained and _analyze_owed):
            return 0
        if not client.set(key, "1", nx=True, px=max(1, int(interval * 1000))):
            return 0  # analysed within the interval: still owed, asked again by the next tick
        _analyze_owed = False
        client.delete(f"{key}:written")
        started = time.monotonic()
        transitions.hot_tables_analyze()
    except Exception:
        logger.warning(
            "jobs dispatcher: the hot tables' ANALYZE failed; autovacuum's comes later", exc_info=True
        )
        return 0
    logger.info("jobs dispatcher: hot tables analysed in %.3fs", time.monotonic() - started)
    return 1


WAKE_KEY = "sas:jobs:wake:"


def _send_tick(*, countdown: float | None, expires: float) -> None:
    """One more dispatcher tick to SAS["JOBS_DISPATCH_QUEUE"]: the wake-up, the relay and the
    follow-up send it the same way."""
    current_app.send_task(
        "scheduler.jobs_dispatch",
        countdown=countdown,
        expires=expires,
        queue=settings.SAS.get("JOBS_DISPATCH_QUEUE", "jobs"),
        ignore_result=True,
    )


def jobs_dispatch_wake() -> datetime | None:
    """Beat ticks every SAS["JOBS_DISPATCH_INTERVAL"] seconds, so an occurrence due between two
    ticks would wait up to one interval. When the next due row comes before the next tick, send
    one dispatcher tick for that moment (a Celery countdown task): occurrences then start within
    a few milliseconds of their time, not up to a second late. One wake-up per due instant across
    every dispatcher (a Redis SET NX on it). Best effort: a lost wake-up only means beat's next
    tick fires the row. Returns the instant woken for, or None."""
    interval = float(settings.SAS["JOBS_DISPATCH_INTERVAL"])
    due, now = transitions.scheduled_next_due()
    if due is None:
        return None
    delay = (due - now).total_seconds()
    if delay >= interval:
        return None  # beat's next tick comes first
    key = f"{settings.REDIS_PREFIX}{WAKE_KEY}{int(due.timestamp() * 1000)}"
    try:
        if not get_redis().set(key, "1", nx=True, px=int((delay + 10) * 1000)):
            return None  # another dispatcher has woken for it
        # A few ms past the due time: the worker's clock and the database's may differ a little.
        _send_tick(countdown=delay + 0.005, expires=delay + 10 * interval)
    except Exception:
        logger.warning("jobs dispatcher wake-up not sent; beat's next tick fires the row", exc_info=True)
        return None
    return due


def jobs_dispatch_relay() -> None:
    """One more dispatcher tick, now (see `jobs_dispatch`'s `relay`). Best effort: beat's next
    send does the same a second later."""
    interval = float(settings.SAS["JOBS_DISPATCH_INTERVAL"])
    try:
        _send_tick(countdown=None, expires=5 * interval)
    except Exception:
        logger.warning("jobs dispatcher relay not sent; beat's next tick joins instead", exc_info=True)


FOLLOW_KEY = "sas:jobs:follow"


def jobs_dispatch_follow() -> bool:
    """Issue 30: a parent's run ends between two of beat's sends, and its children's runs are
    written by the settle of the next tick - up to a whole interval later. While a job with
    children has a run not settled (`dependency_parents_busy`), send one more tick
    SAS["JOBS_DEPENDENTS_POLL"] seconds from now: one across every dispatcher per poll (a Redis
    SET NX that lives that long). Best effort: a lost follow-up only means beat's next tick
    settles the run. Returns whether it sent one."""
    interval = float(settings.SAS["JOBS_DISPATCH_INTERVAL"])
    poll = float(settings.SAS.get("JOBS_DEPENDENTS_POLL", 0) or 0)
    if poll <= 0 or poll >= interval or not transitions.dependency_parents_busy():
        return False
    key = f"{settings.REDIS_PREFIX}{FOLLOW_KEY}"
    try:
        if not get_redis().set(key, "1", nx=True, px=max(1, int(poll * 1000))):
            return False  # another dispatcher's follow-up is on its way
        _send_tick(countdown=poll, expires=poll + 5 * interval)
    except Exception:
        logger.warning("jobs dispatcher follow-up not sent; beat's next tick settles", exc_info=True)
        return False
    return True
