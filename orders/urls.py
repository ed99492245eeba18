from __future__ import annotations

from django.urls import path

from . import views

app_name = "orders"

urlpatterns = [
    path("", views.order_list_view, name="list"),
    path("orders/new/", views.order_create_view, name="create"),
    path("orders/<uuid:order_id>/", views.order_detail_view, name="detail"),
    path("orders/<uuid:order_id>/status/", views.order_status_view, name="status"),
    path("orders/<uuid:order_id>/timeline/", views.order_timeline_view, name="timeline"),
    path("orders/<uuid:order_id>/cancel/", views.order_cancel_view, name="cancel"),
]
