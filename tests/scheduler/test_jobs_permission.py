"""Who may schedule what (issue 18), in the job services and the dispatcher, on the real
database: staff-only work (every workflow that is not `customer_schedulable`) is refused to a
customer on create, edit, run now and backfill - a field error on `workflow`, nothing written -
and a customer's existing job of staff-only work is skipped at firing with a history row.

Issue 26: "staff" is the staff-work permission (the "Operators" role, scheduler/permissions.py),
not `is_staff`; and the work the engine starts for a row of its own (webhook deliveries, alert
notifications) is never a job - refused to everyone, operators and superusers included."""

from __future__ import annotations

from typing import Any

import pytest

from exports.models import Export
from ops.roles import OPERATOR_GROUP, READ_ONLY_GROUP
from scheduler.models import Job, Run, ScheduledJob, TaskExecutionHistory
from scheduler.services import job_backfill, job_create, job_run_now, job_run_submit, job_update
from scheduler.workflows import WorkflowNotPermitted, get_workflow, workflows_permitted
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW
from tests.roles import join_role, staff_in

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
        ("alert_webhook", {"url": "http://127.0.0.1:6379/", "body": "FLUSHALL", "owner_id": other.pk}),
        ("catalogue.reprice", {"percent": "-90"}),
        ("exports.history_csv", {"export_id": str(export.pk)}),
        ("task:webhooks.purge_deliveries", {"kwargs": {"older_than_days": 1}}),
    ]


# Never jobs: refused to everyone. Staff-only: to all but staff work's holders.
NEVER_JOBS = ["webhook_delivery", "alert_webhook"]
STAFF_ONLY = ["catalogue.reprice", "exports.history_csv", "task:webhooks.purge_deliveries"]
INTERNAL = [*NEVER_JOBS, *STAFF_ONLY]


def refusal(workflow: str, *, owner: bool = False) -> str:
    """The message on `workflow` when someone without staff work (or, `owner`, a job's owner
    without it) asks for `workflow`."""
    if workflow in NEVER_JOBS:
        return f"{workflow!r} is internal: the engine starts it itself, it is never a job"
    if owner:
        return (
            f"{workflow!r} is staff-only work: the job's owner is not staff holding the staff-work permission"
        )
    return (
        f"{workflow!r} is staff-only work: only staff holding the staff-work permission (the Operators "
        "role) can schedule it"
    )


@pytest.fixture
def customer(django_user_model: Any) -> Any:
    return django_user_model.objects.create(username="cust")


@pytest.fixture
def other(django_user_model: Any) -> Any:
    return django_user_model.objects.create(username="other")


@pytest.fixture
def staff(django_user_model: Any) -> Any:
    """An "Operators" member: holds staff work."""
    return staff_in("ops", OPERATOR_GROUP)


def _counts() -> tuple[int, int, int, int]:
    return (Job.objects.count(), ScheduledJob.objects.count(), Run.objects.count(), H.objects.count())


def _internal_input(other: Any, workflow: str) -> dict[str, Any]:
    return dict(internal_inputs(other))[workflow]


def test_defaults__only_the_order_workflow_and_http_call_are_customer_schedulable() -> None:
    shipped = {"order_fulfilment", "http.call", *INTERNAL}
    customers = {w.name for w in workflows_permitted(staff=False)} & shipped
    everyone = {w.name for w in workflows_permitted(staff=True)} & shipped

    assert customers == {"order_fulfilment", "http.call"}
    assert everyone == shipped - set(NEVER_JOBS)
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

    assert refused.value.errors == {"workflow": [refusal(workflow)]}
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
    # Staff acting does not help: the runs would be the customer's (and never-jobs are nobody's).
    with pytest.raises(WorkflowNotPermitted) as refused:
        job_run_now(job_id=job.id, by_staff=True)
    assert refused.value.errors == {"workflow": [refusal(workflow, owner=True)]}

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
        f"not permitted: {workflow!r} is internal and never a job"
        if workflow in NEVER_JOBS
        else f"not permitted: {workflow!r} is staff-only work and the job's owner is not staff holding the "
        "staff-work permission"
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


# -- issue 26: the staff-work permission, not is_staff ------------------------------------------


@pytest.mark.parametrize("group", [READ_ONLY_GROUP, None], ids=["read_only", "no_group"])
def test_job_create__staff_owner_without_staff_work__refused_on_workflow_nothing_written(
    group: str | None,
) -> None:
    """A job is its owner's: staff-only work for a staff owner who lacks staff work (a read-only
    operator, staff in no group) is refused even when the person acting holds it."""
    owner = staff_in("viewer", group)
    before = _counts()

    with pytest.raises(WorkflowNotPermitted) as refused:
        job_create(
            owner_id=owner.id,
            by_staff=True,
            name="purge",
            workflow="task:webhooks.purge_deliveries",
            input={"kwargs": {"older_than_days": 1}},
        )

    assert refused.value.errors == {"workflow": [refusal("task:webhooks.purge_deliveries", owner=True)]}
    assert _counts() == before


@pytest.mark.parametrize("workflow", NEVER_JOBS)
def test_job_create__never_jobs__refused_to_an_operator_and_a_superuser(
    staff: Any, django_user_model: Any, other: Any, workflow: str
) -> None:
    """A job of a webhook delivery or an alert notification would choose, by its input, whose
    secret signs what body to which URL: nobody may make one."""
    root = django_user_model.objects.create_superuser("root", "root@example.com", None)
    before = _counts()

    for owner in (staff, root):
        with pytest.raises(WorkflowNotPermitted) as refused:
            job_create(
                owner_id=owner.id,
                by_staff=True,
                name="x",
                workflow=workflow,
                input=_internal_input(other, workflow),
            )
        assert refused.value.errors == {"workflow": [refusal(workflow)]}

    assert _counts() == before


def test_dispatch__owner_left_the_operators_role__staff_only_job_skipped(staff: Any) -> None:
    """Still `is_staff`, but no longer an "Operators" member: the firing is refused."""
    job = job_create(
        owner_id=staff.id,
        by_staff=True,
        name="purge",
        workflow="task:webhooks.purge_deliveries",
        input={"kwargs": {"older_than_days": 30}},
        cron="0 * * * *",
    )
    make_due(job)
    assert join_role(staff, READ_ONLY_GROUP).is_staff

    result = dispatch()

    assert result.started == 0 and not Run.objects.filter(job=job).exists()
    row = H.objects.get(job=job)
    assert row.status == H.Status.SKIPPED and "staff-work permission" in row.detail["reason"]
