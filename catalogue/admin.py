"""Products and the reprice ledger in the admin (read-only: a reprice is a run)."""

from __future__ import annotations

from django.contrib import admin

from adminkit.readonly import ReadOnlyAdmin

from .models import Product, RepriceLedger


@admin.register(Product)
class ProductAdmin(ReadOnlyAdmin):
    list_display = ("id", "sku", "name", "price", "repriced_count", "last_repriced_run", "updated_at")
    search_fields = ("=sku",)
    search_help_text = "Exact SKU."
    ordering = ("id",)


@admin.register(RepriceLedger)
class RepriceLedgerAdmin(ReadOnlyAdmin):
    list_display = ("run_id", "page_start", "page_end", "rows", "applied_at")
    search_fields = ("=run_id",)
    search_help_text = "Exact run id."
    ordering = ("-applied_at",)
