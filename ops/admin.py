"""The run admin as operators see it, and the engine-health page: both read every app.

The scheduler's `RunAdmin` knows the engine only and is not registered there. The run admin is
registered once, here, as `OperatorRunAdmin` (a subclass), with what needs the other apps:
each run's open alerts (supervisor), the "needs attention" filter (failed, or an alert nobody
acknowledged), the link to the run's order (orders), and the engine-health page with its
breaker-reset button (agents' breakers, beat's periodic tasks).

The health page keeps its URLs under the run admin: /admin/scheduler/run/health/
(`admin:scheduler_run_health`) and .../health/breaker/<service>/reset/
(`admin:scheduler_run_breaker_reset`), which docs/operating/operators.md and bookmarks use.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_POST

from adminkit.actors import actor_name
from agents.breaker import CircuitBreaker
from orders.models import Order
from reports.timeline import run_timeline
from scheduler.admin import AttentionFilter, RunAdmin
from scheduler.models import Run

from . import beat_admin, pauses, selectors  # noqa: F401  (beat_admin, pauses register their admins)
from .operator_admin import OperatorToolsMixin
from .operator_pages import _has
from .roles import permission_missing_words
from .run_actions import P_BREAKER, P_BULK, P_OPERATE, P_SWEEP_PREVIEW
from .selectors import run_operator_actions

logger = logging.getLogger(__name__)


class OperatorAttentionFilter(AttentionFilter):
    """The scheduler's attention filter, with "needs attention" first (it reads the alerts)."""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("needs", "Needs attention (failed or open alerts)"), *super().lookups(request, model_admin)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "needs":
            return queryset.filter(selectors.run_needs_attention_q())
        return super().queryset(request, queryset)


def _with_alerts(names: Sequence[Any]) -> list[Any]:
    """`names` with "alerts" after "progress" (the steps done), where the run admin has it."""
    names = list(names)
    if "progress" in names:
        names.insert(names.index("progress") + 1, "alerts")
    return names


class OperatorRunAdmin(OperatorToolsMixin, RunAdmin):
    """The scheduler's run admin plus what reads the other apps: open alerts per run (a column,
    a detail field and the "needs attention" filter) and the link to the run's order; and the
    operator's audited actions (ops/operator_admin.py)."""

    actions = ("cancel_runs", "resume_compensation")

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        return _with_alerts(super().get_list_display(request))

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        return [
            OperatorAttentionFilter if item is AttentionFilter else item
            for item in super().get_list_filter(request)
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return _with_alerts(super().get_readonly_fields(request, obj))

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return [
            (name, {**options, "fields": _with_alerts(options["fields"])})
            for name, options in super().get_fieldsets(request, obj)
        ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return selectors.run_list_with_alerts(queryset=super().get_queryset(request))

    # -- columns that read other apps ------------------------------------------------------------

    @admin.display(description="alerts", ordering="open_alerts")
    def alerts(self, obj: Run) -> SafeString:
        count = getattr(obj, "open_alerts", 0) or 0
        if not count:
            return mark_safe('<span class="sas-muted">0</span>')
        url = reverse("admin:alerting_alert_changelist") + f"?links__run__id__exact={obj.id}&status=open"
        return format_html('<a class="sas-badge sas-critical" href="{}">{}</a>', url, count)

    @admin.display(description="correlation id")
    def correlation_detail(self, obj: Run) -> SafeString:
        order = Order.objects.filter(run_id=obj.pk).only("pk").first()
        if order is None:
            return super().correlation_detail(obj)
        url = reverse("admin:orders_order_change", args=[order.pk])
        return format_html('<code>{}</code> (<a href="{}">order</a>)', obj.correlation_id, url)

    # -- cancel / resume / give up: a confirmation page with a reason, and the audit entry -------
    # Each goes through the operator's audited service, which writes the OperatorAction shown on
    # the run (issue 21); the scheduler's RunAdmin has no actions of its own (issue 27).

    @admin.action(description="Cancel selected runs", permissions=["operate"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> HttpResponse | None:
        return self.runs_action_confirm(request, queryset, "cancel", "cancel_runs")

    @admin.action(description="Resume compensation of selected failed runs", permissions=["operate"])
    def resume_compensation(self, request: HttpRequest, queryset: QuerySet[Run]) -> HttpResponse | None:
        return self.runs_action_confirm(request, queryset, "resume", "resume_compensation")

    # -- the run's timeline (reports) -------------------------------------------------------------

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Run | None = None,
    ) -> HttpResponse:
        """The run page with its timeline: every attempt, wait, recovery and event on one axis,
        with the raw errors (operators see what the remote services said)."""
        if obj is not None:
            context["timeline"] = run_timeline(run=obj, now=timezone.now())
            # The operator's tools this user may use on this run now, and the audit of those used.
            context["operator_buttons"] = self.operator_buttons(request, obj)
            context["operator_actions"] = run_operator_actions(run_id=obj.pk)
        return super().render_change_form(
            request, context, add=add, change=change, form_url=form_url, obj=obj
        )

    # -- the engine-health page ------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        health = [
            path("health/", wrap(self.health_view), name="scheduler_run_health"),
            path(
                "health/breaker/<str:service>/reset/",
                wrap(require_POST(self.breaker_reset_view)),
                name="scheduler_run_breaker_reset",
            ),
        ]
        # Before the run admin's own URLs: its "<path:object_id>/" would take "health/".
        return health + self.operator_urls() + super().get_urls()

    def health_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied(permission_missing_words("scheduler.view_run"))
        health = selectors.engine_health()
        changelist = reverse("admin:scheduler_run_changelist")
        states = [
            {
                "value": value,
                "label": label,
                "count": health.run_states.get(value, 0),
                "url": f"{changelist}?state__exact={value}",
            }
            for value, label in Run.State.choices
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": "Engine health",
            "opts": self.opts,
            "health": health,
            "states": states,
            "can_operate": self.has_operate_permission(request),
            "can_hold_breaker": _has(request, P_BREAKER),
            "bulk_url": reverse("admin:scheduler_run_bulk_resubmit") if _has(request, P_BULK) else "",
            "sweep_preview_url": reverse("admin:scheduler_run_sweep_preview")
            if _has(request, P_SWEEP_PREVIEW)
            else "",
            "runs_attention_url": f"{changelist}?attention=needs",
            "runs_stuck_url": f"{changelist}?attention=stuck",
            "steps_overdue_url": reverse("admin:scheduler_step_changelist") + "?overdue=yes",
            "alerts_open_url": reverse("admin:alerting_alert_changelist") + "?status=open",
            "jobs_url": reverse("admin:scheduler_job_changelist"),
            "periodic_tasks_url": reverse("admin:django_celery_beat_periodictask_changelist"),
            "consumer_stale": settings.SAS_MONITORING["CONSUMER_STALE"],
            "flower_url": settings.SAS_MONITORING["FLOWER_URL"],
        }
        return TemplateResponse(request, "admin/ops/health.html", context)

    def breaker_reset_view(self, request: HttpRequest, service: str) -> HttpResponse:
        if not self.has_operate_permission(request):
            raise PermissionDenied(permission_missing_words(P_OPERATE))
        if not selectors.breaker_is_known(name=service):
            raise PermissionDenied("There is no circuit breaker of that name.")
        CircuitBreaker(service).reset()
        logger.warning("breaker %s reset by %s", service, actor_name(request.user))
        self.message_user(
            request,
            f"Circuit breaker for {service} reset to closed. If the service is still down it opens "
            "again after the failure threshold.",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(reverse("admin:scheduler_run_health"))


# The one registration of the run admin (scheduler/admin/runs.py defines its engine-only base).
admin.site.register(Run, OperatorRunAdmin)
