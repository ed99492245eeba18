"""Operators see every delivery here: pending, in flight, delivered or given up, with the error."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from scheduler.permissions import STAFF_WORK, staff_may

from .models import WebhookDelivery, WebhookSecret, WebhookSubscription
from .services import webhook_deliveries_retry


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "order_id",
        "sequence",
        "event_type",
        "state",
        "attempts",
        "short_error",
        "url",
        "created_at",
        "finished_at",
    )
    list_filter = ("state", "event_type")
    search_fields = ("subscription__correlation_id", "event_uuid", "url")
    readonly_fields = [f.name for f in WebhookDelivery._meta.fields]
    list_select_related = ("subscription",)
    actions = ["retry_given_up"]
    show_full_result_count = False

    @admin.display(description="order id")
    def order_id(self, obj: WebhookDelivery) -> str:
        return obj.subscription.correlation_id

    @admin.display(description="last error")
    def short_error(self, obj: WebhookDelivery) -> str:
        return obj.last_error[:120]

    def has_staff_work_permission(self, request: HttpRequest) -> bool:
        """Sending deliveries again acts on every tenant's outbox: staff work (issue 26), which
        the read-only role and staff in no group do not hold."""
        return staff_may(request.user, STAFF_WORK)

    @admin.action(description="Send the selected given-up deliveries again", permissions=["staff_work"])
    def retry_given_up(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        count = webhook_deliveries_retry(deliveries=queryset)
        self.message_user(request, f"{count} deliveries queued again.", messages.SUCCESS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: WebhookDelivery | None = None) -> bool:
        return False


@admin.register(WebhookSubscription)
class WebhookSubscriptionAdmin(admin.ModelAdmin):
    list_display = ("correlation_id", "owner", "url", "next_sequence", "created_at")
    search_fields = ("correlation_id", "url")
    readonly_fields = ("run", "owner", "url", "correlation_id", "next_sequence", "created_at")
    list_select_related = ("owner",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(WebhookSecret)
class WebhookSecretAdmin(admin.ModelAdmin):
    list_display = ("user", "created_at", "rotated_at")
    # The secret itself is not shown: users read theirs through the API.
    exclude = ("secret",)
    readonly_fields = ("user", "created_at", "rotated_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
