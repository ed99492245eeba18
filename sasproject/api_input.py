"""Serializer habits every API input shares.

`ClosedSerializer`: a body with a field the serializer does not have is refused, each unknown
field named (`{"max_retires": ["unknown field"]}`), so a typo is an error and not a default
silently taken (issue 18: `max_retires: 5` made a job with 0 retries). Nested serializers are
closed too. The schema says so: `sasproject.api_schema.AutoSchema` gives a closed serializer's
request component `additionalProperties: false`.

`StrictCharField`: a string field that takes only JSON strings.

`PageNumberPagination`: the API's pages (REST_FRAMEWORK DEFAULT_PAGINATION_CLASS).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import pagination, serializers
from rest_framework.exceptions import NotFound

UNKNOWN_FIELD = "unknown field"


class ClosedSerializer(serializers.Serializer[dict[str, Any]]):
    """A serializer that refuses fields it does not declare (with the errors of the fields it
    does, when there are both)."""

    def to_internal_value(self, data: Any) -> Any:
        unknown = sorted(set(data) - set(self.fields)) if isinstance(data, Mapping) else []
        errors = {str(name): [UNKNOWN_FIELD] for name in unknown}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if errors and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **errors}) from None
            raise
        if errors:
            raise serializers.ValidationError(errors)
        return value


class PageNumberPagination(pagination.PageNumberPagination):
    """DRF's, but `?page=` with no number is refused (404, as `?page=x` is) rather than read as
    page 1: the schema says a page is an integer from 1, and the API answers as it says."""

    def get_page_number(self, request: Any, paginator: Any) -> Any:
        raw = request.query_params.get(self.page_query_param)
        if raw is not None and not (raw.isascii() and raw.isdigit()):
            raise NotFound("Invalid page.")
        return super().get_page_number(request, paginator)


class StrictCharField(serializers.CharField):
    """A JSON string only: DRF's CharField turns 42 or true into "42" / "True", where the schema
    says string (schemathesis sent `"sku": 2132011941` and got a 201)."""

    default_error_messages = {"invalid": "Not a valid string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer, not "3", 3.0 or true: wrong types are errors, not guesses."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return int(super().to_internal_value(data))


class StrictFloatField(serializers.FloatField):
    """A JSON number (not a string, not a boolean)."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("invalid")
        return float(super().to_internal_value(data))


class StrictBooleanField(serializers.BooleanField):
    """A JSON boolean only ("yes" or 1 are errors)."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data
