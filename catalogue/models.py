"""A product catalogue, the domain of the paginated-step demo: `catalogue.reprice` changes
every product's price by a percentage, one page of products per attempt.

The ledger makes "each page applied exactly once" checkable: every product counts the reprices
it went through (`repriced_count`) and remembers the last run that repriced it, and every page
leaves one `RepriceLedger` row (no unique constraint on purpose: a page applied twice would
show as two rows, not as an error that hides it).
"""

from __future__ import annotations

from decimal import Decimal

from django.db import models
from django.db.models import Q


class Product(models.Model):
    sku = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    price = models.DecimalField(max_digits=14, decimal_places=2)
    repriced_count = models.PositiveIntegerField(default=0, help_text="Reprices applied to this product.")
    last_repriced_run = models.UUIDField(null=True, blank=True, help_text="The run that last repriced it.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=Q(price__gte=Decimal("0")), name="product_price_nonnegative")
        ]

    def __str__(self) -> str:
        return f"{self.sku} {self.price}"


class RepriceLedger(models.Model):
    """One row per page a reprice run applied, written in the page's transaction."""

    run_id = models.UUIDField()
    # The page: products with page_start < id <= page_end.
    page_start = models.BigIntegerField()
    page_end = models.BigIntegerField()
    rows = models.PositiveIntegerField()
    applied_at = models.DateTimeField()

    class Meta:
        ordering = ["run_id", "page_start"]
        indexes = [models.Index(fields=["run_id", "page_start"], name="reprice_ledger_run_idx")]

    def __str__(self) -> str:
        return f"run {self.run_id}: ({self.page_start}, {self.page_end}] {self.rows} rows"
