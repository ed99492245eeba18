"""Jobs (seed 004): the input that produces runs."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.schedules import crontab
from django.db import transaction

from scheduler.models import Job, Run
from scheduler.workflows import WorkflowInputError

from .submit import run_submit, run_validate_input


class JobBusy(Exception):
    """A non-idempotent job already has a run going; a second one must not start."""

    def __init__(self, job_id: int, run_id: uuid.UUID) -> None:
        self.job_id, self.run_id = job_id, run_id
        super().__init__(f"job {job_id} is not idempotent and run {run_id} is still going")


def _cron_error(cron: str) -> str | None:
    """Why `cron` is not a five-field cron expression (Celery's own crontab parser), or None."""
    fields = cron.split()
    if len(fields) != 5:
        return "must have five fields: minute hour day-of-month month day-of-week"
    minute, hour, day_of_month, month_of_year, day_of_week = fields
    try:
        crontab(
            minute=minute,
            hour=hour,
            day_of_month=day_of_month,
            month_of_year=month_of_year,
            day_of_week=day_of_week,
        )
    except (ValueError, IndexError) as exc:
        return f"not a valid cron expression: {exc}"
    return None


def job_create(
    *,
    owner_id: int,
    name: str,
    workflow: str,
    input: Mapping[str, Any],
    cron: str = "",
    timezone_name: str = "UTC",
    max_retry: int = 0,
    priority: int = 0,
    idempotent: bool = True,
) -> Job:
    """Create a one-off (`cron` empty) or recurring job. Invariant: the workflow input, the cron
    expression, the time zone and the numbers are all checked first; bad input raises
    WorkflowInputError (field -> messages) and writes nothing. Transaction: one INSERT."""
    errors: dict[str, str] = {}
    definition, cleaned = run_validate_input(workflow=workflow, input=input)
    name = name.strip()
    if not name or len(name) > 200:
        errors["name"] = "must be 1 to 200 characters"
    cron = " ".join(cron.split())
    if cron and (cron_error := _cron_error(cron)):
        errors["cron"] = cron_error
    try:
        ZoneInfo(timezone_name)
    except (ZoneInfoNotFoundError, ValueError):
        errors["timezone"] = f"unknown time zone {timezone_name!r}"
    if not 0 <= max_retry <= 100:
        errors["max_retry"] = "must be between 0 and 100"
    if not -32768 <= priority <= 32767:
        errors["priority"] = "must be between -32768 and 32767"
    if not errors and Job.objects.filter(owner_id=owner_id, name=name).exists():
        errors["name"] = "you already have a job with this name"
    if errors:
        raise WorkflowInputError(errors)
    return Job.objects.create(
        owner_id=owner_id,
        name=name,
        workflow=definition.name,
        input=cleaned,
        is_recurring=bool(cron),
        cron=cron,
        timezone=timezone_name,
        max_retry=max_retry,
        priority=priority,
        idempotent=idempotent,
    )


def job_run_submit(*, job_id: int, kick: bool = True) -> Run:
    """Start a run of `job_id`: its workflow, input, owner and priority; correlation id
    `job:<id>`. Invariant: a non-idempotent job never has two unfinished runs (the job row is
    locked while we look, so two submitters cannot both pass); raises JobBusy instead.
    Transaction: one atomic block with the run's own (see `run_submit`)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if not job.idempotent:
            going = (
                Run.objects.filter(job_id=job.pk, state__in=Run.UNFINISHED_STATES)
                .values_list("id", flat=True)
                .first()
            )
            if going is not None:
                raise JobBusy(job.pk, going)
        return run_submit(
            workflow=job.workflow,
            input=job.input,
            owner_id=job.owner_id,
            priority=job.priority,
            correlation_id=f"job:{job.pk}",
            kick=kick,
            job_id=job.pk,
        )
