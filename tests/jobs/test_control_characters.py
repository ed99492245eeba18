"""Names that reach an e-mail's subject or a header (issue 26, item 7): a job's name and a
customer's alert rule's name with a control character - a CR/LF that split the subject and made
Django refuse the alert's e-mail, a NUL, a tab, a bidi override, a line separator - are refused
with a 400 or a form error naming `name`, through the API, the pages and the admin, and nothing
is written. (Operator rules in the admin, and a stored bad name's e-mail:
tests/alerting/test_names_and_secret.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from alerting.models import AlertRule
from sasproject.names import control_character_find, control_characters_replaced
from scheduler.models import Job

from ..alerting.conftest import job as make_job
from .conftest import job_body, row_counts
from .test_admin import JOBS, staff
from .test_pages import FORM

__all__ = ["staff"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

BAD_NAMES = [
    pytest.param("nightly\r\nBcc: victim@example.com", id="crlf-header-injection"),
    pytest.param("nightly\nreport", id="lf"),
    pytest.param("night\tly", id="tab"),
    pytest.param("night\x1bly", id="escape"),
    pytest.param("night\x7fly", id="del"),
    pytest.param("night\x85ly", id="c1-next-line"),
    pytest.param("\u202eylthgin", id="bidi-override"),
    pytest.param("night\u200bly", id="zero-width-space"),
    pytest.param("night\u2028ly", id="line-separator"),
    pytest.param("night\u2029ly", id="paragraph-separator"),
]


def _control_error(errors: Any) -> bool:
    return "control characters" in json.dumps(errors)


def test_names__the_rule__refuses_controls_and_keeps_visible_text() -> None:
    for visible in ("nightly", "Nächtlicher Lauf", "夜間ジョブ", "a - b (c) / d", "emoji 🙂"):
        assert control_character_find(visible) is None
    assert control_characters_replaced("a\r\nBcc: x") == "a  Bcc: x"


# -- jobs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", BAD_NAMES)
def test_job_api_create__control_character_in_name__400_on_name_nothing_written(
    api: APIClient, name: str
) -> None:
    counts = row_counts()

    response = api.post("/api/jobs/", json.dumps(job_body(name=name)), content_type="application/json")

    assert response.status_code == 400, response.content[:300]
    assert _control_error(response.json()["name"]), response.json()
    assert row_counts() == counts


def test_job_api_edit__crlf_in_name__400_and_the_job_unchanged(api: APIClient, user: Any) -> None:
    created = api.post("/api/jobs/", json.dumps(job_body()), content_type="application/json")
    assert created.status_code == 201, created.json()
    before = Job.objects.values().get(pk=created.json()["id"])

    body = json.dumps({"name": "a\r\nBcc: x@evil.example"})
    response = api.patch(f"/api/jobs/{before['id']}/", body, content_type="application/json")

    assert response.status_code == 400 and _control_error(response.json()["name"]), response.json()
    assert Job.objects.values().get(pk=before["id"]) == before


@pytest.mark.parametrize("name", BAD_NAMES[:3])
def test_job_service__control_character_in_name__refused_on_name(user: Any, name: str) -> None:
    """The rule written once (scheduler/services/job_input.py): a caller that skips the serializer and
    the form (a management command, a test, a future endpoint) is refused too."""
    from scheduler.workflows import WorkflowInputError

    with pytest.raises(WorkflowInputError) as refused:
        make_job(user, name=name)
    assert _control_error(refused.value.errors["name"])
    assert not Job.objects.exists()


def test_job_page_create__crlf_in_name__form_error_on_name_nothing_written(web: Client) -> None:
    counts = row_counts()

    response = web.post("/jobs/new/", {**FORM, "name": "nightly\r\nBcc: victim@example.com"})

    assert response.status_code == 400
    assert _control_error(response.context["form"].errors["name"]), response.context["form"].errors
    assert row_counts() == counts


def test_job_admin_add__crlf_in_name__error_on_name_nothing_written(staff: Client, user: Any) -> None:
    counts = row_counts()

    bad = "nightly\r\nBcc: victim@example.com"
    response = staff.post(f"{JOBS}add/", {**FORM, "name": bad, "owner": user.pk, "_save": "Save"})

    form = response.context["adminform"].form
    assert response.status_code == 200 and _control_error(form.errors["name"]), form.errors
    assert row_counts() == counts
    assert not LogEntry.objects.exists()


# -- customers' alert rules ------------------------------------------------------------------------


@pytest.mark.parametrize("name", BAD_NAMES)
def test_alert_rule_api__control_character_in_name__400_on_name_nothing_written(
    api: APIClient, user: Any, name: str
) -> None:
    j = make_job(user)
    AlertRule.objects.all().delete()  # the shipped operator rules

    response = api.post(
        "/api/alert-rules/",
        {"job": j.pk, "kind": "job_consecutive_failures", "threshold": 3, "name": name},
        format="json",
    )

    assert response.status_code == 400, response.content[:300]
    assert _control_error(response.json()["name"]), response.json()
    assert not AlertRule.objects.exists()


def test_alert_rule_service__crlf_in_name__refused_on_name(user: Any) -> None:
    from alerting.customer import AlertRuleInputError, CustomerRuleInput, customer_rule_create

    j = make_job(user)
    AlertRule.objects.all().delete()
    data = CustomerRuleInput(job_id=j.pk, kind="job_consecutive_failures", threshold=3, name="a\r\nb")

    with pytest.raises(AlertRuleInputError) as refused:
        customer_rule_create(owner_id=user.pk, data=data)
    assert _control_error(refused.value.errors["name"])
    assert not AlertRule.objects.exists()


def test_alert_rule_page__crlf_in_name__form_error_on_name_nothing_written(web: Client, user: Any) -> None:
    j = make_job(user)
    AlertRule.objects.all().delete()

    response = web.post(
        reverse("jobs:alert_rule_create", args=[j.pk]),
        {
            "kind": "job_consecutive_failures",
            "threshold": "2",
            "min_runs": "1",
            "window_minutes": "60",
            "notify_email": "on",
            "webhook_url": "",
            "name": "two in a row\r\nBcc: victim@example.com",
        },
    )

    assert response.status_code == 400
    assert _control_error(response.context["rule_form"].errors["name"]), response.context["rule_form"].errors
    assert not AlertRule.objects.exists()
