"""The engine's own JSON endpoints: a run's progress (long steps) and outcome, and a step's whole
output as a download (issue 28), for its owner.

Any run, whatever its domain (a catalogue reprice, an export, an order): pages and rows done,
rows per second, time left, heartbeats. Session or token authentication, so the web pages poll
it with the signed-in user's cookie and API clients use their token. Another user's run is a
404, never a 403 (that would confirm it exists).
"""

from __future__ import annotations

import uuid

from django.http import HttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from sasproject.tokens.authentication import HashedTokenAuthentication

from .outputs import output_download
from .selectors import run_progress
from .serializers import RunProgressSerializer


@extend_schema(
    summary="A run's progress and outcome: steps, pages and rows done, rows per second, time left, "
    "heartbeats, its error and what its steps returned",
    responses={200: RunProgressSerializer, 404: OpenApiResponse(description="No such run for this user.")},
)
@api_view(["GET"])
# The token first: an anonymous request then gets 401 with `WWW-Authenticate: Token`, as the
# docs say (DRF asks the first class for the challenge; the session's has none: 403).
@authentication_classes([HashedTokenAuthentication, SessionAuthentication])
@permission_classes([IsAuthenticated])
def run_progress_view(request: Request, run_id: uuid.UUID) -> Response:
    progress = run_progress(user=request.user, run_id=run_id)
    if progress is None:
        raise exceptions.NotFound("No such run.")
    response = Response(RunProgressSerializer(progress).data)
    response["Cache-Control"] = "no-store"
    return response


@extend_schema(
    summary="A step's whole output as a file: an HTTP answer's body or a task's return value",
    description="For the run's owner (and operators). application/json when the output is JSON, "
    "text/plain otherwise; always an attachment.",
    responses={
        (200, "application/json"): OpenApiTypes.BINARY,
        (200, "text/plain"): OpenApiTypes.BINARY,
        404: OpenApiResponse(description="No such run, step or output for this user."),
    },
)
@api_view(["GET"])
@authentication_classes([HashedTokenAuthentication, SessionAuthentication])
@permission_classes([IsAuthenticated])
def step_output_view(request: Request, run_id: uuid.UUID, step_id: int) -> HttpResponse:
    found = output_download(user=request.user, run_id=run_id, step_id=step_id)
    if found is None:
        raise exceptions.NotFound("No such output.")
    response = HttpResponse(found.content, content_type=found.content_type)
    # Attacker-controlled text (a remote's body): downloaded, never rendered on our origin.
    response["Content-Disposition"] = content_disposition_header(True, found.filename)
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    response["Cache-Control"] = "private, no-store"
    return response
