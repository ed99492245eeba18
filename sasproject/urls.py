from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import SimpleRouter

from jobs.api import JobViewSet
from orders.api import OrderViewSet, webhook_secret, webhook_secret_rotate_view
from reports.api import report_api
from scheduler.api import run_progress_view

router = SimpleRouter()
router.register("orders", OrderViewSet, basename="api-order")
router.register("jobs", JobViewSet, basename="api-job")

# The admin's own name, not Django's default "Django administration".
admin.site.site_header = "sasproject operations"
admin.site.site_title = "sasproject admin"
admin.site.index_title = "Engine and orders"

urlpatterns = [
    # Pages link their icon; this answers clients that ask for /favicon.ico anyway.
    path("favicon.ico", RedirectView.as_view(url=static("orders/favicon.svg"), permanent=True)),
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/webhook-secret/", webhook_secret, name="api-webhook-secret"),
    path("api/webhook-secret/rotate/", webhook_secret_rotate_view, name="api-webhook-secret-rotate"),
    path("api/runs/<uuid:run_id>/progress/", run_progress_view, name="api-run-progress"),
    path("api/exports/", include("exports.api_urls")),
    path("api/reports/", report_api, name="api-reports"),
    path("api/", include(router.urls)),
    path("jobs/", include("jobs.urls")),
    path("catalogue/", include("catalogue.urls")),
    path("exports/", include("exports.urls")),
    path("reports/", include("reports.urls")),
    path("", include("orders.urls")),
]
# Static files (the admin's CSS, the pages' stylesheet) from the apps' folders while DEBUG is on,
# as runserver did: `make run` serves the web with gunicorn. Empty when DEBUG is off - then run
# collectstatic and serve STATIC_ROOT from the front web server.
# https://docs.djangoproject.com/en/5.2/howto/static-files/#serving-static-files-during-development
urlpatterns += staticfiles_urlpatterns()
