"""Operator alerts: open ones first; acknowledging is the only change an operator makes."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import F, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from adminkit.display import compact_time, state_badge
from adminkit.readonly import ReadOnlyAdmin
from scheduler.admin import OPERATE_PERMISSION, run_link

from .models import Alert
from .operator import alert_acknowledge


class AlertStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("open", "Open"), ("acknowledged", "Acknowledged")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "open":
            return queryset.filter(acknowledged_at__isnull=True)
        if self.value() == "acknowledged":
            return queryset.filter(acknowledged_at__isnull=False)
        return queryset


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    list_display = (
        "severity_badge",
        "acknowledged",
        "kind",
        "run_short",
        "step_name",
        "message_short",
        "created",
    )
    list_display_links = ("severity_badge",)
    list_filter = (AlertStatusFilter, "severity", "kind")
    list_select_related = ("step", "acknowledged_by")
    search_fields = ("message",)
    # Open alerts (acknowledged_at IS NULL) first, then the newest.
    ordering = (F("acknowledged_at").desc(nulls_first=True), "-created_at")
    actions = ("acknowledge",)
    fields = readonly_fields = (
        "severity_badge",
        "kind",
        "run_full",
        "step",
        "message",
        "created_at",
        "acknowledged_at",
        "acknowledged_by",
    )

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_staff and request.user.has_perm(OPERATE_PERMISSION))

    @admin.action(description="Acknowledge selected alerts", permissions=["operate"])
    def acknowledge(self, request: HttpRequest, queryset: QuerySet[Alert]) -> None:
        ids = list(queryset.order_by().values_list("pk", flat=True))
        count = alert_acknowledge(alert_ids=ids, user=request.user)  # type: ignore[arg-type]
        skipped = len(ids) - count
        text = f"Acknowledged {count} alert(s)."
        if skipped:
            text += f" {skipped} were already acknowledged."
        self.message_user(request, text, messages.SUCCESS)

    @admin.display(description="raised", ordering="created_at")
    def created(self, obj: Alert) -> SafeString:
        return compact_time(obj.created_at)

    @admin.display(description="severity", ordering="severity")
    def severity_badge(self, obj: Alert) -> SafeString:
        return state_badge(obj.severity, obj.get_severity_display())

    @admin.display(description="run", ordering="run_id")
    def run_short(self, obj: Alert) -> str:
        return run_link(obj.run_id)

    @admin.display(description="run")
    def run_full(self, obj: Alert) -> str:
        return run_link(obj.run_id, full=True)

    @admin.display(description="step")
    def step_name(self, obj: Alert) -> str:
        return obj.step.name if obj.step is not None else "-"

    @admin.display(description="message")
    def message_short(self, obj: Alert) -> str:
        return obj.message if len(obj.message) <= 120 else obj.message[:117] + "..."

    @admin.display(description="status", ordering="acknowledged_at")
    def acknowledged(self, obj: Alert) -> SafeString:
        if obj.acknowledged_at is None:
            return state_badge("open", "open")
        who = obj.acknowledged_by.get_username() if obj.acknowledged_by is not None else "?"
        return format_html(
            '<span class="sas-muted">{} by {}</span>', obj.acknowledged_at.strftime("%Y-%m-%d %H:%M"), who
        )
