from __future__ import annotations

from django.urls import path

from . import views

app_name = "exports"

urlpatterns = [
    path("", views.exports_view, name="list"),
    path("<uuid:export_id>/download/", views.export_download_view, name="download"),
]
