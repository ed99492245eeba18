"""The operator admin, through Django's test client on the real database (rolled back)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from alerting.models import Alert
from orders.workflows import ORDER_WORKFLOW
from scheduler.models import Run, Step, TaskExecutionHistory

from .factories import order_completed, order_failed, order_pending, order_running

# The tests play the scheduler (see factories.py): no claim inside order_submit.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

CHANGELISTS = [
    "admin:scheduler_run_changelist",
    "admin:scheduler_step_changelist",
    "admin:scheduler_taskexecutionhistory_changelist",
    "admin:alerting_alert_changelist",
    "admin:orders_order_changelist",
]


@pytest.fixture
def orders(customer: Any) -> dict[str, Any]:
    return {
        "pending": order_pending(customer),
        "running": order_running(customer),
        "completed": order_completed(customer),
        "failed": order_failed(customer),
    }


def _text(response: Any) -> str:
    assert response.status_code == 200, response.status_code
    return response.content.decode()


@pytest.mark.parametrize("url_name", CHANGELISTS)
def test_changelist__staff__renders_rows(staff_client: Client, orders: dict[str, Any], url_name: str) -> None:
    html = _text(staff_client.get(reverse(url_name)))
    assert 'id="result_list"' in html
    # Every engine list shows (or links) the failed run.
    assert str(orders["failed"].run_id)[-8:] in html


def test_run_changelist__columns__state_progress_and_alerts(
    staff_client: Client, orders: dict[str, Any]
) -> None:
    html = _text(staff_client.get(reverse("admin:scheduler_run_changelist")))
    assert 'class="sas-badge sas-failed"' in html
    assert 'class="sas-badge sas-running"' in html
    assert '<span class="sas-progress-done">3/3</span>' in html  # the completed run
    assert '<span class="sas-progress">1/3</span>' in html  # running and failed: reserve done
    assert str(orders["running"].id) in html  # correlation id = order id
    # The failed run is linked to the open "runs needing an operator" alert.
    assert f"?links__run__id__exact={orders['failed'].run_id}&amp;status=open" in html


def test_detail_pages__staff__render_read_only(staff_client: Client, orders: dict[str, Any]) -> None:
    run_id = orders["failed"].run_id
    html = _text(staff_client.get(reverse("admin:scheduler_run_change", args=[run_id])))
    # Inlines: steps with failures/max, the event log and the execution history.
    assert "release_inventory" in html
    assert "Failed (permanent)" in html  # a history row
    assert "Compensating" in html  # an event row
    assert "card declined" in html
    assert 'name="_save"' not in html  # view-only: a run is changed by services only
    assert "Resume compensation" in html  # the detail-page button for a failed run

    step = Step.objects.filter(run_id=run_id).first()
    history = TaskExecutionHistory.objects.filter(run_id=run_id).first()
    alert = Alert.objects.filter(links__run_id=run_id).first()
    assert step and history and alert
    for url in (
        reverse("admin:scheduler_step_change", args=[step.pk]),
        reverse("admin:scheduler_taskexecutionhistory_change", args=[history.pk]),
        reverse("admin:alerting_alert_change", args=[alert.pk]),
        reverse("admin:orders_order_change", args=[orders["failed"].pk]),
    ):
        html = _text(staff_client.get(url))
        assert 'name="_save"' not in html, url
        assert str(run_id)[-8:] in html, url


def test_add_and_delete__engine_models__forbidden(staff_client: Client, orders: dict[str, Any]) -> None:
    run_id = orders["pending"].run_id
    assert staff_client.get(reverse("admin:scheduler_run_add")).status_code == 403
    assert staff_client.get(reverse("admin:scheduler_run_delete", args=[run_id])).status_code == 403
    history = TaskExecutionHistory.objects.filter(run_id=orders["running"].run_id).first()
    assert history is not None
    url = reverse("admin:scheduler_taskexecutionhistory_delete", args=[history.pk])
    assert staff_client.post(url, {"post": "yes"}).status_code == 403
    assert TaskExecutionHistory.objects.filter(pk=history.pk).exists()
    # A POST to the change page does not edit the run.
    staff_client.post(reverse("admin:scheduler_run_change", args=[run_id]), {"state": "completed"})
    assert Run.objects.get(pk=run_id).state == Run.State.PENDING


def test_run_changelist__50_runs__constant_query_count(staff_client: Client, customer: Any) -> None:
    url = reverse("admin:scheduler_run_changelist")

    def make(n: int) -> None:
        for i in range(n):
            if i % 10 == 0:
                order_failed(customer)
            elif i % 5 == 0:
                order_running(customer)
            else:
                order_pending(customer)

    make(5)
    with CaptureQueriesContext(connection) as few:
        html = _text(staff_client.get(url))
    assert html.count('name="_selected_action"') == 5
    make(45)
    with CaptureQueriesContext(connection) as many:
        html = _text(staff_client.get(url))
    assert html.count('name="_selected_action"') == 50
    assert len(many) == len(few), [q["sql"][:120] for q in many.captured_queries]
    assert len(many) <= 12


def test_run_changelist__filters(staff_client: Client, orders: dict[str, Any]) -> None:
    url = reverse("admin:scheduler_run_changelist")
    needs = _text(staff_client.get(url, {"attention": "needs"}))
    assert needs.count('name="_selected_action"') == 1
    assert str(orders["failed"].run_id) in needs

    assert _text(staff_client.get(url, {"attention": "stuck"})).count('name="_selected_action"') == 0
    running_step = Step.objects.get(run_id=orders["running"].run_id, process_state=Step.State.PROCESSING)
    Step.objects.filter(pk=running_step.pk).update(complete_by=timezone.now() - timedelta(minutes=1))
    stuck = _text(staff_client.get(url, {"attention": "stuck"}))
    assert stuck.count('name="_selected_action"') == 1
    assert str(orders["running"].run_id) in stuck
    overdue = _text(staff_client.get(reverse("admin:scheduler_step_changelist"), {"overdue": "yes"}))
    assert overdue.count('name="_selected_action"') == 0  # steps have no actions: count rows instead
    assert overdue.count("charge_payment") >= 1

    states = _text(staff_client.get(url, {"state__exact": "completed", "workflow": ORDER_WORKFLOW}))
    assert str(orders["completed"].run_id) in states
    assert str(orders["failed"].run_id) not in states
    assert _text(staff_client.get(url, {"workflow": ORDER_WORKFLOW})).count('name="_selected_action"') == 4


@pytest.mark.parametrize(
    ("key", "how"),
    [("failed", "run_id"), ("failed", "order_id"), ("failed", "username")],
)
def test_run_search__exact_keys(
    staff_client: Client, orders: dict[str, Any], customer: Any, key: str, how: str
) -> None:
    order = orders[key]
    term = {"run_id": str(order.run_id), "order_id": str(order.id), "username": customer.username}[how]
    html = _text(staff_client.get(reverse("admin:scheduler_run_changelist"), {"q": term}))
    assert str(order.run_id) in html
    expected = 4 if how == "username" else 1
    assert html.count('name="_selected_action"') == expected


def test_step_and_history_search(staff_client: Client, orders: dict[str, Any]) -> None:
    run_id = orders["running"].run_id
    key = f"{run_id}:charge_payment"
    html = _text(staff_client.get(reverse("admin:scheduler_step_changelist"), {"q": key}))
    assert html.count(f"/admin/scheduler/run/{run_id}/change/") == 1
    html = _text(
        staff_client.get(reverse("admin:scheduler_taskexecutionhistory_changelist"), {"q": "admin-tests:1"})
    )
    assert str(run_id)[-8:] in html
    html = _text(
        staff_client.get(reverse("admin:scheduler_taskexecutionhistory_changelist"), {"q": "nobody:0"})
    )
    assert str(run_id)[-8:] not in html


def test_non_staff__redirected_to_login(customer: Any, orders: dict[str, Any]) -> None:
    client = Client()
    client.force_login(customer)
    for url in (
        reverse("admin:scheduler_run_changelist"),
        reverse("admin:scheduler_run_health"),
        reverse("admin:scheduler_run_change", args=[orders["pending"].run_id]),
    ):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("admin:login")), url
    response = client.post(
        reverse("admin:scheduler_run_operate", args=[orders["running"].run_id, "cancel"]),
    )
    assert response.status_code == 302
    assert Run.objects.get(pk=orders["running"].run_id).state == Run.State.RUNNING


def test_staff_without_permissions__cannot_operate(orders: dict[str, Any], db: None) -> None:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    viewer = get_user_model().objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_run"))
    client = Client()
    client.force_login(viewer)
    run_id = orders["running"].run_id
    html = _text(client.get(reverse("admin:scheduler_run_change", args=[run_id])))
    assert "Cancel run" not in html
    response = client.post(reverse("admin:scheduler_run_operate", args=[run_id, "cancel"]))
    assert response.status_code == 403
    response = client.post(
        reverse("admin:scheduler_run_changelist"),
        {"action": "cancel_runs", "_selected_action": [str(run_id)]},
    )
    assert Run.objects.get(pk=run_id).state == Run.State.RUNNING


def test_job_pages__list_detail_and_runs_link__find_the_jobs_runs(
    staff_client: Client, customer: Any
) -> None:
    from scheduler.services import job_create, job_run_submit

    job = job_create(
        by_staff=False,
        owner_id=customer.id,
        name="nightly restock",
        workflow=ORDER_WORKFLOW,
        input={"items": [{"sku": "SKU-1", "quantity": 1}], "amount": "5.00", "currency": "EUR"},
        cron="0 3 * * *",
    )
    run = job_run_submit(by_staff=False, job_id=job.id)

    listing = _text(staff_client.get(reverse("admin:scheduler_job_changelist")))
    assert "nightly restock" in listing and "0 3 * * *" in listing
    detail = _text(staff_client.get(reverse("admin:scheduler_job_change", args=[job.id])))
    assert f"?job__id__exact={job.id}" in detail  # the job admin is jobs/admin.py
    runs = _text(staff_client.get(reverse("admin:scheduler_run_changelist"), {"job__id__exact": job.id}))
    assert str(run.id)[-8:] in runs
