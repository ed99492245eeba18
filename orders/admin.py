"""Orders in the admin: read-only; their processing state is their run's."""

from __future__ import annotations

from django.contrib import admin
from django.utils.safestring import SafeString

from adminkit.display import compact_time, state_badge
from adminkit.readonly import ExactSearchMixin, ReadOnlyAdmin
from scheduler.admin import RunColumn, run_link

from .models import Order


@admin.register(Order)
class OrderAdmin(ExactSearchMixin, RunColumn, ReadOnlyAdmin):
    list_display = ("short_id", "owner", "amount", "currency", "run_state", "run_short", "created")
    list_display_links = ("short_id",)
    list_filter = ("run__state",)
    list_select_related = ("owner", "run")
    search_fields = ("id", "run__id", "owner__username")
    search_help_text = "Exact order id, run id or owner username."
    search_by_uuid = ("pk", "run_id")
    search_by_text = ("owner__username",)
    ordering = ("-created_at",)
    fields = readonly_fields = (
        "id",
        "owner",
        "run_full",
        "run_state",
        "items",
        "amount",
        "currency",
        "card_token",
        "created_at",
    )

    @admin.display(description="order", ordering="id")
    def short_id(self, obj: Order) -> str:
        return str(obj.id)[-8:]

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Order) -> SafeString:
        return compact_time(obj.created_at)

    @admin.display(description="run state", ordering="run__state")
    def run_state(self, obj: Order) -> SafeString:
        return state_badge(obj.run.state, obj.run.get_state_display())

    @admin.display(description="run")
    def run_full(self, obj: Order) -> str:
        return run_link(obj.run_id, full=True)
