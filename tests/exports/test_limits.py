"""Exports' fair share (issue 18): the export rate on the page and the API (one budget), the
exports-in-flight and runs-in-flight quotas; each refusal names its limit and writes nothing."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from exports.models import Export
from sasproject.tokens.services import api_token_rotate
from scheduler.models import Run

_names = itertools.count()


@pytest.fixture
def user(db: None) -> Any:
    return get_user_model().objects.create_user(username=f"exporter{next(_names)}")


@pytest.fixture
def web(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def api(user: Any) -> APIClient:
    token = api_token_rotate(user_id=user.pk)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture(autouse=True)
def _room(settings: Any) -> None:
    settings.SAS_QUOTAS = {**settings.SAS_QUOTAS, "EXPORTS_IN_FLIGHT": 100}


def _written(user: Any) -> tuple[int, int]:
    return Export.objects.filter(owner=user).count(), Run.objects.filter(owner=user).count()


def test_page_and_api__over_the_export_rate__429_naming_it_nothing_written(
    web: Client, api: APIClient, user: Any, settings: Any
) -> None:
    settings.SAS_RATES = {**settings.SAS_RATES, "export": "2/hour"}

    by_page = web.post("/exports/")
    by_api = api.post("/api/exports/")
    before = _written(user)
    api_refused = api.post("/api/exports/")
    page_refused = web.post("/exports/")

    assert (by_page.status_code, by_api.status_code) == (302, 201)
    assert api_refused.status_code == 429 and int(api_refused["Retry-After"]) > 0
    assert "the limit is 2 per hour" in api_refused.json()["detail"]
    assert page_refused.status_code == 429 and "the limit is 2 per hour" in page_refused.content.decode()
    assert _written(user) == before == (2, 2)


def test_at_the_exports_in_flight_quota__429_on_api_and_page(
    web: Client, api: APIClient, user: Any, settings: Any
) -> None:
    settings.SAS_QUOTAS = {**settings.SAS_QUOTAS, "EXPORTS_IN_FLIGHT": 2}
    assert [api.post("/api/exports/").status_code for _ in range(2)] == [201, 201]

    by_api = api.post("/api/exports/")
    by_page = web.post("/exports/")

    assert by_api.status_code == 429
    assert by_api.json()["detail"].startswith("You have 2 exports in flight; the limit is 2 per user")
    assert by_page.status_code == 429 and "You have 2 exports in flight" in by_page.content.decode()
    assert _written(user) == (2, 2)


def test_a_finished_export_frees_its_place(api: APIClient, user: Any, settings: Any) -> None:
    settings.SAS_QUOTAS = {**settings.SAS_QUOTAS, "EXPORTS_IN_FLIGHT": 1}
    api.post("/api/exports/")
    Run.objects.filter(owner=user).update(state=Run.State.COMPLETED)

    assert api.post("/api/exports/").status_code == 201


def test_at_the_runs_in_flight_quota__export_refused(api: APIClient, user: Any, settings: Any) -> None:
    settings.SAS_QUOTAS = {**settings.SAS_QUOTAS, "RUNS_IN_FLIGHT": 1}
    api.post("/api/exports/")

    refused = api.post("/api/exports/")

    assert refused.status_code == 429 and "runs in flight" in refused.json()["detail"]
    assert _written(user) == (1, 1)
