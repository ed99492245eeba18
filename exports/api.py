"""Exports in the JSON API: list mine, request one, read one, download its file. Another
user's export is a 404. Token authentication, like the orders API (the exports page is HTML and
needs none of these)."""

from __future__ import annotations

import uuid

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, status
from rest_framework.decorators import api_view, permission_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from scheduler.throttles import request_rate_take

from .models import Export, ExportFile
from .selectors import export_file, export_get, export_list, export_status
from .services import export_request
from .views import download_response


@extend_schema(
    methods=["GET"],
    operation_id="exports_list",
    summary="Your history exports, newest first",
    responses={200: OpenApiTypes.OBJECT},
)
@extend_schema(
    methods=["POST"],
    operation_id="exports_create",
    summary="Request an export of your execution history (CSV)",
    request=None,
    responses={
        201: OpenApiTypes.OBJECT,
        429: OpenApiResponse(
            OpenApiTypes.OBJECT,
            description="Over the export rate (Retry-After) or at your exports / runs in flight quota: "
            '{"detail": "... the limit is ...", "limit": "..."}.',
        ),
    },
)
@api_view(["GET", "POST"])
@permission_classes([IsAuthenticated])
def exports_api(request: Request) -> Response:
    if request.method == "POST":
        user_id = request.user.pk
        assert isinstance(user_id, int), "IsAuthenticated guarantees a signed-in user"
        # RateLimited / QuotaExceeded: a 429 naming the limit (orders.api_base.exception_handler).
        request_rate_take(request, "export")
        export = export_request(owner_id=user_id)
        return Response(export_status(export), status=status.HTTP_201_CREATED)
    return Response({"results": [export_status(e) for e in export_list(user=request.user)[:100]]})


@extend_schema(
    operation_id="exports_retrieve", summary="One of your exports", responses={200: OpenApiTypes.OBJECT}
)
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def export_api(request: Request, export_id: uuid.UUID) -> Response:
    try:
        return Response(export_status(export_get(user=request.user, export_id=export_id)))
    except Export.DoesNotExist:
        raise exceptions.NotFound("No such export.") from None


@extend_schema(
    operation_id="exports_download",
    summary="Download one of your exports (CSV)",
    responses={(200, "text/csv"): OpenApiTypes.STR},
)
@api_view(["GET"])
@permission_classes([IsAuthenticated])
def export_download_api(request: Request, export_id: uuid.UUID) -> object:
    try:
        export, file = export_file(user=request.user, export_id=export_id)
    except (Export.DoesNotExist, ExportFile.DoesNotExist):
        raise exceptions.NotFound("No such export file.") from None
    return download_response(export, file)
