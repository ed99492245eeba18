"""Catalogue writes: seed the demo's products; start a reprice run."""

from __future__ import annotations

from django.db import connection, transaction

from scheduler.limits import quota_check_runs
from scheduler.models import Run
from scheduler.services import run_submit
from scheduler.workflows import get_workflow, workflow_permit

from .workflows import REPRICE_WORKFLOW


def catalogue_seed(*, rows: int, if_empty: bool = False) -> int:
    """Add `rows` products in one INSERT ... SELECT generate_series (100,000 rows in about a
    second), with prices from 1.00 to 999.99. With `if_empty`, only into an empty catalogue.
    Returns the rows added. Transaction: its own."""
    if rows < 0:
        raise ValueError("rows must be positive")
    with transaction.atomic(), connection.cursor() as cursor:
        if if_empty:
            cursor.execute("SELECT EXISTS (SELECT 1 FROM catalogue_product)")
            if cursor.fetchone()[0]:
                return 0
        cursor.execute("SELECT coalesce(max(id), 0) FROM catalogue_product")
        start = int(cursor.fetchone()[0])
        cursor.execute(
            """
            INSERT INTO catalogue_product (sku, name, price, repriced_count, last_repriced_run, updated_at)
            SELECT 'SKU-' || lpad(n::text, 7, '0'), 'Product ' || n, 1 + (n * 7919 %% 99900) / 100.0, 0, NULL,
                   statement_timestamp()
            FROM generate_series(%(first)s, %(last)s) AS n
            """,
            {"first": start + 1, "last": start + rows},
        )
        return int(cursor.rowcount)


def reprice_submit(*, owner_id: int, by_staff: bool, percent: str | int) -> Run:
    """Start a `catalogue.reprice` run for `owner_id`. Repricing the shared catalogue is staff
    work: `by_staff` false raises WorkflowNotPermitted (the workflow's rule, as for jobs). Bad
    input raises WorkflowInputError (field errors); QuotaExceeded when the owner has
    SAS_QUOTAS["RUNS_IN_FLIGHT"] runs going. Either way nothing is written. Transaction: its
    own (the quota count and the run)."""
    workflow_permit(get_workflow(REPRICE_WORKFLOW), staff=by_staff)
    with transaction.atomic():
        quota_check_runs(owner_id=owner_id)
        return run_submit(workflow=REPRICE_WORKFLOW, input={"percent": percent}, owner_id=owner_id)
