"""The operators' Job admin: list filters and search, add and change through the job services
(bad input: the field's error, nothing written), pause / resume / run now behind a confirmation
page with an audit entry, delete through `job_delete`."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.messages import get_messages
from django.test import Client

from scheduler.models import Job, Run, ScheduledJob, TaskExecutionHistory
from scheduler.services.jobs import job_create, job_pause, job_run_now

from .conftest import ORDER_INPUT, WORKFLOW, make_user, row_counts
from .test_pages import BAD_FORMS, FORM

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

JOBS = "/admin/scheduler/job/"


@pytest.fixture
def staff(db: None) -> Client:
    from django.contrib.auth import get_user_model

    client = Client()
    client.force_login(get_user_model().objects.create_superuser("ops-jobs", "ops@example.com", None))
    return client


def _job(owner: Any, **fields: Any) -> Job:
    defaults: dict[str, Any] = {
        "name": "nightly",
        "workflow": WORKFLOW,
        "input": ORDER_INPUT,
        "cron": "30 2 * * *",
        "timezone_name": "Europe/Berlin",
    }
    return job_create(by_staff=False, owner_id=owner.pk, **{**defaults, **fields})


def _messages(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def _action(client: Client, action: str, jobs: list[Job], **extra: str) -> Any:
    data = {"action": action, "_selected_action": [str(j.pk) for j in jobs], **extra}
    return client.post(JOBS, data, follow=True)


def test_changelist__filters_and_search(staff: Client, user: Any) -> None:
    job = _job(user)
    _job(user, name="hourly", cron="@hourly", overlap_policy="buffer_one")
    job_pause(job_id=job.pk, note="maintenance")
    job_run_now(by_staff=False, job_id=job.pk)

    pages = {
        "all": staff.get(JOBS),
        "owner": staff.get(JOBS, {"owner__id__exact": user.pk}),
        "enabled": staff.get(JOBS, {"enabled__exact": "0"}),
        "workflow": staff.get(JOBS, {"workflow": WORKFLOW}),
        "overlap": staff.get(JOBS, {"overlap_policy__exact": "buffer_one"}),
        "search": staff.get(JOBS, {"q": "hourly"}),
    }
    rows = {name: r.context["cl"].result_count for name, r in pages.items()}
    html = pages["all"].content.decode()

    assert {r.status_code for r in pages.values()} == {200}
    assert rows == {"all": 2, "owner": 2, "enabled": 1, "workflow": 2, "overlap": 1, "search": 1}
    assert "Paused" in html and "maintenance" in html and "sas-pending" in html  # state, note, last run


def test_add__valid__created_by_the_service_and_logged(staff: Client, user: Any) -> None:
    response = staff.post(f"{JOBS}add/", {**FORM, "owner": user.pk, "_save": "Save"})

    job = Job.objects.get()
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert job.owner_id == user.pk and job.cron == "30 2 * * *"
    assert ScheduledJob.objects.filter(job=job, kind=ScheduledJob.Kind.NEXT).count() == 1  # armed
    assert LogEntry.objects.filter(object_id=str(job.pk), action_flag=1).exists()


@pytest.mark.parametrize(("change", "field"), BAD_FORMS)
def test_add__bad_input__error_on_its_field_and_nothing_written(
    staff: Client, user: Any, change: dict[str, Any], field: str
) -> None:
    counts = row_counts()

    response = staff.post(f"{JOBS}add/", {**FORM, **change, "owner": user.pk, "_save": "Save"})

    form = response.context["adminform"].form
    assert response.status_code == 200
    assert form.errors.get(field), form.errors
    assert f"field-{field}" in response.content.decode() and "errorlist" in response.content.decode()
    assert row_counts() == counts
    assert not LogEntry.objects.exists()


def test_change__through_job_update__logged__bad_input_changes_nothing(staff: Client, user: Any) -> None:
    job = _job(user)
    url = f"{JOBS}{job.pk}/change/"

    page = staff.get(url)
    saved = staff.post(url, {**FORM, "cron": "0 6 * * *", "_save": "Save"})
    job.refresh_from_db()
    before = Job.objects.values().get(pk=job.pk)
    refused = staff.post(url, {**FORM, "timezone": "Atlantis/Capital", "_save": "Save"})

    html = page.content.decode()
    assert page.status_code == 200
    assert "Run now" in html and "Pause" in html and "nothing scheduled" not in html  # its next row
    assert saved.status_code == 302 and job.cron == "0 6 * * *"
    entry = LogEntry.objects.get(object_id=str(job.pk), action_flag=CHANGE)
    assert "cron" in entry.change_message
    assert refused.status_code == 200 and refused.context["adminform"].form.errors["timezone"]
    assert Job.objects.values().get(pk=job.pk) == before
    # The job's own history names the operator and the field (the refused save wrote nothing).
    edits = TaskExecutionHistory.objects.filter(job=job, kind="operator")
    edited = {"reason": "edited", "changed": ["cron"]}
    assert [(h.worker, h.detail) for h in edits] == [("admin:ops-jobs", edited)]


def test_pause_action__confirmation_page_then_paused_with_note_and_logged(staff: Client, user: Any) -> None:
    jobs = [_job(user), _job(user, name="second")]

    asked = _action(staff, "pause_jobs", jobs)
    unchanged = [j.enabled for j in Job.objects.order_by("pk")]
    done = _action(staff, "pause_jobs", jobs, confirmed="yes", note="vendor outage")
    again = _action(staff, "pause_jobs", jobs[:1], confirmed="yes")

    assert asked.status_code == 200 and 'name="note"' in asked.content.decode()
    assert "nightly" in asked.content.decode() and "second" in asked.content.decode()
    assert unchanged == [True, True]  # asking changed nothing
    assert [(j.enabled, j.paused_note) for j in Job.objects.order_by("pk")] == [(False, "vendor outage")] * 2
    assert any(m.startswith("Paused 2 job(s)") for m in _messages(done)), _messages(done)
    entries = LogEntry.objects.filter(action_flag=CHANGE).order_by("object_id")
    assert [e.change_message for e in entries] == ["Paused (admin); note: vendor outage"] * 2
    assert any("already paused" in m for m in _messages(again)), _messages(again)
    paused = TaskExecutionHistory.objects.filter(job__in=jobs, kind="operator").order_by("job_id")
    assert [(h.worker, h.detail) for h in paused] == [
        ("admin:ops-jobs", {"reason": "paused", "note": "vendor outage"})
    ] * 2  # one row per job paused; the refused second pause wrote none


def test_resume_and_run_now_actions__service_calls_logged(staff: Client, user: Any) -> None:
    job = _job(user)
    job_pause(job_id=job.pk)

    asked = _action(staff, "resume_jobs", [job])
    resumed = _action(staff, "resume_jobs", [job], confirmed="yes")
    ran = _action(staff, "run_jobs_now", [job], confirmed="yes")

    job.refresh_from_db()
    assert asked.status_code == 200 and "not</strong> run" in asked.content.decode()
    assert job.enabled
    assert any(m.startswith("Resumed 1 job(s)") for m in _messages(resumed))
    assert Run.objects.filter(job=job).count() == 1
    assert any("started" in m for m in _messages(ran)), _messages(ran)
    messages = list(LogEntry.objects.filter(object_id=str(job.pk)).values_list("change_message", flat=True))
    assert "Resumed (admin)" in messages and "Ran now (admin): started" in messages


def test_job_page_buttons__ask_then_act(staff: Client, user: Any) -> None:
    job = _job(user)
    url = f"{JOBS}{job.pk}/operate/run_now/"

    asked = staff.get(url)
    not_yet = Run.objects.filter(job=job).count()
    done = staff.post(url, {"confirmed": "yes"})
    paused = staff.post(f"{JOBS}{job.pk}/operate/pause/", {"confirmed": "yes", "note": "by hand"})
    unknown = staff.get(f"{JOBS}{job.pk}/operate/explode/")

    job.refresh_from_db()
    assert asked.status_code == 200 and "Yes, run jobs now" in asked.content.decode() and not_yet == 0
    assert done.status_code == 302 and Run.objects.filter(job=job).count() == 1
    assert paused.status_code == 302 and not job.enabled and job.paused_note == "by hand"
    assert unknown.status_code == 403


def test_delete__through_job_delete__runs_stay(staff: Client, user: Any) -> None:
    job = _job(user)
    job_run_now(by_staff=False, job_id=job.pk)

    response = staff.post(f"{JOBS}{job.pk}/delete/", {"post": "yes"})

    assert response.status_code == 302
    assert not Job.objects.exists()
    assert Run.objects.filter(correlation_id=f"job:{job.pk}", job__isnull=True).count() == 1


def test_job_page__occurrences_history_and_links(staff: Client, user: Any) -> None:
    job = _job(user)
    job_run_now(by_staff=False, job_id=job.pk)
    job_run_now(by_staff=False, job_id=job.pk)  # skipped: a history row

    page = staff.get(f"{JOBS}{job.pk}/change/")
    history = staff.get("/admin/scheduler/taskexecutionhistory/", {"job__id__exact": job.pk})
    runs = staff.get("/admin/scheduler/run/", {"job__id__exact": job.pk})

    html = page.content.decode()
    assert "Next occurrence" in html and "Skipped" in html
    assert f"?job__id__exact={job.pk}" in html
    assert history.status_code == 200 and history.context["cl"].result_count >= 2
    assert runs.status_code == 200 and runs.context["cl"].result_count == 1


def test_non_staff__no_admin(user: Any) -> None:
    client = Client()
    client.force_login(make_user("plain"))
    assert client.get(JOBS).status_code == 302  # to the admin's login
