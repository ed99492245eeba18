"""The engine's own JSON endpoint: a run's progress (long steps), for its owner.

Any run, whatever its domain (a catalogue reprice, an export, an order): pages and rows done,
rows per second, time left, heartbeats. Session or token authentication, so the web pages poll
it with the signed-in user's cookie and API clients use their token. Another user's run is a
404, never a 403 (that would confirm it exists).
"""

from __future__ import annotations

import uuid

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from sasproject.tokens.authentication import HashedTokenAuthentication

from .selectors import run_progress


@extend_schema(
    summary="A run's progress: steps, pages and rows done, rows per second, time left, heartbeats",
    responses={200: OpenApiTypes.OBJECT, 404: OpenApiResponse(description="No such run for this user.")},
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
    response = Response(progress)
    response["Cache-Control"] = "no-store"
    return response
