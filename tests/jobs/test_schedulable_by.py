"""Who may schedule what (issue 18) through every interface: a customer (not staff) is refused
staff-only work - every internal kind - by the API (create, update, run now, backfill), by the
pages (not offered; a forged POST refused on `workflow`) and cannot reach the admin, where a
staff user without superuser powers schedules it. Each refusal writes nothing.

Real database, rolled back; no scheduler runs (`manual_scheduler`)."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from rest_framework.test import APIClient

from ops.roles import OPERATOR_GROUP
from scheduler.dispatcher import transitions as job_transitions
from scheduler.models import Job
from scheduler.services.jobs import job_create
from tests.roles import ROLES, client_of, join_role, staff_in

from ..scheduler.test_jobs_permission import INTERNAL, NEVER_JOBS, STAFF_ONLY, internal_inputs, refusal
from .conftest import ORDER_INPUT, WORKFLOW, job_body, make_user, row_counts
from .test_pages import FORM

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

JOBS = "/api/jobs/"
ADMIN_JOBS = "/admin/scheduler/job/"


def _input(other: Any, workflow: str) -> dict[str, Any]:
    return dict(internal_inputs(other))[workflow]


def _legacy(owner: Any, workflow: str, job_input: dict[str, Any]) -> Job:
    """A customer's job of work that is staff-only now, as the old code let it be written."""
    job = job_create(
        owner_id=owner.pk,
        by_staff=False,
        name="legacy",
        workflow=WORKFLOW,
        input=ORDER_INPUT,
        cron="0 * * * *",
    )
    Job.objects.filter(pk=job.pk).update(workflow=workflow, input=job_input)
    return job


# -- API ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("workflow", INTERNAL)
def test_api_create__customer_internal_work__400_on_workflow_nothing_written(
    api: APIClient, other_user: Any, workflow: str
) -> None:
    counts = row_counts()

    response = api.post(JOBS, job_body(workflow=workflow, input=_input(other_user, workflow)), format="json")

    assert response.status_code == 400
    assert response.json() == {"workflow": [refusal(workflow)]}
    assert row_counts() == counts


@pytest.mark.parametrize("workflow", INTERNAL)
@pytest.mark.parametrize("method", ["put", "patch"])
def test_api_update__customer_switches_to_internal_work__400_job_unchanged(
    api: APIClient, user: Any, other_user: Any, workflow: str, method: str
) -> None:
    created = api.post(JOBS, job_body(), format="json").json()
    stored = Job.objects.get(pk=created["id"]).input
    counts = row_counts()

    body = {"name": "nightly", "workflow": workflow, "input": _input(other_user, workflow)}
    response = getattr(api, method)(created["url"], body, format="json")

    assert response.status_code == 400 and list(response.json()) == ["workflow"], response.json()
    job = Job.objects.get(pk=created["id"])
    assert (job.workflow, job.input) == (WORKFLOW, stored)
    assert row_counts() == counts


@pytest.mark.parametrize("workflow", INTERNAL)
def test_api_run_now_and_backfill__customer_legacy_internal_job__400_nothing_written(
    api: APIClient, user: Any, other_user: Any, workflow: str
) -> None:
    job = _legacy(user, workflow, _input(other_user, workflow))
    now = job_transitions.db_now()
    counts = row_counts()

    run_now = api.post(f"{JOBS}{job.pk}/run-now/")
    backfill = api.post(
        f"{JOBS}{job.pk}/backfill/",
        {"start": (now - timedelta(hours=3)).isoformat(), "end": (now - timedelta(minutes=1)).isoformat()},
        format="json",
    )

    assert run_now.status_code == 400 and list(run_now.json()) == ["workflow"], run_now.json()
    assert backfill.status_code == 400 and list(backfill.json()) == ["workflow"], backfill.json()
    assert row_counts() == counts


def test_api_create__staff_user__may_schedule_internal_work_for_themselves(db: None) -> None:
    from sasproject.tokens.services import api_token_rotate

    staff = join_role(make_user("apistaff"), OPERATOR_GROUP)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_rotate(user_id=staff.pk).key}")

    response = client.post(
        JOBS,
        job_body(workflow="task:webhooks.purge_deliveries", input={"kwargs": {"older_than_days": 30}}),
        format="json",
    )

    assert response.status_code == 201, response.json()
    assert Job.objects.get(owner=staff).workflow == "task:webhooks.purge_deliveries"


# -- pages ---------------------------------------------------------------------------------------


def _offered(page: str) -> list[str]:
    select = re.search(r'<select name="workflow"[^>]*>(.*?)</select>', page, re.S)
    assert select, page
    return re.findall(r'<option value="([^"]*)"', select.group(1))


def _selected(page: str) -> str:
    select = re.search(r'<select name="workflow"[^>]*>(.*?)</select>', page, re.S)
    assert select
    found = re.search(r'<option value="([^"]*)"[^>]*selected', select.group(1))
    return found.group(1) if found else ""


def _hints(page: str) -> dict[str, dict[str, str]]:
    found = re.search(r'<script id="workflow-hints" type="application/json">(.*?)</script>', page, re.S)
    assert found
    return dict(json.loads(found.group(1)))


def test_pages_form__customer__offers_customer_work_only_each_with_description_and_example(
    web: Client,
) -> None:
    page = web.get("/jobs/new/").content.decode()

    offered = _offered(page)
    hints = _hints(page)
    assert "order_fulfilment" in offered and "http.call" in offered
    for name in INTERNAL:
        assert name not in offered and name not in hints, name
    assert not [name for name in offered if name.startswith("task:")]
    # The default is a customer's workflow (it was catalogue.reprice, the first by name).
    assert _selected(page) == "http.call"
    for name in ("order_fulfilment", "http.call"):
        assert hints[name]["text"] and json.loads(hints[name]["example"]), hints[name]
    assert set(hints) == set(offered)


def test_pages_form__staff__offers_staff_only_work_too_marked_so(web: Client, user: Any) -> None:
    join_role(user, OPERATOR_GROUP)

    page = web.get("/jobs/new/").content.decode()

    assert set(STAFF_ONLY) <= set(_offered(page)) and not set(NEVER_JOBS) & set(_offered(page))
    assert "Purge old webhook deliveries (task:webhooks.purge_deliveries) - staff only" in page
    assert "Staff only." in _hints(page)["catalogue.reprice"]["text"]


@pytest.mark.parametrize("workflow", INTERNAL)
def test_pages_create__forged_post_of_internal_work__error_on_workflow_nothing_written(
    web: Client, other_user: Any, workflow: str
) -> None:
    counts = row_counts()

    response = web.post(
        "/jobs/new/", {**FORM, "workflow": workflow, "input": json.dumps(_input(other_user, workflow))}
    )

    assert response.status_code == 400
    form = response.context["form"]
    assert form.errors == {"workflow": [refusal(workflow)]}
    assert html.escape(refusal(workflow)) in response.content.decode()
    assert row_counts() == counts


@pytest.mark.parametrize("workflow", INTERNAL)
def test_pages_edit__forged_post_of_internal_work__refused_job_unchanged(
    web: Client, user: Any, other_user: Any, workflow: str
) -> None:
    job = job_create(
        owner_id=user.pk,
        by_staff=False,
        name="nightly",
        workflow=WORKFLOW,
        input=ORDER_INPUT,
        cron="30 2 * * *",
    )
    stored = job.input
    counts = row_counts()

    response = web.post(
        f"/jobs/{job.pk}/edit/",
        {**FORM, "workflow": workflow, "input": json.dumps(_input(other_user, workflow))},
    )

    assert response.status_code == 400 and list(response.context["form"].errors) == ["workflow"]
    job.refresh_from_db()
    assert (job.workflow, job.input) == (WORKFLOW, stored)
    assert row_counts() == counts


def test_pages_run_now__customer_legacy_internal_job__not_started_with_a_message(
    web: Client, user: Any, other_user: Any
) -> None:
    job = _legacy(user, "webhook_delivery", _input(other_user, "webhook_delivery"))
    counts = row_counts()

    response = web.post(f"/jobs/{job.pk}/run-now/", follow=True)

    assert f"Not started: {refusal('webhook_delivery')}" in html.unescape(response.content.decode())
    assert row_counts() == counts
    # Its edit form shows the job's workflow as it is (not silently another one), marked.
    edit = web.get(f"/jobs/{job.pk}/edit/").content.decode()
    assert _selected(edit) == "webhook_delivery" and "staff only, not available to you" in edit


# -- admin ---------------------------------------------------------------------------------------


def _staff_client(*perms: str) -> tuple[Client, Any]:
    """An "Operators" member (staff work) who is not a superuser, with the jobs admin's model
    permissions."""
    staff = join_role(make_user("opsdesk"), OPERATOR_GROUP)
    staff.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="scheduler", codename__in=perms)
    )
    client = Client()
    client.force_login(staff)
    return client, staff


def test_admin__staff_without_superuser__schedules_staff_only_work(db: None) -> None:
    client, staff = _staff_client("add_job", "change_job", "view_job")
    assert not staff.is_superuser

    add = client.get(f"{ADMIN_JOBS}add/")
    response = client.post(
        f"{ADMIN_JOBS}add/",
        {
            **FORM,
            "owner": staff.pk,
            "name": "purge weekly",
            "workflow": "task:webhooks.purge_deliveries",
            "input": json.dumps({"kwargs": {"older_than_days": 30}}),
            "_save": "Save",
        },
    )

    assert add.status_code == 200 and set(STAFF_ONLY) <= set(_offered(add.content.decode()))
    assert not set(NEVER_JOBS) & set(_offered(add.content.decode()))
    assert response.status_code == 302, response.context["adminform"].form.errors
    job = Job.objects.get(owner=staff)
    assert job.workflow == "task:webhooks.purge_deliveries"


def test_admin__staff_only_work_for_a_customer_owner__refused_on_workflow(user: Any) -> None:
    client, _ = _staff_client("add_job", "change_job", "view_job")
    counts = row_counts()

    response = client.post(
        f"{ADMIN_JOBS}add/",
        {
            **FORM,
            "owner": user.pk,
            "workflow": "catalogue.reprice",
            "input": '{"percent": "5"}',
            "_save": "Save",
        },
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert errors == {"workflow": [refusal("catalogue.reprice", owner=True)]}
    assert row_counts() == counts


def test_admin__customer__cannot_reach_it(web: Client) -> None:
    for url in (ADMIN_JOBS, f"{ADMIN_JOBS}add/"):
        response = web.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/"), url
    response = web.post(
        f"{ADMIN_JOBS}add/", {**FORM, "workflow": "catalogue.reprice", "input": '{"percent": "5"}'}
    )
    assert response.status_code == 302 and not Job.objects.exists()


def test_admin_run_now__customers_legacy_internal_job__refused_with_a_message(
    user: Any, other_user: Any
) -> None:
    client, _ = _staff_client("change_job", "view_job")
    job = _legacy(
        user, "task:webhooks.purge_deliveries", _input(other_user, "task:webhooks.purge_deliveries")
    )
    counts = row_counts()

    response = client.post(f"{ADMIN_JOBS}{job.pk}/operate/run_now/", {"confirmed": "yes"}, follow=True)

    text = html.unescape(response.content.decode())
    assert refusal("task:webhooks.purge_deliveries", owner=True) in text
    assert row_counts() == counts


# -- issue 26: the staff-work permission, not is_staff; never-jobs refused to everyone ------------


def _token_client(user: Any) -> APIClient:
    from sasproject.tokens.services import api_token_rotate

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_rotate(user_id=user.pk).key}")
    return client


@pytest.mark.parametrize("role", ["read_only", "no_group"])
@pytest.mark.parametrize("workflow", STAFF_ONLY)
def test_api_create__staff_without_staff_work__400_on_workflow_nothing_written(
    other_user: Any, role: str, workflow: str
) -> None:
    """A read-only operator, or staff in no group, is refused staff-only work by the API (the
    purge of every tenant's deliveries, the catalogue's reprice, another user's export)."""
    client = _token_client(staff_in(f"staff-{role}", ROLES[role]))
    counts = row_counts()

    response = client.post(
        JOBS, job_body(workflow=workflow, input=_input(other_user, workflow)), format="json"
    )

    assert response.status_code == 400 and response.json() == {"workflow": [refusal(workflow)]}
    assert row_counts() == counts


@pytest.mark.parametrize("workflow", NEVER_JOBS)
def test_api_create__operator_forging_a_customers_owner_id__400_on_workflow_nothing_written(
    other_user: Any, workflow: str
) -> None:
    """An operator's job of `webhook_delivery` / `alert_webhook` naming a customer's owner_id
    would be signed with that customer's secret: refused on `workflow`, nothing written."""
    client = _token_client(staff_in("op-forger", OPERATOR_GROUP))
    job_input = {
        "delivery_id": 1,
        "owner_id": other_user.pk,
        "url": "https://receiver.example.com/hook",
        "body": '{"type": "completed", "order_id": "x"}',
        "headers": {},
    }
    if workflow == "alert_webhook":
        job_input = {k: job_input[k] for k in ("owner_id", "url", "body")}
    counts = row_counts()

    response = client.post(JOBS, job_body(workflow=workflow, input=job_input), format="json")

    assert response.status_code == 400 and response.json() == {"workflow": [refusal(workflow)]}
    assert row_counts() == counts


@pytest.mark.parametrize("role", ["read_only", "no_group"])
def test_pages__staff_without_staff_work__not_offered_and_forged_post_refused(
    other_user: Any, role: str
) -> None:
    web = client_of(staff_in(f"web-{role}", ROLES[role]))
    counts = row_counts()

    page = web.get("/jobs/new/").content.decode()
    forged = web.post(
        "/jobs/new/",
        {
            **FORM,
            "workflow": "task:webhooks.purge_deliveries",
            "input": json.dumps(_input(other_user, "task:webhooks.purge_deliveries")),
        },
    )

    assert not set(INTERNAL) & set(_offered(page))
    assert forged.status_code == 400
    assert forged.context["form"].errors == {"workflow": [refusal("task:webhooks.purge_deliveries")]}
    assert row_counts() == counts


def test_admin__operator_adding_a_webhook_delivery_job__refused_on_workflow(other_user: Any) -> None:
    client, staff = _staff_client("add_job", "change_job", "view_job")
    counts = row_counts()

    response = client.post(
        f"{ADMIN_JOBS}add/",
        {
            **FORM,
            "owner": staff.pk,
            "workflow": "webhook_delivery",
            "input": json.dumps(_input(other_user, "webhook_delivery")),
            "_save": "Save",
        },
    )

    assert response.status_code == 200
    assert response.context["adminform"].form.errors == {"workflow": [refusal("webhook_delivery")]}
    assert row_counts() == counts
