"""Jobs (seed 004) as the input of runs: created with validation, each firing an ordinary run."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from scheduler.models import Job, Run
from scheduler.services import JobBusy, job_create, job_run_submit, run_cancel
from scheduler.workflows import WorkflowInputError
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]


def test_job_create__recurring__stored_with_cleaned_input_and_normalised_cron(user):
    job = job_create(
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


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * *"}, "cron"),
        ({"timezone_name": "Mars/Olympus"}, "timezone"),
        ({"max_retry": -1}, "max_retry"),
        ({"name": "  "}, "name"),
        ({"input": {"x": "one"}}, "x"),
        ({"workflow": "nope"}, "workflow"),
    ],
)
def test_job_create__bad_input__field_error_and_nothing_written(user, overrides, field):
    kwargs = {"owner_id": user.id, "name": "j", "workflow": ENGINE_WORKFLOW, "input": ENGINE_INPUT}

    with pytest.raises(WorkflowInputError) as excinfo:
        job_create(**{**kwargs, **overrides})

    assert field in excinfo.value.errors
    assert Job.objects.count() == 0


def test_job_create__same_name_twice__refused(user):
    job_create(owner_id=user.id, name="j", workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT)

    with pytest.raises(WorkflowInputError) as excinfo:
        job_create(owner_id=user.id, name="j", workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT)

    assert "name" in excinfo.value.errors and Job.objects.count() == 1


def test_job_cron_constraint__recurring_without_cron__refused_by_database(user):
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.create(owner=user, name="x", workflow=ENGINE_WORKFLOW, is_recurring=True, cron="")


def test_job_run_submit__run_carries_job_owner_priority_and_correlation(user):
    job = job_create(owner_id=user.id, name="j", workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, priority=7)

    run = job_run_submit(job_id=job.id)

    assert run.job_id == job.id and run.owner_id == user.id and run.priority == 7
    assert run.correlation_id == f"job:{job.id}" and run.input == job.input
    assert run.steps.get(seq=0).process_state == "pending"
    assert list(run.events.values_list("type", flat=True)) == ["received"]


def test_job_run_submit__non_idempotent_with_run_going__refused_until_it_ends(user):
    job = job_create(
        owner_id=user.id, name="j", workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, idempotent=False
    )
    first = job_run_submit(job_id=job.id)

    with pytest.raises(JobBusy) as excinfo:
        job_run_submit(job_id=job.id)

    assert excinfo.value.run_id == first.id
    assert Run.objects.filter(job=job).count() == 1
    run_cancel(run_id=first.id, actor="test")  # never claimed: cancelled at once
    assert Run.objects.get(pk=first.id).state == "cancelled"
    second = job_run_submit(job_id=job.id)
    assert second.id != first.id


def test_job_run_submit__idempotent__runs_may_overlap(user):
    job = job_create(owner_id=user.id, name="j", workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT)

    runs = [job_run_submit(job_id=job.id) for _ in range(2)]

    assert len({r.id for r in runs}) == 2
