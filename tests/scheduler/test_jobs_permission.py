"""Who may schedule what (issue 18), in the job services and the dispatcher, on the real
database: staff-only work (every workflow that is not `customer_schedulable`) is refused to a
customer on create, edit, run now and backfill - a field error on `workflow`, nothing written -
and a customer's existing job of staff-only work is skipped at firing with a history row."""

from __future__ import annotations

from typing import Any

import pytest

from exports.models import Export
from scheduler.models import Job, Run, ScheduledJob, TaskExecutionHistory
from scheduler.services import job_backfill, job_create, job_run_now, job_run_submit, job_update
from scheduler.workflows import WorkflowNotPermitted, get_workflow, workflows_permitted
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW

from .jobs_support import dispatch, make_due, past_occurrence

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

H = TaskExecutionHistory


def internal_inputs(other: Any) -> list[tuple[str, dict[str, Any]]]:
    """Each kind of internal work with an input its own validation accepts: the refusal is about
    who asks, never about the input. The export is `other`'s."""
    export = Export.objects.create(owner=other)
    return [
        (
            "webhook_delivery",
            {
                "delivery_id": 1,
                "url": "http://127.0.0.1:6379/",
                "body": "FLUSHALL",
                "headers": {"Host": "internal", "X-SAS-Signature": "forged"},
            },
        ),
        ("catalogue.reprice", {"percent": "-90"}),
        ("exports.history_csv", {"export_id": str(export.pk)}),
        ("task:webhooks.purge_deliveries", {"kwargs": {"older_than_days": 1}}),
    ]


INTERNAL = ["webhook_delivery", "catalogue.reprice", "exports.history_csv", "task:webhooks.purge_deliveries"]


@pytest.fixture
def customer(django_user_model: Any) -> Any:
    return django_user_model.objects.create(username="cust")


@pytest.fixture
def other(django_user_model: Any) -> Any:
    return django_user_model.objects.create(username="other")


@pytest.fixture
def staff(django_user_model: Any) -> Any:
    return django_user_model.objects.create(username="ops", is_staff=True)


def _counts() -> tuple[int, int, int, int]:
    return (Job.objects.count(), ScheduledJob.objects.count(), Run.objects.count(), H.objects.count())


def _internal_input(other: Any, workflow: str) -> dict[str, Any]:
    return dict(internal_inputs(other))[workflow]


def test_defaults__only_the_order_workflow_and_http_call_are_customer_schedulable() -> None:
    shipped = {"order_fulfilment", "http.call", *INTERNAL}
    customers = {w.name for w in workflows_permitted(staff=False)} & shipped
    everyone = {w.name for w in workflows_permitted(staff=True)} & shipped

    assert customers == {"order_fulfilment", "http.call"}
    assert everyone == shipped
    for name in INTERNAL:
        assert get_workflow(name).customer_schedulable is False, name


@pytest.mark.parametrize("workflow", INTERNAL)
def test_job_create__customer_asks_for_internal_work__refused_on_workflow_and_nothing_written(
    customer: Any, other: Any, workflow: str
) -> None:
    job_input = _internal_input(other, workflow)
    before = _counts()

    with pytest.raises(WorkflowNotPermitted) as refused:
        job_create(owner_id=customer.id, by_staff=False, name="x", workflow=workflow, input=job_input)

    assert list(refused.value.errors) == ["workflow"]
    assert "staff-only work" in refused.value.errors["workflow"][0]
    assert _counts() == before


@pytest.mark.parametrize("workflow", INTERNAL)
def test_job_update__customer_switches_to_internal_work__refused_and_job_unchanged(
    customer: Any, other: Any, workflow: str
) -> None:
    job = job_create(
        owner_id=customer.id,
        by_staff=False,
        name="j",
        workflow=ENGINE_WORKFLOW,
        input=ENGINE_INPUT,
        cron="@daily",
    )
    before = _counts()

    with pytest.raises(WorkflowNotPermitted) as refused:
        job_update(job_id=job.id, by_staff=False, workflow=workflow, input=_internal_input(other, workflow))

    assert list(refused.value.errors) == ["workflow"]
    job.refresh_from_db()
    assert (job.workflow, job.input) == (ENGINE_WORKFLOW, ENGINE_INPUT)
    assert _counts() == before


def test_job_create__staff_for_a_staff_owner__allowed(staff: Any) -> None:
    job = job_create(
        owner_id=staff.id,
        by_staff=True,
        name="purge",
        workflow="task:webhooks.purge_deliveries",
        input={"kwargs": {"older_than_days": 30}},
        cron="15 3 * * *",
    )

    assert job.workflow == "task:webhooks.purge_deliveries"
    assert ScheduledJob.objects.filter(job=job, kind=ScheduledJob.Kind.NEXT).exists()


def test_job_create__staff_for_a_customer_owner__refused_the_runs_would_be_the_customers(
    customer: Any,
) -> None:
    with pytest.raises(WorkflowNotPermitted, match="the job's owner is not staff"):
        job_create(
            owner_id=customer.id,
            by_staff=True,
            name="x",
            workflow="catalogue.reprice",
            input={"percent": "5"},
        )

    assert not Job.objects.exists()


def _legacy_job(customer: Any, workflow: str, job_input: dict[str, Any], **fields: Any) -> Job:
    """A customer's job of work that is staff-only now (made before the rule, or before the
    workflow became staff-only): written past the service, as the old code let it be."""
    job = job_create(
        owner_id=customer.id,
        by_staff=False,
        name="legacy",
        workflow=ENGINE_WORKFLOW,
        input=ENGINE_INPUT,
        **fields,
    )
    Job.objects.filter(pk=job.pk).update(workflow=workflow, input=job_input)
    job.refresh_from_db()
    return job


@pytest.mark.parametrize("workflow", INTERNAL)
def test_run_now_and_backfill__customer_on_a_legacy_internal_job__refused_nothing_written(
    customer: Any, other: Any, workflow: str
) -> None:
    job = _legacy_job(customer, workflow, _internal_input(other, workflow), cron="0 * * * *")
    start = past_occurrence(job, back=3)
    before = _counts()

    with pytest.raises(WorkflowNotPermitted):
        job_run_now(job_id=job.id, by_staff=False)
    with pytest.raises(WorkflowNotPermitted):
        job_backfill(job_id=job.id, by_staff=False, start=start, end=past_occurrence(job))
    with pytest.raises(WorkflowNotPermitted):
        job_run_submit(job_id=job.id, by_staff=False)
    # Staff acting does not help: the runs would be the customer's.
    with pytest.raises(WorkflowNotPermitted, match="the job's owner is not staff"):
        job_run_now(job_id=job.id, by_staff=True)

    assert _counts() == before


@pytest.mark.parametrize("workflow", INTERNAL)
def test_dispatch__customer_job_of_staff_only_work__skipped_with_a_history_row_that_says_why(
    customer: Any, other: Any, workflow: str
) -> None:
    job = _legacy_job(customer, workflow, _internal_input(other, workflow), cron="0 * * * *")
    due = make_due(job)

    result = dispatch()

    assert result.started == 0 and result.skipped == 1
    assert not Run.objects.filter(job=job).exists()
    (row,) = H.objects.filter(job=job)
    assert row.status == H.Status.SKIPPED and row.scheduled_for == due
    assert row.detail["reason"] == (
        f"not permitted: {workflow!r} is staff-only work and the job's owner is not staff"
    )
    # The schedule moves on (the next occurrence will be refused the same way, each with a row).
    assert ScheduledJob.objects.get(job=job, kind=ScheduledJob.Kind.NEXT).scheduled_for > due


def test_dispatch__owner_no_longer_staff__their_staff_only_job_skipped(staff: Any) -> None:
    job = job_create(
        owner_id=staff.id,
        by_staff=True,
        name="purge",
        workflow="task:webhooks.purge_deliveries",
        input={"kwargs": {"older_than_days": 30}},
        cron="0 * * * *",
    )
    make_due(job)
    staff.is_staff = False
    staff.save(update_fields=["is_staff"])

    result = dispatch()

    assert result.started == 0 and not Run.objects.filter(job=job).exists()
    assert H.objects.get(job=job).status == H.Status.SKIPPED


def test_dispatch__staff_owner__staff_only_job_fires(staff: Any) -> None:
    job = job_create(
        owner_id=staff.id,
        by_staff=True,
        name="purge",
        workflow="task:webhooks.purge_deliveries",
        input={"kwargs": {"older_than_days": 30}},
        cron="0 * * * *",
    )
    make_due(job)

    assert dispatch().started == 1
    assert Run.objects.get(job=job).owner_id == staff.id
