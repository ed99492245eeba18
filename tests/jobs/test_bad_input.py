"""Issue 18's inputs that gave a 500 on main (an OverflowError or a DataError behind a debug
page that showed DATABASE_URL), each now a 400 or a form error naming the field and its limit,
with nothing written: through the API, the pages, the admin, the preview and the report. And
the unknown job field that was dropped silently (`max_retires: 5` made a job with 0 retries).
(Deep JSON and NUL on every JSON endpoint: tests/sasproject/test_json_input.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from orders.models import Order
from scheduler.services.jobs import job_create

from .conftest import ORDER_INPUT, WORKFLOW, job_body, row_counts
from .test_admin import staff
from .test_pages import FORM

__all__ = ["staff"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

YEARS = "must be between the years 1970 and 2999"


def _rows() -> tuple[int, ...]:
    return (*row_counts(), Order.objects.count())


def _no_raise(client: Any) -> Any:
    """A 500 comes back as a response (the assertion names it), not as the view's exception."""
    client.raise_request_exception = False
    return client


# -- the API -------------------------------------------------------------------------------------

API_500S = [
    pytest.param({"catchup_window": 1e20}, "catchup_window", "between 0 and 366 days", id="catchup-1e20"),
    pytest.param({"catchup_window": -1}, "catchup_window", "between 0 and 366 days", id="catchup-negative"),
    pytest.param({"start_at": "0001-01-01T00:00:00Z"}, "start_at", YEARS, id="start-year-1"),
    pytest.param({"start_at": "9999-12-31T23:59:59Z"}, "start_at", YEARS, id="start-year-9999"),
    pytest.param({"end_at": "9999-12-31T23:59:59Z"}, "end_at", YEARS, id="end-year-9999"),
    pytest.param(
        {"start_at": "0001-01-01T00:00:00+14:00"}, "start_at", "out of range", id="start-year-0-utc"
    ),
    pytest.param(
        {"cron": "", "recurring": False, "run_at": "9999-12-31T23:59:59Z"}, "run_at", YEARS, id="run-at-9999"
    ),
    pytest.param({"retry_backoff": 10**400}, "retry_backoff", "too large", id="backoff-huge-int"),
    pytest.param({"retry_backoff": 0}, "retry_backoff", "(more than 0)", id="backoff-zero"),
    pytest.param({"jitter": 10**30}, "jitter", "between 0 and 3600", id="jitter-huge"),
    pytest.param({"max_firings": 0}, "max_firings", "between 1 and 2000000000", id="max-firings-zero"),
    pytest.param({"priority": 10**6}, "priority", "whole number between", id="priority-huge"),
    pytest.param({"max_retires": 5}, "max_retires", "unknown field", id="unknown-field"),
]


@pytest.mark.parametrize(("change", "field", "message"), API_500S)
def test_api_create__input_that_gave_a_500__400_naming_the_field_and_nothing_written(
    api: APIClient, change: dict[str, Any], field: str, message: str
) -> None:
    before = _rows()

    response = _no_raise(api).post(
        "/api/jobs/", json.dumps(job_body(**change)), content_type="application/json"
    )

    assert response.status_code == 400, response.content[:300]
    assert message in " ".join(response.json()[field]), response.json()
    assert _rows() == before


@pytest.mark.parametrize(("change", "field", "message"), API_500S)
def test_api_edit__input_that_gave_a_500__400_and_the_job_unchanged(
    api: APIClient, user: Any, change: dict[str, Any], field: str, message: str
) -> None:
    job = job_create(
        by_staff=False, owner_id=user.pk, name="kept", workflow=WORKFLOW, input=ORDER_INPUT, cron="30 2 * * *"
    )
    before = (_rows(), type(job).objects.values().get(pk=job.pk))

    response = _no_raise(api).patch(
        f"/api/jobs/{job.pk}/", json.dumps(change), content_type="application/json"
    )

    assert response.status_code == 400, response.content[:300]
    assert field in response.json(), response.json()
    assert (_rows(), type(job).objects.values().get(pk=job.pk)) == before


def test_api__unknown_fields__each_named_with_the_known_fields_errors(api: APIClient) -> None:
    before = _rows()

    response = api.post("/api/jobs/", job_body(max_retires=5, prority=3, max_retry=-1), format="json")

    assert response.status_code == 400
    assert response.json() == {
        "max_retires": ["unknown field"],
        "prority": ["unknown field"],
        "max_retry": ["must be a whole number between 0 and 100"],
    }
    assert _rows() == before


def test_api__unknown_fields_of_pause_backfill_and_an_order_item__refused(api: APIClient, user: Any) -> None:
    job = job_create(
        by_staff=False, owner_id=user.pk, name="kept", workflow=WORKFLOW, input=ORDER_INPUT, cron="30 2 * * *"
    )
    before = _rows()

    pause = api.post(f"/api/jobs/{job.pk}/pause/", {"note": "x", "force": True}, format="json")
    backfill = api.post(
        f"/api/jobs/{job.pk}/backfill/",
        {"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T01:00:00Z", "dry_run": True},
        format="json",
    )
    order = api.post(
        "/api/orders/",
        {"items": [{"sku": "S", "quantity": 1, "qty": 9}], "amount": "5.00", "currency": "EUR"},
        format="json",
    )

    assert (pause.status_code, pause.json()) == (400, {"force": ["unknown field"]})
    assert (backfill.status_code, backfill.json()) == (400, {"dry_run": ["unknown field"]})
    assert (order.status_code, order.json()) == (400, {"items": {"0": {"qty": ["unknown field"]}}})
    assert _rows() == before
    assert not type(job).objects.get(pk=job.pk).paused_at


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({"start": "0001-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "start", id="year-1"),
        pytest.param({"start": "2026-01-01T00:00:00Z", "end": "9999-12-31T23:59:59Z"}, "end", id="year-9999"),
    ],
)
def test_api_backfill__year_out_of_range__400_and_nothing_queued(
    api: APIClient, user: Any, body: dict[str, str], field: str
) -> None:
    job = job_create(
        by_staff=False, owner_id=user.pk, name="kept", workflow=WORKFLOW, input=ORDER_INPUT, cron="30 2 * * *"
    )
    before = _rows()

    response = _no_raise(api).post(f"/api/jobs/{job.pk}/backfill/", body, format="json")

    assert response.status_code == 400, response.content[:300]
    assert response.json()[field] == [YEARS]
    assert _rows() == before


@pytest.mark.parametrize(
    ("query", "field"),
    [
        pytest.param({"start_at": "0001-01-01T00:00"}, "start_at", id="start-year-1"),
        pytest.param({"start_at": "9999-12-31T23:59"}, "start_at", id="start-year-9999"),
        pytest.param({"end_at": "9999-12-31T23:59"}, "end_at", id="end-year-9999"),
        pytest.param({"start_at": "0001-01-01T00:00+05:00"}, "start_at", id="year-1-with-offset"),
        pytest.param(
            {"timezone": "Pacific/Kiritimati", "start_at": "9999-12-31T23:59"},
            "start_at",
            id="year-9999-zone",
        ),
    ],
)
def test_preview__year_out_of_range__400_naming_the_field(
    api: APIClient, query: dict[str, str], field: str
) -> None:
    response = _no_raise(api).get("/api/jobs/preview/", {"cron": "* * * * *", **query})

    assert response.status_code == 400, response.content[:300]
    assert response.json()[field] == [YEARS]


# -- the pages and the admin ---------------------------------------------------------------------

FORM_500S = [
    pytest.param(
        {"catchup_window": "100000000000000000000"}, "catchup_window", "366 days", id="catchup-1e20"
    ),
    pytest.param({"start_at": "0001-01-01T00:00"}, "start_at", YEARS, id="start-year-1"),
    pytest.param({"start_at": "9999-12-31T23:59"}, "start_at", YEARS, id="start-year-9999"),
    pytest.param(
        {"timezone": "Pacific/Kiritimati", "end_at": "9999-12-31T23:59"}, "end_at", YEARS, id="end-9999-zone"
    ),
    pytest.param({"kind": "once", "run_at": "9999-12-31T23:59"}, "run_at", YEARS, id="run-at-9999"),
    pytest.param({"retry_backoff": "1e308"}, "retry_backoff", "86400", id="backoff-1e308"),
    pytest.param({"input": "[" * 1000 + "]" * 1000}, "input", "nested more than 32", id="input-deep"),
    pytest.param({"input": '{"card": "tok\\u0000"}'}, "input", "NUL", id="input-nul"),
]


@pytest.mark.parametrize(("change", "field", "message"), FORM_500S)
def test_form__input_that_gave_a_500__error_on_its_field_and_nothing_written(
    web: Client, change: dict[str, Any], field: str, message: str
) -> None:
    before = _rows()

    response = _no_raise(web).post("/jobs/new/", {**FORM, **change})

    assert response.status_code == 400
    assert message in " ".join(response.context["form"].errors[field]), response.context["form"].errors
    assert _rows() == before


@pytest.mark.parametrize(("change", "field", "message"), FORM_500S)
def test_admin__input_that_gave_a_500__error_on_its_field_and_nothing_written(
    staff: Client, user: Any, change: dict[str, Any], field: str, message: str
) -> None:
    before = _rows()

    response = _no_raise(staff).post(
        "/admin/scheduler/job/add/", {**FORM, **change, "owner": user.pk, "_save": "Save"}
    )

    assert response.status_code == 200  # the admin's form again, with the error
    assert message in " ".join(response.context["adminform"].form.errors[field])
    assert _rows() == before


# -- the report ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field"),
    [
        pytest.param({"start": "0001-01-01", "end": "0001-01-02"}, "start", id="year-1"),
        pytest.param({"start": "9999-12-30", "end": "9999-12-31"}, "end", id="end-date-9999"),
        pytest.param(
            {"start": "9999-12-31T00:00", "end": "9999-12-31T23:00", "tz": "Pacific/Kiritimati"},
            "end",
            id="9999-zone",
        ),
        pytest.param({"start": "0001-01-01T00:00+05:00", "end": "2026-01-01"}, "start", id="year-1-offset"),
    ],
)
def test_report__year_out_of_range__400_on_the_api_and_the_page(
    api: APIClient, web: Client, query: dict[str, str], field: str
) -> None:
    response = _no_raise(api).get("/api/reports/", {"window": "custom", **query})
    page = _no_raise(web).get("/reports/", {"window": "custom", **query})

    assert response.status_code == 400, response.content[:300]
    assert response.json()[field] == [YEARS]
    assert page.status_code == 400 and YEARS in page.content.decode()


def test_report__staff_naming_a_user_with_a_nul__404_not_a_500(staff: Client) -> None:
    """PostgreSQL refuses a NUL in a query's text: the name is no user, asked of the database or not."""
    api = _no_raise(staff).get("/api/reports/", {"user": "a\x00b"})  # the API takes the session too
    page = _no_raise(staff).get("/reports/", {"user": "a\x00b"})

    assert (api.status_code, page.status_code) == (404, 404)


@pytest.mark.parametrize(
    "query",
    [
        pytest.param(
            {"created_at__year": "9999", "created_at__month": "12", "created_at__day": "31"}, id="day-9999"
        ),
        pytest.param({"created_at__year": "9999"}, id="year-9999"),
    ],
)
def test_admin_changelist__date_filter_out_of_range__the_bad_filter_redirect(
    staff: Client, query: dict[str, str]
) -> None:
    """Django's date hierarchy adds a day (or a month, a year) to the date asked for."""
    response = _no_raise(staff).get("/admin/scheduler/run/", query)

    assert response.status_code == 302 and response["Location"].endswith("?e=1")
