"""Catalogue reads. The reprice runs a user sees are their own (scoped by the user)."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import Avg, Count, Max, Min, QuerySet

from scheduler.models import Run

from .models import Product
from .workflows import REPRICE_WORKFLOW


def catalogue_summary() -> dict[str, Any]:
    """Products, price range and average (one aggregate over the table)."""
    return Product.objects.aggregate(
        products=Count("id"), min_price=Min("price"), max_price=Max("price"), avg_price=Avg("price")
    )


def reprice_runs(*, user: Any) -> QuerySet[Run]:
    """The user's reprice runs, newest first (run_owner_created_idx)."""
    return Run.objects.filter(owner_id=user.pk, workflow=REPRICE_WORKFLOW).order_by("-created_at")


def reprice_run_get(*, user: Any, run_id: uuid.UUID | str) -> Run:
    """One of the user's reprice runs; Run.DoesNotExist for anyone else's."""
    return reprice_runs(user=user).get(pk=run_id)
