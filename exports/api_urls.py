from __future__ import annotations

from django.urls import path

from . import api

urlpatterns = [
    path("", api.exports_api, name="api-exports"),
    path("<uuid:export_id>/", api.export_api, name="api-export"),
    path("<uuid:export_id>/download/", api.export_download_api, name="api-export-download"),
]
