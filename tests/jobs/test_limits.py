"""Fair share per owner on the jobs' doors (issue 18): the job_write rate on the pages as on the
API (create, edit, run now, backfill), the active-jobs and runs-in-flight quotas, the customer
priority band (API, form; staff in the admin may go past it). Each refusal names its limit and
writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.test import Client
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from scheduler.models import Job, Run
from scheduler.services.jobs import job_create

from .conftest import ORDER_INPUT, WORKFLOW, job_body, row_counts
from .test_pages import FORM

JOBS = "/api/jobs/"


def _job(owner: Any, name: str = "mine", **fields: Any) -> Job:
    fields.setdefault("by_staff", False)
    return job_create(
        owner_id=owner.pk, name=name, workflow=WORKFLOW, input=ORDER_INPUT, cron="0 * * * *", **fields
    )


def _messages(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


# -- the job_write rate: pages and API, one budget -------------------------------------------------


def test_form__over_the_rate__429_form_error_naming_it_nothing_written(
    web: Client, user: Any, settings: Any
) -> None:
    settings.SAS_RATES = {**settings.SAS_RATES, "job_write": "2/minute"}

    statuses = [web.post("/jobs/new/", {**FORM, "name": f"n{i}"}).status_code for i in range(2)]
    counts = row_counts()
    refused = web.post("/jobs/new/", {**FORM, "name": "third"})

    assert statuses == [302, 302]
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert "the limit is 2 per minute" in refused.content.decode()
    assert "2 per minute" in " ".join(refused.context["form"].non_field_errors())
    assert row_counts() == counts


def test_form_and_api__share_one_budget(web: Client, api: APIClient, user: Any, settings: Any) -> None:
    settings.SAS_RATES = {**settings.SAS_RATES, "job_write": "2/minute"}

    by_page = web.post("/jobs/new/", {**FORM, "name": "page"})
    by_api = api.post(JOBS, job_body(name="api"), format="json")
    refused = api.post(JOBS, job_body(name="over"), format="json")

    assert (by_page.status_code, by_api.status_code) == (302, 201)
    assert refused.status_code == 429 and "2 per minute" in refused.json()["detail"]
    assert Job.objects.filter(owner=user).count() == 2


def test_edit_page__over_the_rate__429_nothing_changed(web: Client, user: Any, settings: Any) -> None:
    job = _job(user)
    settings.SAS_RATES = {**settings.SAS_RATES, "job_write": "1/hour"}

    first = web.post(f"/jobs/{job.pk}/edit/", {**FORM, "name": "renamed"})
    refused = web.post(f"/jobs/{job.pk}/edit/", {**FORM, "name": "again"})

    job.refresh_from_db()
    assert first.status_code == 302 and refused.status_code == 429
    assert "1 per hour" in refused.content.decode() and job.name == "renamed"


def test_run_now_page__over_the_rate__message_naming_it_no_run(web: Client, user: Any, settings: Any) -> None:
    job = _job(user, overlap_policy="allow_all")
    settings.SAS_RATES = {**settings.SAS_RATES, "job_write": "1/minute"}

    web.post(f"/jobs/{job.pk}/run-now/")
    refused = web.post(f"/jobs/{job.pk}/run-now/")

    assert refused.status_code == 302
    assert any("the limit is 1 per minute" in m for m in _messages(refused))
    assert Run.objects.filter(job=job).count() == 1


def test_api_edit_and_backfill__over_the_rate__429_with_retry_after(
    api: APIClient, user: Any, settings: Any
) -> None:
    job = _job(user)
    settings.SAS_RATES = {**settings.SAS_RATES, "job_write": "1/minute"}

    edited = api.patch(f"{JOBS}{job.pk}/", {"name": "renamed"}, format="json")
    backfill = api.post(
        f"{JOBS}{job.pk}/backfill/",
        {"start": "2024-01-01T00:00:00Z", "end": "2024-01-01T03:00:00Z"},
        format="json",
    )

    assert edited.status_code == 200
    assert backfill.status_code == 429 and int(backfill["Retry-After"]) > 0
    assert backfill.json()["limit"] == "job_write 1 per minute"
    assert "job changes" in backfill.json()["detail"] and job.scheduled.filter(reason="backfill").count() == 0


# -- quotas -------------------------------------------------------------------------------------------


def test_api_create__at_the_active_jobs_quota__429_naming_it_nothing_written(
    api: APIClient, user: Any, settings: Any
) -> None:
    settings.SAS_QUOTAS = {**settings.SAS_QUOTAS, "ACTIVE_JOBS": 2}
    _job(user, "a")
    _job(user, "b")
    counts = row_counts()

    refused = api.post(JOBS, job_body(name="c"), format="json")

    assert refused.status_code == 429
    detail = refused.json()["detail"]
    assert detail.startswith("You have 2 active jobs") and "the limit is 2 per user" in detail
    assert row_counts() == counts


def test_form_create__at_the_active_jobs_quota__form_error_naming_it(
    web: Client, user: Any, settings: Any
) -> None:
    settings.SAS_QUOTAS = {**settings.SAS_QUOTAS, "ACTIVE_JOBS": 1}
    _job(user, "a")
    counts = row_counts()

    refused = web.post("/jobs/new/", {**FORM, "name": "b"})

    assert refused.status_code == 429
    assert "the limit is 1 per user" in " ".join(refused.context["form"].non_field_errors())
    assert row_counts() == counts


def test_active_jobs_quota__finished_jobs_do_not_count_but_one_rearmed_does(user: Any, settings: Any) -> None:
    from scheduler.limits import QuotaExceeded
    from scheduler.services.jobs import job_update

    settings.SAS_QUOTAS = {**settings.SAS_QUOTAS, "ACTIVE_JOBS": 1}
    done = _job(user, "done")
    Job.objects.filter(pk=done.pk).update(finished_at=datetime(2024, 1, 1, tzinfo=UTC))
    _job(user, "live")  # the finished one does not count

    with pytest.raises(QuotaExceeded):
        job_update(by_staff=False, job_id=done.pk, cron="5 * * * *")  # re-arming it would make two

    assert Job.objects.get(pk=done.pk).finished_at is not None


def test_run_now__at_the_runs_in_flight_quota__429_and_page_message_no_run(
    api: APIClient, web: Client, user: Any, settings: Any
) -> None:
    job = _job(user, overlap_policy="allow_all")
    settings.SAS_QUOTAS = {**settings.SAS_QUOTAS, "RUNS_IN_FLIGHT": 2}
    assert api.post(f"{JOBS}{job.pk}/run-now/").json()["outcome"] == "started"
    assert api.post(f"{JOBS}{job.pk}/run-now/").json()["outcome"] == "started"

    by_api = api.post(f"{JOBS}{job.pk}/run-now/")
    by_page = web.post(f"/jobs/{job.pk}/run-now/")

    assert by_api.status_code == 429 and "You have 2 runs in flight" in by_api.json()["detail"]
    assert any("the limit is 2 per user" in m for m in _messages(by_page))
    assert Run.objects.filter(job=job).count() == 2


def test_dispatcher__owner_at_the_runs_quota__occurrence_skipped_with_history(
    user: Any, settings: Any
) -> None:
    from scheduler.models import ScheduledJob, TaskExecutionHistory
    from scheduler.services import jobs_dispatch
    from scheduler.services.jobs import job_run_now

    settings.SAS_QUOTAS = {**settings.SAS_QUOTAS, "RUNS_IN_FLIGHT": 1}
    busy = _job(user, "busy", overlap_policy="allow_all")
    job_run_now(by_staff=False, job_id=busy.pk)
    due = _job(user, "due")
    ScheduledJob.objects.filter(job=due).update(next_execution_at=datetime(2024, 1, 1, tzinfo=UTC))

    jobs_dispatch(instance="t", batch=10, max_batches=1)

    skipped = TaskExecutionHistory.objects.get(job=due, status="skipped")
    assert "runs in flight" in skipped.detail["reason"] and "limit is 1" in skipped.detail["reason"]
    assert not Run.objects.filter(job=due).exists()


# -- priority band ---------------------------------------------------------------------------------


@pytest.mark.parametrize("priority", [0, -1, -9, 32767, -1001])
def test_api__priority_outside_the_customer_band__400_naming_the_range(api: APIClient, priority: int) -> None:
    counts = row_counts()

    response = api.post(JOBS, job_body(priority=priority), format="json")

    assert response.status_code == 400
    assert "between -1000 and -10" in response.json()["priority"][0]
    assert row_counts() == counts


def test_api__priority_default_and_band_accepted(api: APIClient) -> None:
    default = api.post(JOBS, job_body(name="d"), format="json").json()
    low = api.post(JOBS, job_body(name="l", priority=-1000), format="json").json()

    assert (default["priority"], low["priority"]) == (-10, -1000)


def test_api_edit__priority_above_the_band__400(api: APIClient, user: Any) -> None:
    job = _job(user)

    response = api.patch(f"{JOBS}{job.pk}/", {"priority": 5}, format="json")

    assert response.status_code == 400 and "between -1000 and -10" in response.json()["priority"][0]
    assert Job.objects.get(pk=job.pk).priority == -10


def test_form__priority_above_the_band__error_on_the_field(web: Client) -> None:
    counts = row_counts()

    response = web.post("/jobs/new/", {**FORM, "priority": "100"})

    assert response.status_code == 400
    assert "between -1000 and -10" in response.context["form"].errors["priority"][0]
    assert row_counts() == counts


def test_admin__staff_may_set_a_system_priority(user: Any) -> None:
    staff = get_user_model().objects.create_superuser(username="ops-priority", password=None)
    client = Client()
    client.force_login(staff)
    admin_form = {**FORM, "priority": "500", "owner": user.pk, "_save": "Save"}

    response = client.post("/admin/scheduler/job/add/", admin_form)

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Job.objects.get(owner=user).priority == 500


def test_schema__declares_the_priority_range() -> None:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    priority = schema["components"]["schemas"]["JobWriteRequest"]["properties"]["priority"]

    assert (priority["minimum"], priority["maximum"]) == (-1000, -10)
