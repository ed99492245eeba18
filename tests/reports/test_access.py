"""Who sees which report (page and API), and bad window input (400 with field errors)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from ops.roles import OPERATOR_GROUP
from tests.roles import ROLES, join_role

from ..orders.conftest import token_client
from .history import at, make_run, make_user

pytestmark = pytest.mark.django_db

# Custom ranges around the hand-built runs (2026-01-05 10:xx UTC), so "now" does not matter.
RANGE = {"start": "2026-01-05", "end": "2026-01-05"}


@pytest.fixture
def users() -> dict[str, Any]:
    alice, bob = make_user("alice"), make_user("bob")
    # Reading another user's report is staff work: an "Operators" member.
    staff = join_role(make_user("ops"), OPERATOR_GROUP)
    for minute in (0, 20, 40):
        make_run(alice, created=at(f"01-05 10:{minute:02d}:00"), state="completed", seconds=3)
    make_run(bob, created=at("01-05 10:30:00"), state="failed", seconds=9)
    return {"alice": alice, "bob": bob, "staff": staff}


def _page(viewer: Any, **params: str) -> Any:
    client = Client()
    client.force_login(viewer)
    return client.get("/reports/", params)


def test_api__own_report__only_own_runs(users: dict[str, Any]) -> None:
    alice = token_client(users["alice"]).get("/api/reports/", RANGE)
    bob = token_client(users["bob"]).get("/api/reports/", RANGE)

    assert alice.status_code == 200 and bob.status_code == 200
    assert alice.json()["user"]["username"] == users["alice"].username
    assert alice.json()["total"]["runs"] == 3 and alice.json()["total"]["outcomes"]["completed"] == 3
    assert bob.json()["total"]["runs"] == 1 and bob.json()["total"]["outcomes"]["failed"] == 1
    assert sum(b["runs"] for b in bob.json()["buckets"]) == 1


def test_api__another_users_report__404_for_a_user__allowed_for_staff(users: dict[str, Any]) -> None:
    alice_name = users["alice"].username
    as_bob = token_client(users["bob"]).get("/api/reports/", {**RANGE, "user": alice_name})
    as_bob_unknown = token_client(users["bob"]).get("/api/reports/", {**RANGE, "user": "nobody"})
    as_staff = token_client(users["staff"]).get("/api/reports/", {**RANGE, "user": alice_name})
    as_staff_unknown = token_client(users["staff"]).get("/api/reports/", {**RANGE, "user": "nobody"})

    assert as_bob.status_code == 404 and as_bob_unknown.status_code == 404  # the same answer
    assert alice_name not in as_bob.content.decode()
    assert as_staff.status_code == 200 and as_staff.json()["user"]["username"] == alice_name
    assert as_staff.json()["total"]["runs"] == 3
    assert as_staff_unknown.status_code == 404


def test_api__anonymous__401(users: dict[str, Any]) -> None:
    from rest_framework.test import APIClient

    assert APIClient().get("/api/reports/").status_code == 401


@pytest.mark.parametrize(
    ("params", "field", "message"),
    [
        ({"window": "month"}, "window", "must be one of hour, day, week, custom"),
        ({"window": "custom", "end": "2026-01-05"}, "start", "required for a custom range"),
        ({"start": "2026-01-05T10:00", "end": "2026-01-05T09:00"}, "end", "must be after start"),
        ({"start": "2026-01-05", "end": "2026-01-04"}, "end", "must be after start"),
        ({"start": "2025-11-01", "end": "2026-01-05"}, "end", "a range is at most 31 days long"),
        ({"start": "yesterday", "end": "2026-01-05"}, "start", "not a date or date-time"),
        ({"start": "2026-02-30", "end": "2026-03-05"}, "start", "not a date or date-time"),
        ({"window": "day", "start": "2026-01-05"}, "start", "only with window=custom"),
        ({"tz": "Mars/Olympus"}, "tz", "unknown time zone"),
    ],
)
def test_bad_window__400_with_the_field_error__page_and_api(
    users: dict[str, Any], params: dict[str, str], field: str, message: str
) -> None:
    api = token_client(users["alice"]).get("/api/reports/", params)
    page = _page(users["alice"], **params)

    assert api.status_code == 400
    assert message in " ".join(api.json()[field])
    assert page.status_code == 400
    assert message in page.content.decode()
    assert "chart-runs" not in page.content.decode()  # no figures for a window it could not read


def test_page__own_report__charts_and_table(users: dict[str, Any]) -> None:
    response = _page(users["alice"], **RANGE)
    html = response.content.decode()

    assert response.status_code == 200
    assert 'class="chart chart-runs"' in html and 'class="chart chart-durations"' in html
    assert 'data-figure="runs">3<' in html
    assert 'data-figure="success_rate">100.0%<' in html
    assert "order_fulfilment runs (not from a job)" in html
    assert 'href="/reports/" class="active">Reports' in html  # in the nav, marked as here
    assert 'id="id_user"' not in html  # no user picker for a customer
    client = Client()
    client.force_login(users["alice"])
    as_json = client.get("/api/reports/", RANGE)  # the page's JSON link: the session is enough
    assert as_json.status_code == 200 and as_json.json()["total"]["runs"] == 3


def test_page__another_user__404__staff_picks_anyone(users: dict[str, Any]) -> None:
    alice_name = users["alice"].username
    as_bob = _page(users["bob"], user=alice_name, **RANGE)
    as_staff = _page(users["staff"], user=alice_name, **RANGE)
    html = as_staff.content.decode()

    assert as_bob.status_code == 404
    assert as_staff.status_code == 200
    assert f"<strong>{alice_name}</strong>" in html and 'data-figure="runs">3<' in html
    assert 'id="id_user"' in html and f'<option value="{alice_name}">' in html


def test_page__signed_out__redirects_to_login() -> None:
    response = Client().get("/reports/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_schema__documents_the_report_endpoint() -> None:
    schema = Client().get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    assert "/api/reports/" in schema
    assert "missed_deadlines_by_kind" in schema and "duration_p95_seconds" in schema


@pytest.mark.parametrize("role", ["read_only", "no_group"])
def test_another_users_report__staff_without_staff_work__404_page_and_api(
    users: dict[str, Any], role: str
) -> None:
    """`is_staff` alone (a read-only operator, staff in no group) reads its own report only
    (issue 26): `?user=` answers 404 as for a customer, and no user picker is shown."""
    viewer = join_role(make_user(f"viewer-{role}"), ROLES[role])
    alice_name = users["alice"].username

    api = token_client(viewer).get("/api/reports/", {**RANGE, "user": alice_name})
    page = _page(viewer, user=alice_name, **RANGE)
    own = _page(viewer, **RANGE)

    assert api.status_code == 404 and alice_name not in api.content.decode()
    assert page.status_code == 404
    assert own.status_code == 200 and 'id="id_user"' not in own.content.decode()
