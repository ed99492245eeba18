"""Firing occurrences: what the dispatcher and "run now" decide, applied in bulk.

A `FiringPlan` belongs to one transaction that holds the row locks of the jobs it decides for
(the dispatcher's claim locks them with SKIP LOCKED; "run now" with FOR UPDATE). It collects
decisions - start a run, skip, buffer (a parked queued row), cancel the running runs, move the
next row - and `apply()` writes them all with a handful of statements, whatever the batch size.
The rules it applies are in `scheduler/jobs.md` ("Overlap").
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from scheduler.limits import quota_of, runs_in_flight_by_owner
from scheduler.models import Job, Run, ScheduledJob, TaskExecutionHistory

from . import transitions
from .cron import cron_between, cron_latest, cron_next, next_occurrence
from .starts import runs_start
from .transitions import ClaimedRow

logger = logging.getLogger(__name__)

History = TaskExecutionHistory
OVERLAP = Job.Overlap

# Past occurrences examined when a next row is found late (misfire), and the most occurrences
# a catch-up window queues at once.
MISFIRE_SCAN = 10_000
CATCHUP_MAX = 1_000

# Queued rows that hold a job's one buffer slot (buffer_one, cancel_other, run now); catch-up
# and backfill rows wait too, but do not take the slot.
BUFFER_REASONS = ("buffered", "cancel_other", "run_now")
# A queued or retry row whose owner is at the runs-in-flight quota is tried again this much later.
QUOTA_DEFER_SECONDS = 30.0


class JobStateError(Exception):
    """The job is not in a state that allows this action (paused, not paused, one-off...)."""


@dataclass
class Firing:
    """What became of one occurrence: started (with its run), buffered (waits for the running
    run to end) or skipped (with why)."""

    outcome: Literal["started", "buffered", "skipped"]
    job_id: int
    scheduled_for: datetime
    attempt: int = 0
    run_id: uuid.UUID | None = None
    reason: str = ""


def jitter_offset(job_id: int, scheduled_for: datetime, jitter: int) -> timedelta:
    """A deterministic delay in [0, jitter] seconds for this occurrence (a hash of job and time),
    so recomputing an occurrence's due time gives the same answer."""
    if jitter <= 0:
        return timedelta(0)
    digest = hashlib.blake2b(f"{job_id}:{scheduled_for.isoformat()}".encode(), digest_size=8).digest()
    return timedelta(milliseconds=int.from_bytes(digest) % (jitter * 1000 + 1))


def retry_delay(job: Job, attempt: int) -> timedelta:
    """Before attempt `attempt + 1`: the job's backoff doubled per earlier retry, at most an hour."""
    seconds = job.retry_backoff.total_seconds() * (2 ** min(attempt, 20))
    return timedelta(seconds=min(3600.0, seconds))


@dataclass
class _Start:
    job: Job
    firing: Firing
    reason: str
    scheduled: bool = False
    # The queued or retry row it comes from (None: a fresh occurrence).
    row_id: int | None = None


@dataclass
class FiringPlan:
    now: datetime
    instance: str
    jobs: dict[int, Job]
    # Unfinished runs per job: (run id or None for one this plan starts, state).
    busy: dict[int, list[tuple[uuid.UUID | None, str]]] = field(default_factory=dict)
    # Jobs whose buffer slot is taken (a parked queued row of BUFFER_REASONS).
    waiting: set[int] = field(default_factory=set)
    starts: list[_Start] = field(default_factory=list)
    history: list[transitions.HistoryRow] = field(default_factory=list)
    queued: list[ScheduledJob] = field(default_factory=list)
    park_ids: list[int] = field(default_factory=list)
    delete_ids: list[int] = field(default_factory=list)
    moves: list[tuple[int, datetime, datetime, datetime]] = field(default_factory=list)
    finish_ids: list[int] = field(default_factory=list)
    firings: Counter[int] = field(default_factory=Counter)
    defer_ids: list[int] = field(default_factory=list)
    cancels: dict[uuid.UUID, int] = field(default_factory=dict)
    results: list[Firing] = field(default_factory=list)

    @classmethod
    def load(cls, *, jobs: dict[int, Job], now: datetime, instance: str) -> FiringPlan:
        """A plan for `jobs` (locked by the caller): their unfinished runs and buffer slots."""
        plan = cls(now=now, instance=instance, jobs=jobs)
        busy: dict[int, list[tuple[uuid.UUID | None, str]]] = defaultdict(list)
        # Slots: parked or already due again (its turn came) - either way the slot is taken.
        for is_run, job_id, run_id, state in transitions.firing_context(
            job_ids=list(jobs), buffer_reasons=BUFFER_REASONS
        ):
            if is_run:
                busy[job_id].append((run_id, state))
            else:
                plan.waiting.add(job_id)
        plan.busy = busy
        return plan

    # -- decisions -------------------------------------------------------------------------

    def due(self, job: Job, row: ClaimedRow) -> None:
        """The one decision for a claimed row that came due: the schedule's next occurrence
        (fire it - or skip, buffer it behind the running run, catch up what was missed - and
        move the row on or finish the job), or a queued / retry row (start it, or defer it
        behind the running run)."""
        if row.kind == ScheduledJob.Kind.NEXT:
            self._due_next(job, row)
        else:
            self.take(
                job, row_id=row.id, scheduled_for=row.scheduled_for, attempt=row.attempt, reason=row.reason
            )

    def _due_next(self, job: Job, row: ClaimedRow) -> None:
        """The schedule's occurrence `row.scheduled_for` came due: fire it (and, after downtime,
        deal with the ones missed since), then move the row to the next occurrence or finish."""
        now, first = row.now, row.scheduled_for
        if not job.is_recurring:
            self.offer(job, first, reason="schedule", scheduled=True)
            self.delete_ids.append(row.id)
            self.finish_ids.append(job.id)
            return
        until = min(now, job.end_at) if job.end_at else now
        # On time (the usual case) is one cached lookup, shared by every job of the same schedule
        # in the batch; only a late row scans what it missed.
        second = cron_next(job.cron, job.timezone, first)
        later: list[datetime]
        if second is None or second > until:
            later, more = [], False
        else:
            later, more = cron_between(job.cron, job.timezone, after=first, until=until, limit=MISFIRE_SCAN)
        missed = [first, *later]
        remaining = self.remaining(job)
        if len(missed) == 1:
            if remaining is None or remaining > 0:
                self.offer(job, first, reason="schedule", scheduled=True)
        elif job.catchup_window is None:
            # Late: fire once, for the latest missed occurrence; the others are recorded as skipped.
            latest = cron_latest(job.cron, job.timezone, at_or_before=until) if more else missed[-1]
            assert latest is not None
            skipped = [t for t in missed if t != latest]
            self.skip(
                job,
                first,
                f"misfire: {len(skipped)}{'+' if more else ''} missed occurrences skipped; "
                "only the latest fires (no catch-up window)",
                count=len(skipped),
                more=more,
                first=skipped[0].isoformat(),
                last=skipped[-1].isoformat(),
            )
            if remaining is None or remaining > 0:
                self.offer(job, latest, reason="schedule", scheduled=True)
        else:
            edge = now - job.catchup_window
            if more:
                inside, _ = cron_between(
                    job.cron,
                    job.timezone,
                    after=max(first, edge) - timedelta(microseconds=1),
                    until=until,
                    limit=CATCHUP_MAX,
                )
            else:
                inside = [t for t in missed if t >= edge][:CATCHUP_MAX]
            older = [t for t in missed if t < (inside[0] if inside else until + timedelta(microseconds=1))]
            if older:
                self.skip(
                    job,
                    older[0],
                    f"misfire: {len(older)}{'+' if more else ''} missed occurrences older than the catch-up "
                    f"window ({job.catchup_window}) skipped",
                    count=len(older),
                    more=more,
                    first=older[0].isoformat(),
                    last=older[-1].isoformat(),
                )
            if remaining is not None:
                inside = inside[:remaining]
            # Fired oldest first, one after another unless the policy allows overlap (queued rows).
            self.queue(job, inside, reason="catch_up", scheduled=True)
        following = next_occurrence(job, after=max(now, until, first))
        if following is None or self.remaining(job) == 0:
            self.delete_ids.append(row.id)
            self.finish_ids.append(job.id)
        else:
            self.moves.append(
                (row.id, first, following, following + jitter_offset(job.id, following, job.jitter))
            )

    def remaining(self, job: Job) -> int | None:
        """Scheduled occurrences the job may still accept (None: no limit)."""
        if job.max_firings is None:
            return None
        return max(0, job.max_firings - job.firing_count - self.firings[job.id])

    def offer(self, job: Job, scheduled_for: datetime, *, reason: str, scheduled: bool) -> Firing:
        """A fresh occurrence (the schedule's, or "run now"): started, buffered or skipped by
        the job's overlap policy. `scheduled`: it counts toward max firings when accepted."""
        running = self.busy.get(job.id, [])
        overlaps = job.overlap_policy == OVERLAP.ALLOW_ALL and job.idempotent
        if not running and job.id in self.waiting and job.enabled and not overlaps:
            # Its run has ended but is not settled yet: the occurrence buffered behind it goes
            # first (the settle makes it due), never one that came after it (issue 20). A paused
            # job's parked rows wait for the resume: an explicit "run now" may go meanwhile.
            return self.skip(
                job,
                scheduled_for,
                f"overlap ({job.overlap_policy}): an occurrence already waits for its turn",
            )
        if not running or overlaps:
            return self._start(job, scheduled_for, attempt=0, reason=reason, scheduled=scheduled)
        going = ", ".join(str(run_id) for run_id, _ in running if run_id) or "started just now"
        policy = job.overlap_policy
        if policy in (OVERLAP.BUFFER_ONE, OVERLAP.CANCEL_OTHER):
            if policy == OVERLAP.CANCEL_OTHER:
                for run_id, state in running:
                    if run_id is not None and state in (Run.State.PENDING, Run.State.RUNNING):
                        self.cancels[run_id] = job.id
            if job.id in self.waiting:
                return self.skip(
                    job, scheduled_for, f"overlap ({policy}): an occurrence already waits for run {going}"
                )
            self.waiting.add(job.id)
            row_reason = "cancel_other" if policy == OVERLAP.CANCEL_OTHER else reason
            if row_reason == "schedule":
                row_reason = "buffered"
            self._queue_row(job, scheduled_for, reason=row_reason, due=None)
            if scheduled:
                self.firings[job.id] += 1
            why = (
                f"overlap (cancel_other): run {going} cancelled; starts when it has ended"
                if policy == OVERLAP.CANCEL_OTHER
                else f"overlap (buffer_one): starts when run {going} ends"
            )
            return self._record(job, scheduled_for, 0, "buffered", why)
        if policy == OVERLAP.ALLOW_ALL:  # not idempotent: never two at once
            return self.skip(job, scheduled_for, f"not idempotent: run {going} is still going")
        return self.skip(job, scheduled_for, f"overlap (skip): run {going} is still going")

    def take(self, job: Job, *, row_id: int, scheduled_for: datetime, attempt: int, reason: str) -> Firing:
        """A queued or retry row that came due: started, or parked while a run is going."""
        running = self.busy.get(job.id, [])
        if not running or (job.overlap_policy == OVERLAP.ALLOW_ALL and job.idempotent):
            self.delete_ids.append(row_id)
            if reason in BUFFER_REASONS:
                self.waiting.discard(job.id)  # the slot frees as its occurrence starts
            return self._start(
                job, scheduled_for, attempt=attempt, reason=reason, scheduled=False, row_id=row_id
            )
        self.park_ids.append(row_id)
        going = ", ".join(str(run_id) for run_id, _ in running if run_id) or "started just now"
        return self._record(
            job, scheduled_for, attempt, "buffered", f"{reason}: waits for run {going} to end"
        )

    def skip(self, job: Job, scheduled_for: datetime, reason: str, **detail: Any) -> Firing:
        return self._record(job, scheduled_for, 0, "skipped", reason, **detail)

    def queue(self, job: Job, times: Iterable[datetime], *, reason: str, scheduled: bool) -> int:
        """Queue occurrences due now (catch-up, backfill); the dispatcher starts them oldest
        first under the rules for queued rows. Returns how many."""
        n = 0
        for t in times:
            self._queue_row(job, t, reason=reason, due=self.now)
            n += 1
        if scheduled:
            self.firings[job.id] += n
        return n

    def _queue_row(self, job: Job, scheduled_for: datetime, *, reason: str, due: datetime | None) -> None:
        """A queued occurrence, due at `due` (None: parked until the running run ends)."""
        self.queued.append(
            ScheduledJob(
                job_id=job.id,
                owner_id=job.owner_id,
                kind=ScheduledJob.Kind.QUEUED,
                reason=reason,
                scheduled_for=scheduled_for,
                attempt=0,
                next_execution_at=due,
            )
        )

    def _start(
        self,
        job: Job,
        scheduled_for: datetime,
        *,
        attempt: int,
        reason: str,
        scheduled: bool,
        row_id: int | None = None,
    ) -> Firing:
        firing = Firing("started", job.id, scheduled_for, attempt, reason=reason)
        self.starts.append(_Start(job, firing, reason, scheduled=scheduled, row_id=row_id))
        self.busy.setdefault(job.id, []).append((None, Run.State.PENDING))
        if scheduled:
            self.firings[job.id] += 1
        self.results.append(firing)
        return firing

    def _record(
        self,
        job: Job,
        scheduled_for: datetime,
        attempt: int,
        outcome: Literal["buffered", "skipped"],
        reason: str,
        **detail: Any,
    ) -> Firing:
        status = History.Status.SKIPPED if outcome == "skipped" else History.Status.BUFFERED
        self.history.append(
            transitions.HistoryRow(job.id, status, scheduled_for, attempt, {"reason": reason, **detail})
        )
        firing = Firing(outcome, job.id, scheduled_for, attempt, reason=reason)
        self.results.append(firing)
        return firing

    def _within_quota(self) -> None:
        """Starts of owners at SAS_QUOTAS["RUNS_IN_FLIGHT"] do not happen: a fresh occurrence
        is skipped with a history row that says so (as an overlap skip is); a queued or retry
        row waits QUOTA_DEFER_SECONDS and is tried again. One grouped count for the batch."""
        limit = quota_of("RUNS_IN_FLIGHT")
        if not limit or not self.starts:
            return
        counts = runs_in_flight_by_owner(owner_ids=sorted({s.job.owner_id for s in self.starts}))
        kept: list[_Start] = []
        for start in self.starts:
            owner, firing = start.job.owner_id, start.firing
            have = counts.get(owner, 0)
            if have < limit:
                counts[owner] = have + 1
                kept.append(start)
                continue
            why = f"owner has {have} runs in flight (pending or running); the limit is {limit} per user"
            if start.row_id is not None:
                self.delete_ids.remove(start.row_id)
                self.defer_ids.append(start.row_id)
                firing.outcome, firing.reason = "buffered", f"waits: {why}"
                continue
            if start.scheduled:
                self.firings[start.job.id] -= 1
            firing.outcome, firing.reason = "skipped", why
            self.history.append(
                transitions.HistoryRow(
                    start.job.id,
                    History.Status.SKIPPED,
                    firing.scheduled_for,
                    firing.attempt,
                    {"reason": why},
                )
            )
        self.starts = kept

    # -- writing ---------------------------------------------------------------------------

    def apply(self) -> list[Firing]:
        """Write every decision: cancels, runs (bulk), history, queued rows, parked / deleted /
        moved rows, firing counts, finished jobs. A start whose input is no longer valid, or
        whose workflow is staff-only work while the job's owner may not do staff work (now), or
        is no job target, starts no run: a history row says why (`starts.runs_start`).
        Transaction: the caller's."""
        # The engine's services, imported here: the engine's services package imports the job
        # services, which import this module (a cycle at import time, none at run time).
        from scheduler.services.compensation import RunNotCancellable, run_cancel

        for run_id, job_id in self.cancels.items():
            # One that ended (or began compensating) meanwhile has nothing left to cancel.
            with contextlib.suppress(RunNotCancellable):
                run_cancel(run_id=run_id, actor=f"job {job_id} (cancel_other)")
        self._within_quota()
        opened = runs_start(starts=self.starts, history=self.history)
        transitions.job_history_open(runs=opened, worker=self.instance)
        transitions.job_history_record(rows=self.history, worker=self.instance, at=self.now)
        transitions.scheduled_park(ids=self.park_ids)
        transitions.scheduled_delete(ids=self.delete_ids)
        transitions.scheduled_defer(ids=self.defer_ids, seconds=QUOTA_DEFER_SECONDS)
        moved = transitions.scheduled_next_advance(moves=self.moves)
        if moved != len(self.moves):
            raise RuntimeError(f"next rows changed under their lock ({moved} of {len(self.moves)} moved)")
        if self.queued:
            # After the next rows moved off the occurrences they now queue. A backfill racing
            # another may name an occurrence already queued: the unique constraint keeps one.
            ScheduledJob.objects.bulk_create(self.queued, ignore_conflicts=True)
        # Counted toward max firings only: a job without a limit needs no count, and writing
        # its row per firing was a tenth of a burst's time (bench/README.md, "Jobs").
        limited = {job_id for job_id, job in self.jobs.items() if job.max_firings is not None}
        transitions.job_firings_add(
            counts={job_id: n for job_id, n in self.firings.items() if job_id in limited}
        )
        transitions.job_finish(ids=self.finish_ids)
        return self.results
