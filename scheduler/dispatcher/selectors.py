"""Reads of jobs for their owners (API, web pages): every selector takes the owner and scopes by it.

Nothing here writes. A job that is not the owner's is not found (`Job.DoesNotExist`), exactly as
one that does not exist: isolation never depends on the view.
"""

from __future__ import annotations

from typing import Any

from cron_descriptor import ExpressionDescriptor, Options
from django.db.models import OuterRef, QuerySet, Subquery

from scheduler.models import Job, Run, ScheduledJob, TaskExecutionHistory

from .cron import ALIASES, cron_normalise


def job_annotate(queryset: QuerySet[Job]) -> QuerySet[Job]:
    """`queryset` with each job's `next_run_at` (its next row's due time), `last_run_state` and
    `last_run_at` (its latest run): subqueries that run per row fetched (a page) only."""
    latest = Run.objects.filter(job_id=OuterRef("pk")).order_by("-created_at")
    nxt = ScheduledJob.objects.filter(job_id=OuterRef("pk"), kind=ScheduledJob.Kind.NEXT)
    return queryset.annotate(
        next_run_at=Subquery(nxt.values("next_execution_at")[:1]),
        last_run_state=Subquery(latest.values("state")[:1]),
        last_run_at=Subquery(latest.values("created_at")[:1]),
    )


def job_list(*, owner_id: int) -> QuerySet[Job]:
    """The owner's jobs, newest first, annotated as `job_annotate` says. One query."""
    return job_annotate(Job.objects.filter(owner_id=owner_id)).order_by("-created_at", "-id")


def job_get(*, owner_id: int, job_id: int) -> Job:
    """The owner's job `job_id` (annotated as in `job_list`); Job.DoesNotExist otherwise."""
    return job_list(owner_id=owner_id).get(pk=job_id)


def job_runs(*, owner_id: int, job_id: int) -> QuerySet[Run]:
    """The job's runs, newest first (empty for someone else's job). The id breaks ties: runs
    fired in one batch share created_at, and without it pages overlapped (issue 20)."""
    return Run.objects.filter(job_id=job_id, job__owner_id=owner_id).order_by("-created_at", "-id")


def job_history(*, owner_id: int, job_id: int) -> QuerySet[TaskExecutionHistory]:
    """The job's history rows (attempts, skipped and buffered occurrences, and who paused,
    resumed or edited it), newest first."""
    kinds = (TaskExecutionHistory.Kind.JOB, TaskExecutionHistory.Kind.OPERATOR)
    rows = TaskExecutionHistory.objects.filter(job_id=job_id, job__owner_id=owner_id, kind__in=kinds)
    return rows.order_by("-started_at", "-id")


def job_scheduled(*, owner_id: int, job_id: int) -> QuerySet[ScheduledJob]:
    """What the job will start next: its next occurrence, queued occurrences and retries."""
    return ScheduledJob.objects.filter(job_id=job_id, job__owner_id=owner_id).order_by(
        "scheduled_for", "attempt"
    )


def job_schedule_text(job: Job | Any) -> str:
    """The schedule in words: "At 02:30 (Europe/Berlin)", "Once, at ...", "Once, now"."""
    if not job.is_recurring:
        return f"Once, at {job.run_at:%Y-%m-%d %H:%M %Z}" if job.run_at else "Once"
    text = cron_normalise(job.cron)
    expression = ALIASES.get(text, text)
    try:
        words = ExpressionDescriptor(expression, Options()).get_description()
    except Exception:  # a description is a courtesy; the expression itself was validated
        words = expression
    return f"{words} ({job.timezone})"
