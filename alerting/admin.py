"""Operator alerts and alert rules. Alerts: open ones first; acknowledging is the only change an
operator makes (an alert resolves itself when its condition clears). Rules: edited here (the
shipped ones come from a data migration, alerting/default_rules.py)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, QuerySet
from django.forms.models import BaseModelFormSet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from adminkit.display import compact_time, state_badge
from adminkit.readonly import ReadOnlyAdmin
from scheduler.admin import OPERATE_PERMISSION, run_link
from scheduler.permissions import staff_may

from .models import Alert, AlertRule
from .rules import alert_rules_enable_refusal
from .transitions import alert_acknowledge


class AlertStatusFilter(admin.SimpleListFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("open", "Open (firing, not acknowledged)"),
            ("pending", "Pending"),
            ("acknowledged", "Acknowledged"),
            ("resolved", "Resolved"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "open":
            return queryset.filter(state=Alert.State.FIRING, acknowledged_at__isnull=True)
        if self.value() == "pending":
            return queryset.filter(state=Alert.State.PENDING)
        if self.value() == "acknowledged":
            return queryset.filter(acknowledged_at__isnull=False)
        if self.value() == "resolved":
            return queryset.filter(state=Alert.State.RESOLVED)
        return queryset


@admin.register(Alert)
class AlertAdmin(ReadOnlyAdmin):
    list_display = (
        "severity_badge",
        "status",
        "rule",
        "subject",
        "count",
        "run_short",
        "message_short",
        "created",
    )
    list_display_links = ("severity_badge",)
    list_filter = (AlertStatusFilter, "severity", "kind", "rule")
    list_select_related = ("rule", "acknowledged_by")
    search_fields = ("message", "subject")
    # Open alerts first (firing, then pending), then the newest.
    ordering = (F("resolved_at").desc(nulls_first=True), "-created_at")
    actions = ("acknowledge",)
    fields = readonly_fields = (
        "severity_badge",
        "status",
        "rule",
        "kind",
        "subject",
        "message",
        "count",
        "affected_runs",
        "created_at",
        "fired_at",
        "resolved_at",
        "announced_state",
        "announced_at",
        "acknowledged_at",
        "acknowledged_by",
    )

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        # The run admin's "alerts" column links here by a linked run.
        if lookup == "links__run__id__exact":
            return True
        return super().lookup_allowed(lookup, value, request)

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return staff_may(request.user, OPERATE_PERMISSION)

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

    @admin.display(description="state", ordering="state")
    def status(self, obj: Alert) -> SafeString:
        if obj.state == Alert.State.FIRING and obj.acknowledged_at is not None:
            who = obj.acknowledged_by.get_username() if obj.acknowledged_by is not None else "?"
            return format_html(
                '{} <span class="sas-muted">acknowledged {} by {}</span>',
                state_badge("firing", "firing"),
                obj.acknowledged_at.strftime("%Y-%m-%d %H:%M"),
                who,
            )
        return state_badge(obj.state, obj.get_state_display())

    @admin.display(description="first run", ordering="run_id")
    def run_short(self, obj: Alert) -> str:
        return run_link(obj.run_id) if obj.run_id else "-"

    @admin.display(description="affected runs")
    def affected_runs(self, obj: Alert) -> SafeString:
        links = list(obj.links.order_by("-linked_at").values_list("run_id", flat=True)[:200])
        if not links:
            return format_html('<span class="sas-muted">{}</span>', "none")
        return format_html_join(" ", "{}", ((run_link(run_id),) for run_id in links))

    @admin.display(description="message")
    def message_short(self, obj: Alert) -> str:
        return obj.message if len(obj.message) <= 120 else obj.message[:117] + "..."


# The rule's fields, grouped as its change page shows them (the admin form edits these).
RULE_FIELDSETS: Any = (
    (None, {"fields": ("name", "kind", "target", "job", "owner", "enabled")}),
    ("Condition", {"fields": ("threshold", "min_runs", "window", "for_duration")}),
    (
        "Notification",
        {
            "fields": (
                "severity",
                "cooldown",
                "notify_email",
                "recipients",
                "notify_webhook",
                "webhook_url",
            )
        },
    ),
)


class AlertRuleAdminForm(forms.ModelForm):
    """The rule's fields (their validators: no control character in the name, addresses in the
    recipients), and the platform's cap when the rule becomes enabled (alerting/rules.py)."""

    class Meta:
        model = AlertRule
        fields = flatten_fieldsets(RULE_FIELDSETS)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        becomes_enabled = self.instance.pk is None or "enabled" in self.changed_data
        enabling = [self.instance.pk] if cleaned.get("enabled") and becomes_enabled else []
        if why := alert_rules_enable_refusal(enabling=enabling):
            self.add_error("enabled", why)
        return cleaned


class AlertRuleChangeListFormSet(BaseModelFormSet):
    """The list's "enabled" ticks, counted together against the cap (one tick each would pass
    alone and all together go past it)."""

    def clean(self) -> None:
        super().clean()
        enabling = [
            form.instance.pk
            for form in self.forms
            if getattr(form, "cleaned_data", {}).get("enabled") and "enabled" in form.changed_data
        ]
        if why := alert_rules_enable_refusal(enabling=enabling):
            raise ValidationError(why)


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    form = AlertRuleAdminForm
    list_display = (
        "name",
        "kind",
        "target",
        "job",
        "owner",
        "threshold",
        "window",
        "severity",
        "channels",
        "enabled",
    )
    list_filter = ("enabled", "kind", "severity")
    list_editable = ("enabled",)
    search_fields = ("name", "target")
    raw_id_fields = ("job", "owner")
    fieldsets = RULE_FIELDSETS

    def get_changelist_formset(self, request: HttpRequest, **kwargs: Any) -> Any:
        return super().get_changelist_formset(request, formset=AlertRuleChangeListFormSet, **kwargs)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        # The list's formset is validated outside the admin's save transaction: one around
        # both, so the cap's lock (taken in the formset's clean) is held until the rows commit.
        with transaction.atomic():
            return super().changelist_view(request, extra_context)

    @admin.display(description="channels")
    def channels(self, obj: AlertRule) -> str:
        return (
            ", ".join(c for c, on in (("e-mail", obj.notify_email), ("webhook", obj.notify_webhook)) if on)
            or "-"
        )
