"""An operator's pause of a whole owner or workflow and the jobs dispatcher (issue 30, item 3;
scheduler/holds.md): while paused, the scope's jobs' occurrences are not fired; the resume
applies each job's catch-up policy to the ones missed, as after the dispatcher's own downtime
(scheduler/jobs.md, "Misfires"). Real PostgreSQL, the dispatcher's real tick, the test's
transaction on a virtual clock (sastools/testkit) - hours pass at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction

from sastools.testkit import VirtualClock, virtual_clock
from scheduler.dispatcher.selectors import job_list
from scheduler.models import HELD, Job, Pause, ScheduledJob, Step, TaskExecutionHistory
from scheduler.services import holds_reconcile, job_pause, job_resume, pause_create, pause_resume
from tests.engine_workflow import submit

from .jobs_support import complete, dispatch, new_job, runs_of

pytestmark = pytest.mark.django_db

# Hourly jobs; the clock is moved to 2.5 h past a job's first occurrence: three pass while paused.
PAST = timedelta(hours=2, minutes=30)


@pytest.fixture
def clock() -> Iterator[VirtualClock]:
    with virtual_clock() as c:
        yield c


def _next(job: Job) -> ScheduledJob:
    return ScheduledJob.objects.get(job=job, kind=ScheduledJob.Kind.NEXT)


def _skipped(job: Job) -> list[TaskExecutionHistory]:
    return list(TaskExecutionHistory.objects.filter(job=job, kind="job", status="skipped"))


def _next_run_at(user: Any, job: Job) -> Any:
    """What the jobs API and pages show as the job's next run (job_list's annotation)."""
    return getattr(job_list(owner_id=user.id).get(pk=job.pk), "next_run_at")  # noqa: B009


def _other(name: str) -> Any:
    return get_user_model().objects.create_user(username=name)


def test_held_constant__is_the_sql_one():
    with connection.cursor() as cursor:
        cursor.execute("SELECT sas_held()")
        assert cursor.fetchone()[0] == HELD


def test_pause_owner__occurrences_not_fired__resume_fires_the_latest_and_records_the_missed(user, clock):
    job = new_job(user)
    first = _next(job).scheduled_for
    other_job = new_job(_other("pause-jobs-other"), name="o")
    pause = pause_create(owner_id=user.id, reason="invoice unpaid", by="admin:op")
    assert _next(job).next_execution_at == HELD
    assert _next(other_job).next_execution_at < HELD

    clock.advance_to(first + PAST)
    done = dispatch()

    # Another owner's job is fired (its own misfire: the latest); the paused owner's is not.
    assert [r.job_id for r in runs_of(other_job)] == [other_job.id] and runs_of(job) == []
    assert done.started == 1 and _next(job).next_execution_at == HELD
    assert _skipped(job) == []
    assert _next_run_at(user, job) is None  # not "year 9999"

    released = pause_resume(pause_id=pause.id)
    assert released.occurrences == 1
    assert _next(job).next_execution_at == first  # due at its occurrence: missed
    dispatch()

    # The job's policy (no catch-up window): only the latest missed occurrence fires, the other
    # two are one skipped history row - what the dispatcher does after its own downtime.
    (run,) = runs_of(job)
    assert run.scheduled_for == first + timedelta(hours=2)
    (skipped,) = _skipped(job)
    assert skipped.detail["count"] == 2 and skipped.scheduled_for == first
    assert "misfire" in skipped.detail["reason"]
    assert _next(job).scheduled_for > clock.db_now()
    assert _next_run_at(user, job) == _next(job).next_execution_at


def test_pause_owner__resume_with_a_catchup_window__missed_ones_inside_fire_oldest_first(user, clock):
    # A 2-hour window holds the latest two of the three occurrences missed while paused.
    job = new_job(user, catchup_window=timedelta(hours=2))
    first = _next(job).scheduled_for
    pause = pause_create(owner_id=user.id, reason="r", by="admin:op")
    clock.advance_to(first + PAST)
    dispatch()
    assert runs_of(job) == []

    pause_resume(pause_id=pause.id)
    dispatch()

    inside = [first + timedelta(hours=1), first + timedelta(hours=2)]
    runs = runs_of(job)
    assert [r.scheduled_for for r in runs] == inside[:1]  # the second waits for the first
    (skipped,) = _skipped(job)
    assert skipped.detail["count"] == 1 and "catch-up window" in skipped.detail["reason"]
    complete(runs[0])
    dispatch()
    assert [r.scheduled_for for r in runs_of(job)] == inside


def test_pause_short__the_occurrence_not_yet_due__fires_on_time_after_the_resume(user, clock):
    job = new_job(user)
    first = _next(job).scheduled_for
    pause = pause_create(owner_id=user.id, reason="r", by="admin:op")
    pause_resume(pause_id=pause.id)
    assert _next(job).next_execution_at == first  # nothing missed: due as before (no jitter set)

    clock.advance_to(first + timedelta(seconds=1))
    dispatch()
    assert [r.scheduled_for for r in runs_of(job)] == [first] and _skipped(job) == []


def test_pause_owner__rows_written_while_paused_are_held_too(user, clock):
    pause_create(owner_id=user.id, reason="r", by="admin:op")
    new_job(user, name="created-while-paused")
    paused_job = new_job(user, name="paused-then-resumed")
    job_pause(job_id=paused_job.id, actor="customer")
    job_resume(job_id=paused_job.id, actor="customer")

    clock.advance(3 * 3600)
    assert dispatch().started == 0
    assert {row.next_execution_at for row in ScheduledJob.objects.filter(job__owner=user)} == {HELD}


def test_pause_workflow__only_that_workflows_jobs_are_held(user, clock):
    job = new_job(user)
    pause_create(workflow=job.workflow, reason="vendor outage", by="admin:op")
    other_owner_job = new_job(_other("pause-jobs-wf"), name="same-workflow")
    assert _next(job).next_execution_at == HELD and _next(other_owner_job).next_execution_at == HELD
    clock.advance(3 * 3600)
    assert dispatch().started == 0


def test_pause__a_row_that_raced_the_pause__held_by_the_supervisors_reconcile(user, clock):
    job = new_job(user)
    # A pause row written without its hold: what a dispatcher batch that claimed before the
    # pause committed leaves behind (its rows written after the pause's hold statement).
    Pause.objects.create(scope=Pause.Scope.OWNER, owner=user, reason="r", paused_by="admin:op")
    assert _next(job).next_execution_at < HELD

    assert holds_reconcile(batch=10).held_occurrences == 1
    assert _next(job).next_execution_at == HELD
    assert holds_reconcile(batch=10).held_occurrences == 0  # idempotent


def test_two_pauses__resume_of_one__the_other_still_holds(user, clock):
    job = new_job(user)
    by_owner = pause_create(owner_id=user.id, reason="r", by="admin:op")
    pause_create(workflow=job.workflow, reason="vendor outage", by="admin:op")
    assert pause_resume(pause_id=by_owner.id).occurrences == 0
    assert _next(job).next_execution_at == HELD


def test_resume_racing_writes_the_pause_holds__waits_for_them_then_releases_them(transactional_db, user):
    """A write held by a pause and not yet committed when the resume comes (a submit, a job
    created): the resume waits for it (the hold's key-share lock on the pause) and releases what
    it wrote, which otherwise stayed held with no pause (bench/pause.py found such steps)."""
    pause = pause_create(owner_id=user.id, reason="r", by="admin:op")
    written, finish = threading.Event(), threading.Event()
    made: dict[str, Any] = {}

    def writer() -> None:
        try:
            with transaction.atomic():
                made["run"] = submit(user)
                made["job"] = new_job(user, name="raced")
                written.set()
                finish.wait(30)
        finally:
            connection.close()

    def resumer() -> None:
        try:
            made["released"] = pause_resume(pause_id=pause.id)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer), threading.Thread(target=resumer)]
    threads[0].start()
    assert written.wait(30)
    threads[1].start()
    time.sleep(0.5)
    waited = threads[1].is_alive()  # the resume waits for the write
    finish.set()
    for t in threads:
        t.join(30)

    assert waited
    assert made["released"].released == 1 and made["released"].occurrences == 1
    step = Step.objects.get(run=made["run"], seq=0, kind="forward")
    assert step.not_before < HELD
    assert _next(made["job"]).next_execution_at < HELD
