"""Exports in the admin (read-only); the heartbeat status is on the run's page."""

from __future__ import annotations

from django.contrib import admin

from adminkit.readonly import ReadOnlyAdmin

from .models import Export


@admin.register(Export)
class ExportAdmin(ReadOnlyAdmin):
    list_display = ("id", "owner", "created_at", "completed_at", "rows", "size_bytes", "run")
    list_select_related = ("owner", "run")
    search_fields = ("=owner__username",)
    search_help_text = "Exact owner username."
    ordering = ("-created_at",)
