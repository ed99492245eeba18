"""The report as JSON: the same figures as the page, token auth like the orders API."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import api_view, authentication_classes, permission_classes, throttle_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from sasproject.tokens.authentication import HashedTokenAuthentication
from scheduler.dispatcher.cron import YEAR_MAX, YEAR_MIN

from .selectors import ReportNotFound, report_subject, user_report
from .serializers import ReportSerializer
from .windows import MAX_RANGE, WINDOW_CHOICES, window_parse


@extend_schema(
    summary="Your report over a window: jobs, outcomes, success rate, retries, durations, missed deadlines",
    parameters=[
        OpenApiParameter(
            "window",
            str,
            # Empty is taken (the report page sends its own query): as if not given.
            enum=[*WINDOW_CHOICES, ""],
            description="Default (or empty): day, the last 24 hours; custom when start or end is given.",
        ),
        OpenApiParameter(
            "start",
            str,
            description=(
                "With window=custom: ISO 8601 date-time (naive ones are in `tz`) or date. "
                f"At most {MAX_RANGE.days} days before `end`; years {YEAR_MIN} to {YEAR_MAX}."
            ),
        ),
        OpenApiParameter(
            "end", str, description="With window=custom: exclusive; a date includes that whole day."
        ),
        OpenApiParameter(
            "tz",
            str,
            description="IANA time zone for the buckets, naive dates and every time in the answer "
            "(written with its offset). Default UTC.",
        ),
        OpenApiParameter("user", str, description="Staff only: another user's username."),
    ],
    responses={
        200: ReportSerializer,
        400: OpenApiResponse(description="Field errors: {field: [messages]}."),
        404: OpenApiResponse(description="No such user, or not yours to see."),
    },
)
@api_view(["GET"])
@authentication_classes([HashedTokenAuthentication, SessionAuthentication])
@permission_classes([IsAuthenticated])
@throttle_classes([])
def report_api(request: Request) -> Response:
    params = {key: request.query_params.get(key, "") for key in ("window", "start", "end", "tz")}
    try:
        subject = report_subject(viewer=request.user, username=request.query_params.get("user"))
    except ReportNotFound:
        raise exceptions.NotFound("No such user.") from None
    now = timezone.now()
    window = window_parse(params, now=now)  # WorkflowInputError -> 400 (orders.api_base handler)
    report = user_report(user=subject, window=window, now=now)
    # Every time in the answer on the window's wall clock (`2026-01-05T17:30:00+05:30`), as the
    # page shows them: the serializer writes datetimes in the current zone.
    with timezone.override(window.tz):
        return Response(ReportSerializer(report.as_dict()).data)
