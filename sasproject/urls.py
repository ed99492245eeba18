from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, JsonResponse
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.decorators.csrf import csrf_exempt
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import SimpleRouter

from alerting.api import alert_rule_view, alert_rules_view
from jobs.api import JobViewSet
from orders.api import OrderViewSet, webhook_secret, webhook_secret_rotate_view
from reports.api import report_api
from sasproject.login_throttle import ThrottledAdminAuthenticationForm, ThrottledAuthenticationForm
from sasproject.tokens.api import api_token_rotate_view, api_token_view
from sasproject.tokens.views import api_token_page
from scheduler.api import run_progress_view, step_output_view

router = SimpleRouter()
router.register("orders", OrderViewSet, basename="api-order")
router.register("jobs", JobViewSet, basename="api-job")

# The admin's own name, not Django's default "Django administration".
admin.site.site_header = "sasproject operations"
admin.site.site_title = "sasproject admin"
admin.site.index_title = "Engine and orders"
# Both sign-in forms count failures and refuse brute force (issue 22).
admin.site.login_form = ThrottledAdminAuthenticationForm


class FaviconRedirect(RedirectView):
    """To the icon's static URL, looked up per request: at import, with DEBUG off, the hashed name
    needs collectstatic's manifest, and commands that import the URLconf (check, migrate) must
    not need it."""

    permanent = True

    def get_redirect_url(self, *args: Any, **kwargs: Any) -> str:
        return static("orders/favicon.svg")


@csrf_exempt  # it writes nothing; a POST to no route is a 404, not CSRF's 403
def api_not_found(request: HttpRequest) -> JsonResponse:
    """An /api/ address no route takes (`/api/jobs/null/`): a JSON 404 like the API's own, not
    the HTML page (nor, with DEBUG on, Django's page listing every route)."""
    return JsonResponse({"detail": "Not found."}, status=404)


# The 403 page (issue 28): says which role is missing, in the admin's look under /admin/. By
# name, as ops' URLs: sasproject never imports ops.
handler403 = "ops.forbidden.permission_denied"

urlpatterns = [
    # Pages link their icon; this answers clients that ask for /favicon.ico anyway.
    path("favicon.ico", FaviconRedirect.as_view(), name="favicon"),
    # /healthz, /readyz, /metrics (issue 19) for load balancers and Prometheus. By name, as the
    # other apps' URLs: sasproject never imports ops (pyproject.toml's "ops-on-top" contract).
    path("", include("ops.urls")),
    # Alert e-mails sent before issue 27 link to the alert models' old admin address (they
    # moved from supervisor to alerting): sent on to the new one.
    re_path(
        r"^admin/supervisor/(?P<model>alert|alertrule|alertrun)/(?P<rest>.*)$",
        RedirectView.as_view(url="/admin/alerting/%(model)s/%(rest)s", permanent=True, query_string=True),
    ),
    path("admin/", admin.site.urls),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(
            redirect_authenticated_user=True, authentication_form=ThrottledAuthenticationForm
        ),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/api-token/", api_token_page, name="api-token-page"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/token/", api_token_view, name="api-token"),
    path("api/token/rotate/", api_token_rotate_view, name="api-token-rotate"),
    path("api/webhook-secret/", webhook_secret, name="api-webhook-secret"),
    path("api/webhook-secret/rotate/", webhook_secret_rotate_view, name="api-webhook-secret-rotate"),
    path("api/runs/<uuid:run_id>/progress/", run_progress_view, name="api-run-progress"),
    path("api/runs/<uuid:run_id>/steps/<int:step_id>/output/", step_output_view, name="api-step-output"),
    path("api/exports/", include("exports.api_urls")),
    path("api/reports/", report_api, name="api-reports"),
    path("api/alert-rules/", alert_rules_view, name="api-alert-rules"),
    path("api/alert-rules/<int:rule_id>/", alert_rule_view, name="api-alert-rule"),
    path("api/", include(router.urls)),
    # Only addresses ending in "/": one without it still gets APPEND_SLASH's redirect.
    re_path(r"^api/[\s\S]*/$", api_not_found),  # any character, a newline too
    path("jobs/", include("jobs.urls")),
    path("catalogue/", include("catalogue.urls")),
    path("exports/", include("exports.urls")),
    path("reports/", include("reports.urls")),
    path("", include("orders.urls")),
]
# Static files are served by whitenoise's middleware (settings/production.py), with
# DEBUG on and off alike: no URL patterns for them here.
