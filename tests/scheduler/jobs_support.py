"""Helpers for the jobs tests: make an occurrence due, end a run the way a test needs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet

from scheduler.dispatcher import transitions as job_transitions
from scheduler.dispatcher.cron import cron_latest
from scheduler.models import Job, Run, ScheduledJob
from scheduler.services import job_create, jobs_dispatch, run_cancel, step_claim_due, step_reply
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW


def new_job(user: Any, name: str = "j", **kwargs: Any) -> Job:
    kwargs.setdefault("cron", "0 * * * *")
    return job_create(
        by_staff=False, owner_id=user.id, name=name, workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, **kwargs
    )


def past_occurrence(job: Job, *, back: int = 0) -> datetime:
    """The job's latest occurrence at or before the database's now, `back` occurrences earlier."""
    t = cron_latest(job.cron, job.timezone, at_or_before=job_transitions.db_now())
    assert t is not None
    for _ in range(back):
        t = cron_latest(job.cron, job.timezone, at_or_before=t - timedelta(microseconds=1))
        assert t is not None
    return t


def make_due(job: Job, *, back: int = 0) -> datetime:
    """Move the job's next row to a past occurrence (as if the clock had reached it, `back`
    occurrences ago): what the dispatcher sees after waiting, or after downtime."""
    t = past_occurrence(job, back=back)
    moved = ScheduledJob.objects.filter(job=job, kind=ScheduledJob.Kind.NEXT).update(
        scheduled_for=t, next_execution_at=t
    )
    assert moved == 1
    return t


def dispatch(**kwargs: Any) -> Any:
    return jobs_dispatch(instance="test-dispatcher", **kwargs)


def complete(run: Run) -> None:
    """Play the agent: every forward step succeeds; the run ends Completed."""
    for _ in range(10):
        with transaction.atomic():
            claims = step_claim_due(instance="test", limit=10, run_id=run.id)
        if not claims:
            break
        for claim in claims:
            step_reply(
                step_id=claim.step_id, lease=claim.lease, outcome="success", result={}, claim_next=False
            )
    assert Run.objects.get(pk=run.pk).state == Run.State.COMPLETED


def compensate(run: Run) -> None:
    """Play the agent: the first step is refused for good; nothing to undo, the run ends
    Compensated."""
    with transaction.atomic():
        (claim,) = step_claim_due(instance="test", limit=10, run_id=run.id)
    step_reply(
        step_id=claim.step_id, lease=claim.lease, outcome="permanent", error="refused", claim_next=False
    )
    assert Run.objects.get(pk=run.pk).state == Run.State.COMPENSATED


def cancel(run: Run) -> None:
    run_cancel(run_id=run.id, actor="test")
    assert Run.objects.get(pk=run.pk).state == Run.State.CANCELLED


def runs_of(job: Job) -> list[Run]:
    return list(Run.objects.filter(job=job).order_by("created_at", "scheduled_for", "job_attempt"))


@contextmanager
def rows_held(rows: QuerySet[Any]) -> Iterator[Callable[[], None]]:
    """Another connection holds `rows` (SELECT ... FOR UPDATE, as a claim, a "run now" or an
    edit does) until the block ends, or until the function it gives is called."""
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                list(rows.select_for_update())
                holding.set()
                release.wait(30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()

    def let_go() -> None:
        release.set()
        holder.join(30)

    try:
        assert holding.wait(30), "the rows were not held"
        yield let_go
    finally:
        let_go()
