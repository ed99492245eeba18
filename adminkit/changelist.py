"""A changelist whose out-of-range filter in the address is the admin's "bad filter" answer (a
redirect with ?e=1), not a 500: Django's date hierarchy adds a day to `year=9999&month=12&day=31`
(or a year to `year=9999`), an OverflowError, which Django's own check (ValueError,
ValidationError) lets through (issue 18)."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest


class BoundedChangeList(ChangeList):
    def get_filters(self, request: HttpRequest) -> Any:
        try:
            return super().get_filters(request)
        except (OverflowError, ValueError) as exc:
            raise IncorrectLookupParameters(exc) from exc

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> Any:
        try:
            return super().get_queryset(request, exclude_parameters)
        except OverflowError as exc:
            raise IncorrectLookupParameters(exc) from exc


class BoundedChangeListMixin:
    """For a ModelAdmin: its changelist is a BoundedChangeList."""

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return BoundedChangeList
