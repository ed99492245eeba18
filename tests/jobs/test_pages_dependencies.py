"""A job's parents on the web form and in the operators' admin (issue 30): one per line, by
name, with an optional condition; saved by the job service; a cycle, a name that is none of the
owner's jobs (another customer's included) is refused on the field and nothing is written."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from scheduler.models import Job, JobDependency, TaskExecutionHistory

from .conftest import ORDER_INPUT, WORKFLOW, make_user, row_counts
from .test_admin import JOBS as ADMIN_JOBS
from .test_admin import staff
from .test_pages import FORM

__all__ = ["staff"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]


def _job(owner: Any, name: str, **fields: Any) -> Job:
    from scheduler.services.jobs import job_create

    return job_create(
        by_staff=False,
        owner_id=owner.pk,
        name=name,
        workflow=WORKFLOW,
        input=ORDER_INPUT,
        cron="30 2 * * *",
        **fields,
    )


def _edges() -> list[tuple[int, int, str]]:
    return sorted(JobDependency.objects.values_list("parent_id", "child_id", "condition"))


def test_create__parents_by_name__edges_written__form_shows_them_again(web: Client, user: Any) -> None:
    a, b = _job(user, "nightly import"), _job(user, "clean: up")

    response = web.post(
        "/jobs/new/",
        {**FORM, "name": "report", "kind": "once", "parents": "nightly import\n clean: up : on  Either \n"},
    )

    child = Job.objects.get(owner=user, name="report")
    assert response.status_code == 302, response.content.decode()[-2000:]
    assert _edges() == sorted([(a.pk, child.pk, "on_success"), (b.pk, child.pk, "on_either")])
    assert not child.scheduled.exists()  # once, no time, with parents: runs after them only
    form = web.get(f"/jobs/{child.pk}/edit/").context["form"]
    assert form.initial["parents"] == "clean: up: on either\nnightly import"


def test_edit__cycle__error_on_waits_for__nothing_written(web: Client, user: Any) -> None:
    a = _job(user, "a")
    b = _job(user, "b", parents=[{"job": a.pk}])
    before, edges = row_counts(), _edges()

    response = web.post(f"/jobs/{a.pk}/edit/", {**FORM, "name": "a", "parents": "b", "cron": "0 6 * * *"})

    assert response.status_code == 400
    assert response.context["form"].errors["parents"] == [
        "a cycle: 'b' -> 'a' -> 'b' (a job cannot wait for itself)"
    ]
    assert row_counts() == before and _edges() == edges
    assert Job.objects.get(pk=a.pk).cron == "30 2 * * *"  # the edit's other change too
    assert not TaskExecutionHistory.objects.filter(job=b, kind="operator").exists()


def test_create__another_customers_job_by_name__none_of_yours__nothing_written(
    web: Client, user: Any
) -> None:
    _job(make_user("eve"), "theirs")
    before = row_counts()

    response = web.post("/jobs/new/", {**FORM, "name": "mine", "parents": "theirs"})

    assert response.status_code == 400
    assert response.context["form"].errors["parents"] == ["you have no job named 'theirs'"]
    assert row_counts() == before and _edges() == []


def test_admin__parents_edited__cycle_refused_on_the_field(staff: Client, user: Any) -> None:
    a, b = _job(user, "a"), _job(user, "b")
    url = f"{ADMIN_JOBS}{b.pk}/change/"

    saved = staff.post(url, {**FORM, "name": "b", "parents": "a: on failure", "_save": "Save"})
    assert saved.status_code == 302
    assert _edges() == [(a.pk, b.pk, "on_failure")]
    before = row_counts()
    refused = staff.post(
        f"{ADMIN_JOBS}{a.pk}/change/", {**FORM, "name": "a", "parents": "b", "_save": "Save"}
    )

    assert refused.status_code == 200
    assert refused.context["adminform"].form.errors["parents"] == [
        "a cycle: 'b' -> 'a' -> 'b' (a job cannot wait for itself)"
    ]
    assert row_counts() == before and _edges() == [(a.pk, b.pk, "on_failure")]
