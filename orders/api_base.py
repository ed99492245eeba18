"""API plumbing named in settings.REST_FRAMEWORK (the exception handler). Kept apart from
orders/api.py so that settings never import the views."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework import exceptions, status
from rest_framework.response import Response

from scheduler.limits import LimitExceeded
from scheduler.workflows import WorkflowInputError


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "Request body too large."
    default_code = "payload_too_large"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, plus the services' exceptions: bad workflow input is a 400 with field
    errors, like a serializer's; a rate or quota refusal (LimitExceeded) is a 429 naming the
    limit; a body over DATA_UPLOAD_MAX_MEMORY_SIZE (Django raises
    RequestDataTooBig when DRF reads it) is a 413, not a 500."""
    if isinstance(exc, RequestDataTooBig):
        exc = PayloadTooLarge(f"Request body too large (limit {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes).")
    if isinstance(exc, WorkflowInputError):
        exc = exceptions.ValidationError(exc.errors)
    if isinstance(exc, LimitExceeded):
        # A rate or a quota (scheduler/limits.py): 429 naming the limit; Retry-After for a rate.
        response = Response(
            {"detail": exc.message, "limit": exc.limit}, status=status.HTTP_429_TOO_MANY_REQUESTS
        )
        if exc.retry_after is not None:
            response["Retry-After"] = str(exc.retry_after)
        return response
    from rest_framework.views import exception_handler as drf_exception_handler

    return drf_exception_handler(exc, context)
