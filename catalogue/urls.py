from __future__ import annotations

from django.urls import path

from . import views

app_name = "catalogue"

urlpatterns = [
    path("", views.catalogue_view, name="index"),
    path("reprices/<uuid:run_id>/", views.reprice_detail_view, name="reprice"),
]
