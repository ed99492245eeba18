"""Deleting or pausing a job cancels its runs not started yet (issue 18): runs queued behind a
saturated operation - the scheduler claimed what its in-flight cap (2) allows, no worker
consumes them - end Cancelled with the reason; the runs already claimed go on. On the real
PostgreSQL with the engine's own claim; the race with a claim on committed rows, with a second
connection holding the step."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from scheduler.dispatcher.tick import job_runs_settle
from scheduler.models import Job, Run, RunEvent, ScheduledJob, Step, TaskExecutionHistory
from scheduler.services import job_delete, job_pause, job_resume, job_run_now, step_claim_due

from .jobs_support import new_job, rows_held

CAP = 2
QUEUED = 5


@pytest.fixture
def saturated(settings: Any) -> None:
    """The operation's in-flight cap is reached after CAP runs: the others queue, Pending."""
    settings.SAS = {**settings.SAS, "MAX_IN_FLIGHT_PER_OPERATION": CAP}


def _scheduler_claims() -> None:
    """The scheduler's claim, as its tick makes it: as many as the saturated operation takes."""
    step_claim_due(instance="scheduler-test", limit=CAP)


def _queued_job(user: Any, **fields: Any) -> tuple[Job, list[Run], list[Run]]:
    job = new_job(user, overlap_policy="allow_all", max_retry=3, **fields)
    for _ in range(QUEUED):
        assert job_run_now(by_staff=False, job_id=job.pk).outcome == "started"
    _scheduler_claims()
    runs = list(Run.objects.filter(job=job).order_by("created_at"))
    going = [r for r in runs if r.state == Run.State.RUNNING]
    waiting = [r for r in runs if r.state == Run.State.PENDING]
    assert (len(going), len(waiting)) == (CAP, QUEUED - CAP)
    return job, going, waiting


def _states(runs: list[Run]) -> set[str]:
    return set(Run.objects.filter(pk__in=[r.pk for r in runs]).values_list("state", flat=True))


def test_pause__queued_runs_cancelled_with_why__claimed_runs_go_on(user: Any, saturated: None) -> None:
    job, going, waiting = _queued_job(user)

    job_pause(job_id=job.pk, actor="user bob (web)")

    assert _states(waiting) == {Run.State.CANCELLED} and _states(going) == {Run.State.RUNNING}
    for run in Run.objects.filter(pk__in=[r.pk for r in waiting]):
        assert run.error == "job paused by user bob (web)" and run.finished_at is not None
        assert set(run.steps.values_list("process_state", flat=True)) == {Step.State.CANCELLED}
        event = RunEvent.objects.get(run=run, type=RunEvent.Type.CANCELLED)
        assert event.data["reason"] == "job paused by user bob (web)"
    # The claimed runs' steps are untouched: Processing, their agent may be working.
    assert Step.objects.filter(run__in=going, seq=0, process_state=Step.State.PROCESSING).count() == CAP


def test_pause__cancelled_runs_settle_as_cancelled_without_retry(user: Any, saturated: None) -> None:
    job, _going, waiting = _queued_job(user)
    job_pause(job_id=job.pk, actor="ops")

    job_runs_settle(limit=100)

    closed = TaskExecutionHistory.objects.filter(job=job, run__in=waiting)
    assert set(closed.values_list("status", flat=True)) == {"cancelled"}
    assert all(h.ended_at is not None for h in closed)
    assert not ScheduledJob.objects.filter(job=job, kind=ScheduledJob.Kind.RETRY).exists()


def test_pause_then_resume__nothing_cancelled_comes_back(user: Any, saturated: None) -> None:
    job, going, waiting = _queued_job(user)
    job_pause(job_id=job.pk, actor="ops")

    job_resume(job_id=job.pk, actor="ops")

    assert _states(waiting) == {Run.State.CANCELLED} and _states(going) == {Run.State.RUNNING}


def test_delete_by_api__queued_runs_cancelled__claimed_runs_stay_unlinked(
    user: Any, saturated: None, django_user_model: Any
) -> None:
    from sasproject.tokens.services import api_token_rotate

    job, going, waiting = _queued_job(user)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_rotate(user_id=user.pk).key}")

    response = client.delete(f"/api/jobs/{job.pk}/")

    assert response.status_code == 204
    assert _states(waiting) == {Run.State.CANCELLED} and _states(going) == {Run.State.RUNNING}
    cancelled = Run.objects.filter(pk__in=[r.pk for r in waiting])
    assert {r.error for r in cancelled} == {f"job deleted by user {user.username} (api)"}
    assert not Run.objects.filter(pk__in=[r.pk for r in going], job__isnull=False).exists()


def test_pause__buffered_occurrence_stays_parked_and_run_going_is_kept(user: Any, saturated: None) -> None:
    """buffer_one: one run going, one occurrence parked behind it. The pause keeps the parked row
    (it waits for the resume) and the claimed run; only unstarted runs go."""
    job = new_job(user, overlap_policy="buffer_one")
    first = job_run_now(by_staff=False, job_id=job.pk)
    _scheduler_claims()
    second = job_run_now(by_staff=False, job_id=job.pk)
    assert (first.outcome, second.outcome) == ("started", "buffered") and first.run_id is not None

    job_pause(job_id=job.pk, actor="ops")

    assert Run.objects.get(pk=first.run_id).state == Run.State.RUNNING
    parked = ScheduledJob.objects.get(job=job, kind=ScheduledJob.Kind.QUEUED)
    assert parked.next_execution_at is None


def test_delete__a_run_whose_step_is_being_claimed_is_left_to_start(
    live_db: None, engine_paused: None, settings: Any
) -> None:
    """A claim holds the step's row (FOR UPDATE, as sas_step_claim_due does) when the delete
    comes: that run has started - it is not cancelled; the others are."""
    from django.contrib.auth import get_user_model

    from tests.engine_workflow import register_engine_workflow

    register_engine_workflow()
    settings.SAS = {**settings.SAS, "CLAIM_ON_SUBMIT": False}
    user, _ = get_user_model().objects.get_or_create(username="cancel-race")
    job = new_job(user, overlap_policy="allow_all")
    for _ in range(3):
        job_run_now(by_staff=False, job_id=job.pk)
    runs = list(Run.objects.filter(job=job).order_by("created_at"))
    held_step = Step.objects.get(run=runs[0], seq=0)

    with rows_held(Step.objects.filter(pk=held_step.pk)):
        job_delete(job_id=job.pk, actor="ops")

    assert Run.objects.get(pk=runs[0].pk).state == Run.State.PENDING
    assert _states(runs[1:]) == {Run.State.CANCELLED}
