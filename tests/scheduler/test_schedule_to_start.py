"""Schedule-to-start (issue 18, docs/operating/fairness.md): a job occurrence whose first step was never
claimed within its window is skipped - run Cancelled, a history row that says so - and nothing
else ever expires: orders, claimed steps, compensations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from scheduler.models import Run, ScheduledJob, Step, TaskExecutionHistory
from scheduler.services import job_runs_settle, run_submit, runs_skip_unstarted, step_claim_due
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW

from .jobs_support import dispatch, make_due, new_job, runs_of

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)


@pytest.fixture
def window(settings):
    settings.SAS = {**settings.SAS, "SCHEDULE_TO_START": 45.0}
    return 45


def fired(user, **job_kwargs) -> Run:
    """A job's occurrence, dispatched: its run Pending, its first step not yet claimed."""
    job = new_job(user, **job_kwargs)
    make_due(job)
    dispatch()
    (run,) = runs_of(job)
    return run


def expire_first_step(run: Run) -> Step:
    """As if the window had passed with nobody claiming the step."""
    first = Step.objects.filter(run=run, seq=0)
    first.update(expires_at=LONG_AGO + timedelta(seconds=45), created_at=LONG_AGO)
    return Step.objects.get(run=run, seq=0)


def test_job_occurrence__first_step__expires_window_after_it_became_due(user, window):
    run = fired(user)

    steps = list(run.steps.order_by("seq"))
    assert steps[0].expires_at is not None
    assert steps[0].expires_at - steps[0].created_at == timedelta(seconds=window)
    # Only the first step: a run that started is under way (the fair claim bounds the rest).
    assert [s.expires_at for s in steps[1:]] == [None, None]


def test_skip_unstarted__past_the_window__run_cancelled_and_history_says_skipped(user, window):
    run = fired(user)
    expire_first_step(run)

    skipped = runs_skip_unstarted(batch=10)

    assert [r.run_id for r in skipped.runs] == [str(run.id)]
    run.refresh_from_db()
    reason = f"skipped: not started within {window} s (backlog)"
    assert run.state == Run.State.CANCELLED and run.error == reason and run.finished_at is not None
    assert set(run.steps.values_list("process_state", flat=True)) == {Step.State.CANCELLED}
    assert run.job_id is not None
    assert list(run.events.values_list("type", flat=True)) == ["received", "cancelled"]
    # The job's history is the dispatcher's to write: its settle closes the occurrence's row as
    # skipped, with the sentence, and starts no retry (the occurrence is gone, not failed).
    (row,) = TaskExecutionHistory.objects.filter(job_id=run.job_id, kind=TaskExecutionHistory.Kind.JOB)
    assert row.status == TaskExecutionHistory.Status.STARTED and row.ended_at is None
    assert job_runs_settle(limit=10).settled == 1
    row.refresh_from_db()
    assert row.status == TaskExecutionHistory.Status.SKIPPED and row.error == reason
    assert row.detail["reason"] == reason and row.detail["start_reason"] == "schedule"
    assert row.ended_at == run.finished_at
    assert not ScheduledJob.objects.filter(job_id=run.job_id, kind=ScheduledJob.Kind.RETRY).exists()
    # Once only.
    assert runs_skip_unstarted(batch=10).runs == []


def test_skip_unstarted__within_the_window__nothing(user, window):
    run = fired(user)

    assert runs_skip_unstarted(batch=10).runs == []
    assert Run.objects.get(pk=run.pk).state == Run.State.PENDING


def test_skip_unstarted__step_claimed_before_the_sweep__starts_late_and_is_never_skipped(user, window):
    run = fired(user)
    expire_first_step(run)
    with transaction.atomic():
        (claim,) = step_claim_due(instance="test", limit=1, run_id=run.id)

    assert runs_skip_unstarted(batch=10).runs == []
    assert Step.objects.get(pk=claim.step_id).process_state == Step.State.PROCESSING
    assert Run.objects.get(pk=run.pk).state == Run.State.RUNNING


def test_skip_unstarted__window_zero__job_runs_never_expire(user, settings):
    settings.SAS = {**settings.SAS, "SCHEDULE_TO_START": 0}
    run = fired(user)

    assert run.steps.get(seq=0).expires_at is None


def test_run_submitted_directly__never_expires(user, window):
    run = run_submit(workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, owner_id=user.id, kick=False)

    assert set(run.steps.values_list("expires_at", flat=True)) == {None}
