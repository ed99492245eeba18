"""The job pages through Django's test client (real database, rolled back): the list, the form
(bad input shown on its field, nothing written), the job page and its buttons, isolation."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from ops.roles import OPERATOR_GROUP
from scheduler.models import Job, Run, ScheduledJob
from scheduler.services.jobs import job_create, job_run_now
from tests.roles import join_role

from .conftest import ORDER_INPUT, WORKFLOW, make_user, probe_workflow, row_counts

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

FORM = {
    "kind": "recurring",
    "name": "nightly",
    "workflow": WORKFLOW,
    "input": json.dumps(ORDER_INPUT),
    "cron": "30 2 * * *",
    "timezone": "Europe/Berlin",
    "run_at": "",
    "start_at": "",
    "end_at": "",
    "max_firings": "",
    "overlap_policy": "skip",
    "catchup_window": "",
    "jitter": "0",
    "max_retry": "0",
    "retry_backoff": "10",
    "priority": "-10",
    "idempotent": "on",
}

# The bad inputs, as a person types them into the form.
BAD_FORMS = [
    pytest.param({"cron": "61 * * * *"}, "cron", id="minute-61"),
    pytest.param({"cron": "*/0 * * * *"}, "cron", id="step-zero"),
    pytest.param({"cron": "0 0 * * * *"}, "cron", id="six-fields"),
    pytest.param({"cron": ""}, "cron", id="recurring-without-cron"),
    pytest.param({"timezone": "Mars/Olympus_Mons"}, "timezone", id="unknown-zone"),
    pytest.param(
        {"start_at": "2031-01-02T00:00", "end_at": "2031-01-01T00:00"}, "end_at", id="end-before-start"
    ),
    pytest.param({"max_retry": "-1"}, "max_retry", id="negative-retries"),
    pytest.param({"input": json.dumps({**ORDER_INPUT, "items": []})}, "input", id="workflow-input"),
    pytest.param({"input": "{not json"}, "input", id="not-json"),
]


def _messages(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def _job(owner: Any, **fields: Any) -> Job:
    defaults: dict[str, Any] = {
        "name": "nightly",
        "workflow": WORKFLOW,
        "input": ORDER_INPUT,
        "cron": "30 2 * * *",
        "timezone_name": "Europe/Berlin",
    }
    return job_create(by_staff=False, owner_id=owner.pk, **{**defaults, **fields})


def test_pages__signed_out__redirect_to_login(db: None) -> None:
    for url in ("/jobs/", "/jobs/new/", "/jobs/1/", "/jobs/1/edit/", "/jobs/1/delete/"):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), url


def test_list__empty_then_with_state_schedule_and_runs(web: Client, user: Any) -> None:
    empty = web.get("/jobs/")
    job = _job(user)
    paused = _job(user, name="weekly report", cron="0 9 * * 1", timezone_name="UTC")
    web.post(f"/jobs/{paused.pk}/pause/", {"note": "waiting for data"})
    job_run_now(by_staff=False, job_id=job.pk)

    listed = web.get("/jobs/")
    html = listed.content.decode()

    assert "No jobs yet" in empty.content.decode()
    assert listed.status_code == 200
    assert "nightly" in html and "weekly report" in html
    assert 'data-state="paused"' in html and "waiting for data" in html
    assert "At 02:30 AM (Europe/Berlin)" in html or "02:30" in html
    assert "badge-pending" in html  # the last run of "nightly", with its state
    assert 'class="active">My jobs' in html.replace("\n", "")


def test_create__valid_form__job_then_its_page(web: Client, user: Any) -> None:
    response = web.post("/jobs/new/", {**FORM, "start_at": "2030-06-01T10:00", "max_retry": "2"})

    job = Job.objects.get(owner=user)
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert job.cron == "30 2 * * *" and job.timezone == "Europe/Berlin" and job.max_retry == 2
    # Typed in the job's zone: 10:00 in Berlin in June is 08:00 UTC.
    assert job.start_at == datetime(2030, 6, 1, 8, 0, tzinfo=UTC)
    assert ScheduledJob.objects.filter(job=job, kind=ScheduledJob.Kind.NEXT).exists()
    page = web.get(response["Location"])
    assert page.status_code == 200 and "Job “nightly” created." in page.content.decode()


def test_create__workflow_without_input__empty_object_or_nothing_saves(web: Client, user: Any) -> None:
    # The task that takes no input is staff-only work: a staff user schedules it here.
    join_role(user, OPERATOR_GROUP)
    no_input = {**FORM, "workflow": "task:webhooks.purge_deliveries"}

    typed = [
        web.post("/jobs/new/", {**no_input, "name": f"purge {n}", "input": text})
        for n, text in enumerate(("{}", ""))
    ]
    refused = web.post("/jobs/new/", {**FORM, "name": "order without input", "input": "{}"})

    assert [r.status_code for r in typed] == [302, 302]
    saved = sorted(Job.objects.filter(owner=user).values_list("name", "input"))
    # Both saved, the input as the workflow cleans an empty one (a task's: no args, no kwargs).
    assert saved == [("purge 0", {"args": [], "kwargs": {}}), ("purge 1", {"args": [], "kwargs": {}})]
    # An order needs its input: the workflow says so, under the field; nothing saved.
    assert refused.status_code == 400 and "items" in refused.content.decode()
    assert not Job.objects.filter(name="order without input").exists()


def test_create__one_off__runs_once_at_its_time(web: Client, user: Any) -> None:
    once = {"kind": "once", "cron": "5 4 * * *", "run_at": "2030-01-01T09:30"}
    response = web.post("/jobs/new/", {**FORM, **once})

    job = Job.objects.get(owner=user)
    assert response.status_code == 302
    assert not job.is_recurring and job.cron == ""  # the cron field of the other kind is ignored
    assert job.run_at == datetime(2030, 1, 1, 8, 30, tzinfo=UTC)


@pytest.mark.parametrize(("change", "field"), BAD_FORMS)
def test_create__bad_input__error_on_its_field_and_nothing_written(
    web: Client, change: dict[str, Any], field: str
) -> None:
    counts = row_counts()

    response = web.post("/jobs/new/", {**FORM, **change})

    html = response.content.decode()
    assert response.status_code == 400
    assert response.context["form"].errors.get(field), response.context["form"].errors
    assert f'class="field has-error" id="field-{field}"' in html
    assert "Nothing was saved" in html
    assert row_counts() == counts


def test_create__any_customer_schedulable_workflow__offered_and_its_errors_on_input(web: Client) -> None:
    workflow = probe_workflow()
    counts = row_counts()

    page = web.get("/jobs/new/")
    refused = web.post("/jobs/new/", {**FORM, "workflow": workflow, "input": '{"url": "ftp://x", "verb": 1}'})

    assert f'<option value="{workflow}">' in page.content.decode()
    assert refused.status_code == 400
    assert refused.context["form"].errors["input"] == [
        "unknown field(s): verb",
        "url: must be an https URL",
    ]
    assert row_counts() == counts


def test_edit__form_shows_the_job__saves_a_change__bad_one_changes_nothing(web: Client, user: Any) -> None:
    job = _job(user, max_retry=3, retry_backoff=30.0)

    page = web.get(f"/jobs/{job.pk}/edit/")
    saved = web.post(f"/jobs/{job.pk}/edit/", {**FORM, "cron": "0 6 * * *", "max_retry": "3"})
    job.refresh_from_db()
    before = Job.objects.values().get(pk=job.pk)
    refused = web.post(f"/jobs/{job.pk}/edit/", {**FORM, "cron": "61 * * * *"})

    form = page.context["form"]
    assert form.initial["kind"] == "recurring" and form.initial["retry_backoff"] == 30
    assert saved.status_code == 302 and job.cron == "0 6 * * *"
    assert refused.status_code == 400 and refused.context["form"].errors["cron"]
    assert Job.objects.values().get(pk=job.pk) == before


def test_detail__runs_history_and_buttons(web: Client, user: Any) -> None:
    job = _job(user)

    run_now = web.post(f"/jobs/{job.pk}/run-now/")
    skipped = web.post(f"/jobs/{job.pk}/run-now/")
    page = web.get(f"/jobs/{job.pk}/")
    run = Run.objects.get(job=job)
    run_page = web.get(f"/jobs/{job.pk}/runs/{run.pk}/")
    paused = web.post(f"/jobs/{job.pk}/pause/", {"note": "holidays"}, follow=True)
    paused_again = web.post(f"/jobs/{job.pk}/pause/", {"note": "again"}, follow=True)
    resumed = web.post(f"/jobs/{job.pk}/resume/", follow=True)

    html = page.content.decode()
    assert _messages(run_now) == ["Started a run now."]
    assert "skips overlapping runs" in _messages(skipped)[-1]
    assert f'data-run="{run.pk}"' in html and f"/jobs/{job.pk}/runs/{run.pk}/" in html
    assert 'data-status="skipped"' in html and 'data-status="started"' in html
    assert 'id="run-now-form"' in html and 'id="pause-form"' in html and 'id="delete-job"' in html
    assert run_page.status_code == 200 and "reserve_inventory" in run_page.content.decode()
    assert 'id="paused-banner"' in paused.content.decode() and "holidays" in paused.content.decode()
    assert "already paused" in paused_again.content.decode()
    assert 'id="pause-form"' in resumed.content.decode()
    job.refresh_from_db()
    assert job.enabled


def test_delete__asks_first__then_deletes(web: Client, user: Any) -> None:
    job = _job(user)
    job_run_now(by_staff=False, job_id=job.pk)

    asked = web.get(f"/jobs/{job.pk}/delete/")
    still_there = Job.objects.filter(pk=job.pk).exists()
    done = web.post(f"/jobs/{job.pk}/delete/")

    assert asked.status_code == 200 and "Delete this job?" in asked.content.decode()
    assert still_there
    assert done.status_code == 302 and done["Location"] == "/jobs/"
    assert not Job.objects.filter(pk=job.pk).exists()
    assert Run.objects.filter(correlation_id=f"job:{job.pk}").count() == 1  # its run stays


def test_isolation__another_users_job__404_on_every_page(web: Client, user: Any) -> None:
    stranger = make_user("other")
    theirs = _job(stranger, name="theirs")
    run = job_run_now(by_staff=False, job_id=theirs.pk)
    before = Job.objects.values().get(pk=theirs.pk)

    gets = [
        f"/jobs/{theirs.pk}/",
        f"/jobs/{theirs.pk}/edit/",
        f"/jobs/{theirs.pk}/delete/",
        f"/jobs/{theirs.pk}/runs/{run.run_id}/",
    ]
    posts = [
        f"/jobs/{theirs.pk}/edit/",
        f"/jobs/{theirs.pk}/pause/",
        f"/jobs/{theirs.pk}/resume/",
        f"/jobs/{theirs.pk}/run-now/",
        f"/jobs/{theirs.pk}/delete/",
    ]

    assert [web.get(u).status_code for u in gets] == [404] * len(gets)
    assert [web.post(u, FORM).status_code for u in posts] == [404] * len(posts)
    assert "theirs" not in web.get("/jobs/").content.decode()
    assert Job.objects.values().get(pk=theirs.pk) == before
    assert Run.objects.filter(job=theirs).count() == 1


def test_list_and_history__paged(web: Client, user: Any) -> None:
    jobs = [_job(user, name=f"job {i:02}") for i in range(21)]
    for _ in range(26):  # one run, then 25 skipped occurrences: 26 history rows
        job_run_now(by_staff=False, job_id=jobs[0].pk)

    first = web.get("/jobs/").content.decode()
    second = web.get("/jobs/?page=2").content.decode()
    history = web.get(f"/jobs/{jobs[0].pk}/").content.decode()
    history_2 = web.get(f"/jobs/{jobs[0].pk}/?history=2").content.decode()

    assert "Page 1 of 2" in first and first.count("data-job=") == 20
    assert second.count("data-job=") == 1 and "job 00" in second  # oldest last
    assert 'aria-label="History pages"' in history and history.count('data-status="skipped"') == 25
    assert history_2.count("data-status=") == 1 and 'href="?history=1"' in history_2
