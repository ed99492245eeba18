"""Views that fail the way an overloaded database fails, for tests/sasproject/test_middleware.py."""

from __future__ import annotations

from django.db import IntegrityError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.urls import include, path


def refused(request: HttpRequest) -> HttpResponse:
    raise OperationalError("connection failed: FATAL:  sorry, too many clients already")


def integrity(request: HttpRequest) -> HttpResponse:
    raise IntegrityError("duplicate key value violates unique constraint")


def fine(request: HttpRequest) -> HttpResponse:
    return HttpResponse("fine")


urlpatterns = [
    path("api/refused/", refused),
    path("refused/", refused),
    path("integrity/", integrity),
    path("fine/", fine),
    path("", include("sasproject.urls")),
]
