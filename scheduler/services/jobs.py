"""Jobs (seed 004): what users, the API, the web pages and the admin call.

Create, edit, pause, resume, delete, run now, backfill, preview. Bad input raises
WorkflowInputError (field -> messages) before anything is written; an action the job's state
does not allow raises JobStateError. Owner checks are the caller's (`scheduler.dispatcher.selectors`
scopes every read by owner). The rules (overlap, misfire, retries): `scheduler/jobs.md`.

Who may schedule what is decided here, once, for the API, the pages and the admin: every service
that makes a job or runs from one takes `by_staff` (keyword-only, no default: the caller says
whether the person acting may do staff work - `scheduler.permissions.staff_may`, the one rule,
not `is_staff`). Staff-only work (a workflow not `customer_schedulable`) is refused with
`WorkflowNotPermitted` - a field error on `workflow` - unless the person acting AND the job's
owner may do staff work (its runs are the owner's); a workflow that is no job target
(`Workflow.job_target`: webhook deliveries, alert notifications) is refused to everyone. The
dispatcher checks the owner again at every firing (`FiringPlan.apply`): see scheduler/jobs.md,
"Who may schedule what".
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.forms.models import model_to_dict

from scheduler import transitions
from scheduler.dispatcher import transitions as job_transitions
from scheduler.dispatcher.cron import (
    cron_between,
    cron_error,
    cron_preview,
    next_occurrence,
    zone_error,
)
from scheduler.dispatcher.dependents import BACKFILL_ALONE, BACKFILL_WITH_DEPENDENTS
from scheduler.dispatcher.firing import Firing, FiringPlan, JobStateError, jitter_offset
from scheduler.limits import (
    quota_check_active_jobs,
    quota_check_runs,
)
from scheduler.models import Job, JobDependency, Run, RunEvent, ScheduledJob
from scheduler.workflows import WorkflowInputError, WorkflowNotPermitted, get_workflow

from .dependencies import ParentSpec, job_parents_check, job_parents_create, job_parents_set
from .dispatch import scheduler_instance_id
from .events import events_announce
from .job_input import aware_datetime, job_input_clean, job_permit
from .submit import run_submit

BACKFILL_MAX = 1_000
PREVIEW_MAX = 100


class JobBusy(Exception):
    """A non-idempotent job already has a run going; a second one must not start."""

    def __init__(self, job_id: int, run_id: uuid.UUID) -> None:
        self.job_id, self.run_id = job_id, run_id
        super().__init__(f"job {job_id} is not idempotent and run {run_id} is still going")


# The fields a job is created and edited with (service argument -> model field).
EDITABLE = (
    "name",
    "workflow",
    "input",
    "cron",
    "timezone_name",
    "max_retry",
    "retry_backoff",
    "priority",
    "idempotent",
    "overlap_policy",
    "catchup_window",
    "jitter",
    "start_at",
    "end_at",
    "run_at",
    "max_firings",
)
# Fields whose change moves the next occurrence.
SCHEDULE_FIELDS = {
    "cron",
    "timezone",
    "jitter",
    "start_at",
    "end_at",
    "run_at",
    "max_firings",
    "is_recurring",
}


def _first_occurrence(job: Job, *, now: datetime) -> datetime | None:
    """When a new (or re-armed) job's next row is due from `now`: a one-off's run time (now if
    none), a recurring job's first occurrence after now within its start and end."""
    if not job.is_recurring:
        return job.run_at or now
    return next_occurrence(job, after=now)


def _waits_for_parents(job: Job) -> bool:
    """A one-off job with parents and no run time has no occurrence of its own: it runs when
    its parents end (scheduler/jobs.md, "Dependencies")."""
    return not job.is_recurring and job.run_at is None and JobDependency.objects.filter(child=job).exists()


def _arm(job: Job, *, now: datetime) -> ScheduledJob | None:
    """Write the job's next row from `now` (none when the schedule has no occurrence left, max
    firings is reached, or it waits for its parents). Transaction: the caller's, holding the job."""
    if job.max_firings is not None and job.firing_count >= job.max_firings:
        return None
    if _waits_for_parents(job):
        return None
    first = _first_occurrence(job, now=now)
    if first is None:
        return None
    return ScheduledJob.objects.create(
        job=job,
        owner_id=job.owner_id,
        kind=ScheduledJob.Kind.NEXT,
        reason="schedule",
        scheduled_for=first,
        attempt=0,
        next_execution_at=first + jitter_offset(job.id, first, job.jitter) if job.is_recurring else first,
    )


def job_create(
    *,
    owner_id: int,
    by_staff: bool,
    name: str,
    workflow: str,
    input: Mapping[str, Any],
    cron: str = "",
    timezone_name: str = "UTC",
    max_retry: int = 0,
    retry_backoff: float | timedelta = 10.0,
    priority: int | None = None,
    idempotent: bool = True,
    overlap_policy: str = Job.Overlap.SKIP,
    catchup_window: timedelta | None = None,
    jitter: int = 0,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
    run_at: datetime | None = None,
    max_firings: int | None = None,
    recurring: bool | None = None,
    parents: Any = None,
) -> Job:
    """Create a one-off (`cron` empty) or recurring job and its first occurrence. Invariant:
    every field is checked first; bad input raises WorkflowInputError (field -> messages) and
    writes nothing; a recurring job whose schedule never fires (after now, before its end) is
    refused. `by_staff`: the person acting is staff (staff-only work needs it, and a staff
    owner: `job_permit`; any priority, where customers choose in their band). `priority` None
    is the customers' default. The owner's active jobs stay within SAS_QUOTAS["ACTIVE_JOBS"]
    (QuotaExceeded, counted under the owner's quota lock). `parents`: its dependencies
    ([{"job": id, "condition": ...}], `scheduler/services/dependencies.py`); a one-off job with
    parents and no run time has no occurrence of its own - it runs when its parents end.
    Transaction: one atomic block (the job, its edges and its next row)."""
    data = dict(locals())
    errors: dict[str, list[str]] = {}
    fields: dict[str, Any] = {}
    specs: list[ParentSpec] = []
    for check in (
        lambda: fields.update(job_input_clean(owner_id=owner_id, by_staff=by_staff, data=data)),
        lambda: specs.extend(
            job_parents_check(owner_id=owner_id, by_staff=by_staff, child=None, parents=parents)
        ),
    ):
        try:
            check()
        except WorkflowNotPermitted:
            raise  # staff-only work: refused alone (job_input_clean)
        except WorkflowInputError as exc:
            errors.update(exc.errors)
    if errors:
        raise WorkflowInputError(errors)
    with transaction.atomic():
        quota_check_active_jobs(owner_id=owner_id)
        job = Job.objects.create(owner_id=owner_id, **fields)
        job_parents_create(child=job, parents=specs)
        if _arm(job, now=job_transitions.db_now()) is None and not _waits_for_parents(job):
            raise WorkflowInputError({"cron": "the schedule has no occurrence after now, before its end"})
    return job


@dataclass
class JobEdit:
    """What `job_update` changed: field -> (old, new); empty when nothing did."""

    job: Job
    changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def job_update(*, job_id: int, by_staff: bool, actor: str = "", **changes: Any) -> JobEdit:
    """Edit a job: any of the fields `job_create` takes (`timezone_name` for the zone), checked
    the same way - the workflow too, changed or not: a customer's job of work that has become
    staff-only cannot be edited, save to a workflow they may pick (it can still be paused or
    deleted). When its schedule changed, its next occurrence is recomputed from now (a
    finished job whose new schedule has occurrences again is re-armed). Runs already going are
    not touched. An edit that changed something leaves an operator row in the job's history:
    `actor` and the fields. A priority changed must be in the customers' band unless `by_staff`.
    Re-arming a finished job counts toward the owner's active jobs (QuotaExceeded). `parents`:
    the job's edges replaced (`job_parents_set`), in the same transaction. Transaction:
    one atomic block holding the job's row (FOR UPDATE)."""
    unknown = set(changes) - set(EDITABLE) - {"recurring", "parents"}
    if unknown:
        raise TypeError(f"job_update() got unexpected fields: {', '.join(sorted(unknown))}")
    if "parents" in changes:
        # The edges with the fields, in one transaction: refused parents leave the job as it was.
        parents = changes.pop("parents")
        with transaction.atomic():
            edit = job_update(job_id=job_id, by_staff=by_staff, actor=actor, **changes)
            job_parents_set(job_id=job_id, by_staff=by_staff, parents=parents, actor=actor)
            return edit
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        current = {
            "name": job.name,
            "workflow": job.workflow,
            "input": job.input,
            "cron": job.cron,
            "timezone_name": job.timezone,
            "max_retry": job.max_retry,
            "retry_backoff": job.retry_backoff,
            "priority": job.priority,
            "idempotent": job.idempotent,
            "overlap_policy": job.overlap_policy,
            "catchup_window": job.catchup_window,
            "jitter": job.jitter,
            "start_at": job.start_at,
            "end_at": job.end_at,
            "run_at": job.run_at,
            "max_firings": job.max_firings,
            # A recurring job stays recurring unless told otherwise: an empty cron is an error.
            "recurring": job.is_recurring,
        }
        fields = job_input_clean(
            owner_id=job.owner_id,
            by_staff=by_staff,
            data={**current, **changes},
            job_id=job.pk,
            current_priority=job.priority,
            current_run_at=job.run_at,
        )
        changed = {k: (getattr(job, k), v) for k, v in fields.items() if getattr(job, k) != v}
        if not changed:
            return JobEdit(job)
        for key, (_, value) in changed.items():
            setattr(job, key, value)
        job.save(update_fields=[*changed, "updated_at"])
        job_transitions.job_edit_record(job_id=job.pk, actor=actor, changed=sorted(changed))
        if SCHEDULE_FIELDS & set(changed):
            ScheduledJob.objects.filter(job=job, kind=ScheduledJob.Kind.NEXT).delete()
            if job.enabled:
                now = job_transitions.db_now()
                if _waits_for_parents(job):
                    pass  # no occurrence of its own: its parents fire it
                elif job.is_recurring or job.finished_at is None or "run_at" in changed:
                    if job.finished_at is not None:
                        # Finished jobs do not count; one that comes back does.
                        quota_check_active_jobs(owner_id=job.owner_id)
                    armed = _arm(job, now=now)
                    if armed is not None and job.finished_at is not None:
                        Job.objects.filter(pk=job.pk).update(finished_at=None)
                        job.finished_at = None
                    elif armed is None:
                        job_transitions.job_finish(ids=[job.pk])
                        job.refresh_from_db(fields=["finished_at"])
    return JobEdit(job, changed)


def job_runs_cancel_unstarted(*, job_id: int, reason: str) -> list[uuid.UUID]:
    """Cancel the job's runs that have not started (Pending, no step ever claimed): they end
    Cancelled with `reason` in their error and their "cancelled" event; a run already started
    finishes. Observed runs' events are announced (webhooks). The jobs dispatcher settles them
    like any ended run: their history row closes as cancelled, no retry (only Failed and
    Compensated runs are retried). Transaction: the caller's (the job's pause or delete)."""
    cancelled = transitions.runs_cancel_unstarted(job_id=job_id, reason=reason)
    observed = [event_id for _, seen, event_id in cancelled if seen]
    if observed:
        rows: list[dict[str, Any]] = [
            dict(row) for row in RunEvent.objects.filter(id__in=observed).order_by("id").values()
        ]
        events_announce(rows)
    return [run_id for run_id, _, _ in cancelled]


def job_pause(*, job_id: int, note: str = "", actor: str = "") -> Job:
    """Enabled -> paused, with a note: its next occurrence is dropped, its queued and retry
    occurrences are parked and its runs not started yet are cancelled ("job paused by <actor>");
    nothing of it starts until it is resumed (runs already going go on). `actor` and the note go
    to the job's history. Raises JobStateError if it is already paused. Transaction: one atomic
    block."""
    with transaction.atomic():
        Job.objects.select_for_update().get(pk=job_id)
        if not job_transitions.job_disable(job_id=job_id, note=note.strip()[:2000], actor=actor):
            raise JobStateError("the job is already paused")
        job_transitions.scheduled_park_all(job_id=job_id)
        job_runs_cancel_unstarted(job_id=job_id, reason=f"job paused by {actor or 'an operator'}")
    return Job.objects.get(pk=job_id)


def job_resume(*, job_id: int, actor: str = "") -> Job:
    """Paused -> enabled: the next occurrence is computed from now (occurrences that fell in
    the pause are not fired), parked occurrences become due; `actor` goes to the job's history.
    Raises JobStateError if it is not paused. Transaction: one atomic block."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if not job_transitions.job_enable(job_id=job_id, actor=actor):
            raise JobStateError("the job is not paused")
        job.refresh_from_db()
        if job.finished_at is None:
            _arm(job, now=job_transitions.db_now())
        job_transitions.scheduled_unpark_all(job_id=job_id)
    return Job.objects.get(pk=job_id)


def job_delete(*, job_id: int, actor: str = "") -> dict[str, Any]:
    """Delete a job with its scheduled occurrences and its history; its runs not started yet are
    cancelled first ("job deleted by <actor>"), the others stay (unlinked, correlation id
    `job:<id>`) and finish on their own. Returns the job's fields as they were (for an audit
    entry). Transaction: one atomic block."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        snapshot = model_to_dict(job)
        snapshot["id"] = job.pk
        job_runs_cancel_unstarted(job_id=job.pk, reason=f"job deleted by {actor or 'an operator'}")
        job.delete()
    return snapshot


def _permit_job(job: Job, *, by_staff: bool) -> None:
    """Runs from an existing job: its workflow must still be one the person acting, and its
    owner, may schedule (`job_permit`). A workflow no longer registered passes: the firing
    records why it cannot start."""
    try:
        workflow = get_workflow(job.workflow)
    except WorkflowInputError:
        return
    job_permit(workflow=workflow, owner_id=job.owner_id, by_staff=by_staff)


def job_run_now(*, job_id: int, by_staff: bool, actor: str = "") -> Firing:
    """Fire an occurrence now (the database's now), under the job's overlap policy: started,
    buffered (cancel_other: the running run is cancelled first) or skipped, with why. A
    non-idempotent job never gets a second unfinished run. Not counted in max firings; works
    on a paused job too (an explicit request). Staff-only work someone may not schedule raises
    WorkflowNotPermitted, and an owner with SAS_QUOTAS["RUNS_IN_FLIGHT"] runs going
    QuotaExceeded: nothing written. Transaction: one atomic block holding the job's row, so
    concurrent "run now"s and the dispatcher decide one after another."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        _permit_job(job, by_staff=by_staff)
        quota_check_runs(owner_id=job.owner_id)
        plan = FiringPlan.load(
            jobs={job.pk: job}, now=job_transitions.db_now(), instance=actor or scheduler_instance_id()
        )
        firing = plan.offer(job, plan.now, reason="run_now", scheduled=False)
        plan.apply()
    return firing


@dataclass
class Backfill:
    """The occurrences a backfill queued, and those it left out because they already ran or
    are already queued."""

    queued: list[datetime] = field(default_factory=list)
    already: list[datetime] = field(default_factory=list)


def job_backfill(
    *, job_id: int, by_staff: bool, start: datetime, end: datetime, actor: str = "", dependents: bool = False
) -> Backfill:
    """Queue the job's cron occurrences in [start, end] - a past range - that have no run yet.
    The dispatcher starts them oldest first, one after another (all at once under allow_all).
    `dependents`: their outcomes reach the job's dependents as a scheduled occurrence's do
    (their runs for those times); without it, a backfilled occurrence fires no dependent.
    Not counted in max firings. Raises WorkflowInputError for a bad range (end before start,
    in the future, more than 1,000 occurrences) or staff-only work someone may not schedule
    (WorkflowNotPermitted), JobStateError for a one-off job and QuotaExceeded when the owner is
    at its runs in flight. Transaction: one atomic block holding the job's row."""
    errors: dict[str, str] = {}
    aware_datetime(start, "start", errors)
    aware_datetime(end, "end", errors)
    if errors:
        raise WorkflowInputError(errors)
    if end < start:
        raise WorkflowInputError({"end": "must not be before the start"})
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        _permit_job(job, by_staff=by_staff)
        if not job.is_recurring:
            raise JobStateError("only a recurring job can be backfilled")
        # The owner must have room for one more run now; the dispatcher starts the queued
        # occurrences within the quota (FiringPlan: past it they wait).
        quota_check_runs(owner_id=job.owner_id)
        now = job_transitions.db_now()
        if end > now:
            raise WorkflowInputError({"end": "a backfill covers the past: the end must not be after now"})
        times, more = cron_between(
            job.cron, job.timezone, after=start - timedelta(microseconds=1), until=end, limit=BACKFILL_MAX
        )
        if more:
            raise WorkflowInputError({"start": f"the range has more than {BACKFILL_MAX} occurrences"})
        taken = set(
            Run.objects.filter(job=job, scheduled_for__in=times, job_attempt=0).values_list(
                "scheduled_for", flat=True
            )
        ) | set(
            ScheduledJob.objects.filter(job=job, scheduled_for__in=times, attempt=0).values_list(
                "scheduled_for", flat=True
            )
        )
        result = Backfill(
            queued=[t for t in times if t not in taken], already=[t for t in times if t in taken]
        )
        plan = FiringPlan(now=now, instance=actor or scheduler_instance_id(), jobs={job.pk: job})
        reason = BACKFILL_WITH_DEPENDENTS if dependents else BACKFILL_ALONE
        plan.queue(job, result.queued, reason=reason, scheduled=False)
        plan.apply()
    return result


def job_preview(
    *,
    cron: str,
    timezone_name: str = "UTC",
    start: datetime | None = None,
    count: int = 5,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
) -> list[datetime]:
    """The next `count` fire times of `cron` in `timezone_name` after `start` (default: the
    database's now), in that zone: what a form shows before saving. With the job's window -
    `start_at` (no occurrence before it) and `end_at` (none after it) - only the times the
    dispatcher would fire (`next_occurrence`'s bounds); fewer than `count`, or none, when the
    window ends first. Raises WorkflowInputError for a bad expression, zone, count or window.
    Writes nothing."""
    errors: dict[str, str] = {}
    if why := cron_error(cron):
        errors["cron"] = why
    if why := zone_error(timezone_name):
        errors["timezone"] = why
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= PREVIEW_MAX:
        errors["count"] = f"must be between 1 and {PREVIEW_MAX}"
    start = aware_datetime(start, "start", errors)
    start_at = aware_datetime(start_at, "start_at", errors)
    end_at = aware_datetime(end_at, "end_at", errors)
    if start_at and end_at and end_at <= start_at:
        errors["end_at"] = "must be after the start time"
    if errors:
        raise WorkflowInputError(errors)
    after = start or job_transitions.db_now()
    if start_at is not None:
        # Inclusive: an occurrence at start_at itself fires (as the dispatcher's floor).
        after = max(after, start_at - timedelta(microseconds=1))
    return cron_preview(cron, timezone_name, start=after, count=count, until=end_at)


def job_run_submit(*, job_id: int, by_staff: bool, kick: bool = True) -> Run:
    """Start a run of `job_id` now, as an occurrence at the database's now: its workflow,
    input, owner and priority; correlation id `job:<id>`. Invariant: a non-idempotent job never
    has two unfinished runs (the job row is locked while we look); raises JobBusy instead.
    Staff-only work someone may not schedule raises WorkflowNotPermitted. Ignores the overlap
    policy (`job_run_now` obeys it). Transaction: one atomic block."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        _permit_job(job, by_staff=by_staff)
        if not job.idempotent:
            going = (
                Run.objects.filter(job_id=job.pk, state__in=Run.UNFINISHED_STATES)
                .values_list("id", flat=True)
                .first()
            )
            if going is not None:
                raise JobBusy(job.pk, going)
        quota_check_runs(owner_id=job.owner_id)
        return run_submit(
            workflow=job.workflow,
            input=job.input,
            owner_id=job.owner_id,
            priority=job.priority,
            correlation_id=f"job:{job.pk}",
            kick=kick,
            job_id=job.pk,
            scheduled_for=job_transitions.db_now(),
        )
