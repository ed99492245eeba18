"""The exports page (request one, list mine) and the download, for the owner only."""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from sasproject.not_found import AsNotFound
from scheduler.limits import LimitExceeded
from scheduler.throttles import page_rate_refusal

from .models import Export, ExportFile
from .selectors import export_file, export_list, export_status
from .services import export_request


@login_required
@require_http_methods(["GET", "POST"])
def exports_view(request: HttpRequest) -> HttpResponse:
    refused: LimitExceeded | None = None
    if request.method == "POST":
        user_id = request.user.pk
        assert isinstance(user_id, int), "login_required guarantees a signed-in user"
        # The rate (settings.SAS_RATES["export"], one budget with the API), then the quotas.
        refused = page_rate_refusal(request, "export")
        if refused is None:
            try:
                export_request(owner_id=user_id)
            except LimitExceeded as exc:
                refused = exc
            else:
                return redirect("exports:list")
    exports = [export_status(e) for e in export_list(user=request.user)[:50]]
    response = render(
        request,
        "exports/list.html",
        {
            "exports": exports,
            "going": any(e["status"] in ("waiting", "in_progress") for e in exports),
            "refused": refused.message if refused else "",
        },
        status=429 if refused else 200,
    )
    if refused is not None and refused.retry_after is not None:
        response["Retry-After"] = str(refused.retry_after)
    return response


def download_response(export: Export, file: ExportFile) -> HttpResponse:
    response = HttpResponse(file.content, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
    response["Cache-Control"] = "private, no-store"
    return response


@login_required
@require_GET
def export_download_view(request: HttpRequest, export_id: uuid.UUID) -> HttpResponse:
    with AsNotFound("No such export file.", Export.DoesNotExist, ExportFile.DoesNotExist):
        export, file = export_file(user=request.user, export_id=export_id)
    return download_response(export, file)
