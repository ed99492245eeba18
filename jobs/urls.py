from __future__ import annotations

from django.urls import path

from . import graph_views, views

app_name = "jobs"

urlpatterns = [
    path("", views.job_list_view, name="list"),
    path("new/", views.job_create_view, name="create"),
    path("graph/", graph_views.job_graph_view, name="graph"),
    path("<int:job_id>/", views.job_detail_view, name="detail"),
    path("<int:job_id>/edit/", views.job_edit_view, name="edit"),
    path("<int:job_id>/pause/", views.job_pause_view, name="pause"),
    path("<int:job_id>/resume/", views.job_resume_view, name="resume"),
    path("<int:job_id>/run-now/", views.job_run_now_view, name="run_now"),
    path("<int:job_id>/delete/", views.job_delete_view, name="delete"),
    path("<int:job_id>/runs/<uuid:run_id>/", views.job_run_view, name="run"),
    path("<int:job_id>/alert-rules/", views.alert_rule_create_view, name="alert_rule_create"),
    path(
        "<int:job_id>/alert-rules/<int:rule_id>/delete/",
        views.alert_rule_delete_view,
        name="alert_rule_delete",
    ),
]
