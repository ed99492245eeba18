"""Jobs (seed 004): created and edited with validation (bad input writes nothing), deleted,
previewed, and read by their owner only; each firing an ordinary run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction

from scheduler.dispatcher import selectors as job_selectors
from scheduler.dispatcher import transitions as job_transitions
from scheduler.dispatcher.cron import next_occurrence
from scheduler.models import Job, Run, ScheduledJob, TaskExecutionHistory
from scheduler.services import (
    JobBusy,
    job_create,
    job_delete,
    job_preview,
    job_run_now,
    job_run_submit,
    job_update,
    run_cancel,
)
from scheduler.workflows import WorkflowInputError
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]


def test_job_create__recurring__stored_with_cleaned_input_and_normalised_cron(user):
    job = job_create(
        by_staff=False,
        owner_id=user.id,
        name="nightly",
        workflow=ENGINE_WORKFLOW,
        input={**ENGINE_INPUT, "x": 10},
        cron="0  */2 * * *",
        timezone_name="Europe/Berlin",
        max_retry=3,
    )

    job.refresh_from_db()
    assert job.is_recurring and job.cron == "0 */2 * * *" and job.timezone == "Europe/Berlin"
    assert job.input == {"x": 10} and job.max_retry == 3


NOW = datetime(2026, 6, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "*/0 * * * *"}, "cron"),
        ({"cron": "* * * * * *"}, "cron"),
        ({"cron": "* * *"}, "cron"),
        ({"cron": "", "recurring": True}, "cron"),
        ({"cron": "@fortnightly"}, "cron"),
        ({"timezone_name": "Mars/Olympus"}, "timezone"),
        ({"cron": "@daily", "start_at": NOW, "end_at": NOW - timedelta(days=1)}, "end_at"),
        ({"cron": "@daily", "start_at": NOW, "end_at": NOW}, "end_at"),
        ({"max_retry": -1}, "max_retry"),
        ({"max_retry": 101}, "max_retry"),
        ({"retry_backoff": 0}, "retry_backoff"),
        ({"jitter": -1}, "jitter"),
        ({"cron": "*/5 * * * *", "jitter": 300}, "jitter"),
        ({"overlap_policy": "queue_all"}, "overlap_policy"),
        ({"cron": "@daily", "catchup_window": timedelta(days=-1)}, "catchup_window"),
        ({"cron": "@daily", "max_firings": 0}, "max_firings"),
        ({"cron": "", "max_firings": 3}, "max_firings"),
        ({"cron": "@daily", "run_at": NOW}, "run_at"),
        ({"cron": "", "run_at": datetime(2026, 6, 1, 12)}, "run_at"),  # no time zone
        ({"name": "  "}, "name"),
        ({"input": {"x": "one"}}, "x"),
        ({"workflow": "nope"}, "workflow"),
    ],
)
def test_job_create__bad_input__field_error_and_nothing_written(user, overrides, field):
    kwargs = {"owner_id": user.id, "name": "j", "workflow": ENGINE_WORKFLOW, "input": ENGINE_INPUT}

    with pytest.raises(WorkflowInputError) as excinfo:
        job_create(by_staff=False, **{**kwargs, **overrides})

    assert field in excinfo.value.errors, excinfo.value.errors
    assert Job.objects.count() == 0 and ScheduledJob.objects.count() == 0


def test_job_create__every_error_at_once(user):
    with pytest.raises(WorkflowInputError) as excinfo:
        job_create(
            by_staff=False,
            owner_id=user.id,
            name="",
            workflow=ENGINE_WORKFLOW,
            input={"x": "no"},
            cron="61 * * * *",
            timezone_name="Nowhere",
            max_retry=-1,
        )

    assert {"name", "x", "cron", "timezone", "max_retry"} <= set(excinfo.value.errors)


def test_job_create__schedule_already_over__refused(user):
    past = job_transitions.db_now() - timedelta(days=2)

    with pytest.raises(WorkflowInputError) as excinfo:
        job_create(
            by_staff=False,
            owner_id=user.id,
            name="j",
            workflow=ENGINE_WORKFLOW,
            input=ENGINE_INPUT,
            cron="@daily",
            start_at=past - timedelta(days=1),
            end_at=past,
        )

    assert "cron" in excinfo.value.errors and not Job.objects.exists()


def test_job_create__same_name_twice__refused(user):
    job_create(by_staff=False, owner_id=user.id, name="j", workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT)

    with pytest.raises(WorkflowInputError) as excinfo:
        job_create(by_staff=False, owner_id=user.id, name="j", workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT)

    assert "name" in excinfo.value.errors and Job.objects.count() == 1


def test_job_cron_constraint__recurring_without_cron__refused_by_database(user):
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.create(owner=user, name="x", workflow=ENGINE_WORKFLOW, is_recurring=True, cron="")


def test_job_run_submit__run_carries_job_owner_priority_and_correlation(user):
    job = job_create(
        by_staff=False, owner_id=user.id, name="j", workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, priority=-70
    )

    run = job_run_submit(by_staff=False, job_id=job.id)

    assert run.job_id == job.id and run.owner_id == user.id and run.priority == -70
    assert run.correlation_id == f"job:{job.id}" and run.input == job.input
    assert run.steps.get(seq=0).process_state == "pending"
    assert list(run.events.values_list("type", flat=True)) == ["received"]


def test_job_run_submit__non_idempotent_with_run_going__refused_until_it_ends(user):
    job = job_create(
        by_staff=False,
        owner_id=user.id,
        name="j",
        workflow=ENGINE_WORKFLOW,
        input=ENGINE_INPUT,
        idempotent=False,
    )
    first = job_run_submit(by_staff=False, job_id=job.id)

    with pytest.raises(JobBusy) as excinfo:
        job_run_submit(by_staff=False, job_id=job.id)

    assert excinfo.value.run_id == first.id
    assert Run.objects.filter(job=job).count() == 1
    run_cancel(run_id=first.id, actor="test")  # never claimed: cancelled at once
    assert Run.objects.get(pk=first.id).state == "cancelled"
    second = job_run_submit(by_staff=False, job_id=job.id)
    assert second.id != first.id


def test_job_run_submit__idempotent__runs_may_overlap(user):
    job = job_create(by_staff=False, owner_id=user.id, name="j", workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT)

    runs = [job_run_submit(by_staff=False, job_id=job.id) for _ in range(2)]

    assert len({r.id for r in runs}) == 2


def test_job_update__schedule_changed__next_occurrence_recomputed_and_changes_returned(user):
    job = job_create(
        by_staff=False,
        owner_id=user.id,
        name="j",
        workflow=ENGINE_WORKFLOW,
        input=ENGINE_INPUT,
        cron="@daily",
    )

    edit = job_update(
        by_staff=False,
        job_id=job.id,
        actor="ann",
        cron="*/5 * * * *",
        timezone_name="Asia/Tokyo",
        max_retry=2,
    )

    assert edit.changed["cron"] == ("@daily", "*/5 * * * *") and edit.changed["timezone"] == (
        "UTC",
        "Asia/Tokyo",
    )
    row = ScheduledJob.objects.get(job=job, kind="next")
    assert row.scheduled_for.minute % 5 == 0
    assert row.scheduled_for - job_transitions.db_now() <= timedelta(minutes=5)
    assert job_update(by_staff=False, job_id=job.id, actor="bob", max_retry=2).changed == {}
    # Who edited which fields is in the job's history; the edit that changed nothing left no row.
    edits = TaskExecutionHistory.objects.filter(job=job, kind="operator")
    assert [(h.worker, h.detail) for h in edits] == [
        ("ann", {"reason": "edited", "changed": ["cron", "max_retry", "timezone"]})
    ]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cron": ""}, "cron"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"timezone_name": "Nowhere"}, "timezone"),
        ({"max_retry": -1}, "max_retry"),
        ({"input": {"x": "one"}}, "x"),
        ({"idempotent": False, "overlap_policy": "allow_all"}, "overlap_policy"),
    ],
)
def test_job_update__bad_input__field_error_and_nothing_changed(user, changes, field):
    job = job_create(
        by_staff=False,
        owner_id=user.id,
        name="j",
        workflow=ENGINE_WORKFLOW,
        input=ENGINE_INPUT,
        cron="@daily",
    )
    before = (Job.objects.filter(pk=job.pk).values().get(), list(ScheduledJob.objects.values()))

    with pytest.raises(WorkflowInputError) as excinfo:
        job_update(by_staff=False, job_id=job.id, **changes)

    assert field in excinfo.value.errors
    assert (Job.objects.filter(pk=job.pk).values().get(), list(ScheduledJob.objects.values())) == before


def test_job_update__recurring_to_one_off__needs_saying_so(user):
    job = job_create(
        by_staff=False,
        owner_id=user.id,
        name="j",
        workflow=ENGINE_WORKFLOW,
        input=ENGINE_INPUT,
        cron="@daily",
    )

    edit = job_update(by_staff=False, job_id=job.id, cron="", recurring=False)

    assert not edit.job.is_recurring and ScheduledJob.objects.get(job=job).kind == "next"


def test_job_delete__runs_stay_unlinked_schedule_and_history_go(user):
    job = job_create(
        by_staff=False,
        owner_id=user.id,
        name="j",
        workflow=ENGINE_WORKFLOW,
        input=ENGINE_INPUT,
        cron="@daily",
    )
    fired = job_run_now(by_staff=False, job_id=job.id)

    snapshot = job_delete(job_id=job.id, actor="test")

    assert snapshot["id"] == job.id and snapshot["name"] == "j" and snapshot["cron"] == "@daily"
    assert not Job.objects.filter(pk=job.pk).exists() and not ScheduledJob.objects.exists()
    assert not TaskExecutionHistory.objects.filter(kind="job").exists()
    assert fired.run_id is not None
    run = Run.objects.get(pk=fired.run_id)
    assert run.job_id is None and run.correlation_id == f"job:{job.id}"


def test_job_preview__next_fire_times_in_the_zone(user):
    start = datetime(2026, 3, 28, 12, tzinfo=UTC)

    times = job_preview(cron="30 2 * * *", timezone_name="Europe/Berlin", start=start, count=3)

    assert [t.isoformat() for t in times] == [
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]
    assert len(job_preview(cron="@hourly")) == 5


def test_job_preview__within_the_window__as_the_dispatcher_fires(user):
    start = datetime(2026, 1, 1, tzinfo=UTC)
    start_at = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
    end_at = datetime(2026, 2, 1, 12, 0, tzinfo=UTC)
    job = Job(cron="0 * * * *", timezone="UTC", start_at=start_at, end_at=end_at)

    times = job_preview(cron="0 * * * *", start=start, count=10, start_at=start_at, end_at=end_at)
    fired, after = [], start
    while (t := next_occurrence(job, after=after)) is not None:
        fired.append(t)
        after = t

    # Both ends inclusive: 09:00 (at start_at) to 12:00 (at end_at), fewer than asked.
    assert [t.hour for t in times] == [9, 10, 11, 12]
    assert times == fired
    half_hour = start_at + timedelta(minutes=30)
    assert job_preview(cron="0 * * * *", start=start, start_at=start_at, end_at=half_hour) == [start_at]
    assert job_preview(cron="45 * * * *", start=start, start_at=start_at, end_at=half_hour) == []


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * * *", "timezone_name": "Nowhere"}, "timezone"),
        ({"cron": "* * * * *", "count": 0}, "count"),
        ({"cron": "* * * * *", "start_at": datetime(2026, 2, 1, 9)}, "start_at"),
        (
            {
                "cron": "* * * * *",
                "start_at": datetime(2026, 2, 1, 9, tzinfo=UTC),
                "end_at": datetime(2026, 2, 1, 9, tzinfo=UTC),
            },
            "end_at",
        ),
    ],
)
def test_job_preview__bad_input__field_error(kwargs, field):
    with pytest.raises(WorkflowInputError) as excinfo:
        job_preview(**kwargs)

    assert field in excinfo.value.errors


def test_selectors__a_user_sees_and_reads_only_their_own_jobs(user, django_user_model):
    other = django_user_model.objects.create(username="eve")
    mine = job_create(
        by_staff=False,
        owner_id=user.id,
        name="j",
        workflow=ENGINE_WORKFLOW,
        input=ENGINE_INPUT,
        cron="@daily",
    )
    theirs = job_create(
        by_staff=False,
        owner_id=other.id,
        name="j",
        workflow=ENGINE_WORKFLOW,
        input=ENGINE_INPUT,
        cron="@daily",
    )
    job_run_now(by_staff=False, job_id=theirs.id)

    assert [j.pk for j in job_selectors.job_list(owner_id=user.id)] == [mine.pk]
    with pytest.raises(Job.DoesNotExist):
        job_selectors.job_get(owner_id=user.id, job_id=theirs.id)
    assert not job_selectors.job_runs(owner_id=user.id, job_id=theirs.id).exists()
    assert not job_selectors.job_history(owner_id=user.id, job_id=theirs.id).exists()
    assert not job_selectors.job_scheduled(owner_id=user.id, job_id=theirs.id).exists()
    assert job_selectors.job_runs(owner_id=other.id, job_id=theirs.id).count() == 1
    listed: Any = job_selectors.job_get(owner_id=other.id, job_id=theirs.id)
    assert listed.last_run_state == "pending" and listed.next_run_at is not None
    assert job_selectors.job_schedule_text(listed) == "At 12:00 AM (UTC)"
