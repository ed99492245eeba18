"""Reads the operators' Job admin needs beyond the scheduler's owner-scoped job selectors: every
owner's jobs, each with its next run and its latest run (`job_annotate`, evaluated for the
page's rows only)."""

from __future__ import annotations

from django.db.models import QuerySet

from scheduler.dispatcher.selectors import job_annotate
from scheduler.models import Job


def job_admin_list(*, queryset: QuerySet[Job] | None = None) -> QuerySet[Job]:
    """Jobs of every owner (or of `queryset`), annotated as `job_annotate` says."""
    return job_annotate(Job.objects.all() if queryset is None else queryset)
