"""sasproject/middleware.py: a database that cannot serve a request answers 503 + Retry-After.
(The real thing - a pool timeout and PostgreSQL refusing connections, against the web as
`make run` serves it - is tests/orders/test_api_load_live.py.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse
from django.test import Client


class FailingSessionSave:
    """A middleware inside SessionMiddleware whose response step fails like a session save on an
    overloaded database: the error is raised outside any view."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        self.get_response(request)
        raise OperationalError("the connection pool had no connection within 5 s")


@pytest.fixture
def overload_urls(settings: Any) -> Client:
    settings.ROOT_URLCONF = "tests.sasproject.urls_overload"
    settings.SAS_WEB_RETRY_AFTER = 3
    return Client(raise_request_exception=False)


def test_api_view__operational_error__503_json_retry_after(overload_urls: Client):
    response = overload_urls.get("/api/refused/")
    assert response.status_code == 503
    assert response["Retry-After"] == "3"
    assert response.json() == {
        "detail": "The service is overloaded; please try again in 3 seconds.",
        "code": "database_unavailable",
    }


@pytest.mark.parametrize("debug", [False, True])
def test_page__operational_error__503_plain_page(overload_urls: Client, settings: Any, debug: bool):
    settings.DEBUG = debug
    response = overload_urls.get("/refused/")
    assert response.status_code == 503
    assert response["Retry-After"] == "3"
    assert response["Content-Type"].startswith("text/html")
    assert b"Service unavailable" in response.content and b"Traceback" not in response.content


def test_middleware__operational_error_outside_the_view__503(overload_urls: Client, settings: Any):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "tests.sasproject.test_middleware.FailingSessionSave"]
    response = overload_urls.get("/fine/")
    assert response.status_code == 503
    assert response["Retry-After"] == "3"


def test_other_database_errors__stay_500(overload_urls: Client):
    assert overload_urls.get("/integrity/").status_code == 500
    assert overload_urls.get("/fine/").status_code == 200
