"""Reads the operators' Job admin needs beyond the scheduler's owner-scoped job selectors: every
owner's jobs, each with its next run and its latest run (correlated subqueries, evaluated for
the page's rows only)."""

from __future__ import annotations

from django.db.models import OuterRef, QuerySet, Subquery

from scheduler.models import Job, Run, ScheduledJob


def job_admin_list(*, queryset: QuerySet[Job] | None = None) -> QuerySet[Job]:
    """Jobs with `next_run_at` (their next occurrence's due time), `last_run_state` and
    `last_run_at` (the newest run), as `scheduler.job_selectors.job_list` annotates one owner's
    (which takes no queryset, and an owner)."""
    qs = Job.objects.all() if queryset is None else queryset
    nxt = ScheduledJob.objects.filter(job_id=OuterRef("pk"), kind=ScheduledJob.Kind.NEXT)
    latest = Run.objects.filter(job_id=OuterRef("pk")).order_by("-created_at")
    return qs.annotate(
        next_run_at=Subquery(nxt.values("next_execution_at")[:1]),
        last_run_state=Subquery(latest.values("state")[:1]),
        last_run_at=Subquery(latest.values("created_at")[:1]),
    )
