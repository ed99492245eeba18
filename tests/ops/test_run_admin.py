"""The run admin as ops registers it: the scheduler's, plus alerts and the order (ops/admin.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.admin.factories import order_failed, order_pending

# The tests play the scheduler (see tests/admin/factories.py): no claim inside order_submit.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]


def test_run_detail__order_run__links_order_and_counts_open_alerts(
    staff_client: Client, customer: Any
) -> None:
    failed = order_failed(customer)
    html = staff_client.get(reverse("admin:scheduler_run_change", args=[failed.run_id])).content.decode()
    assert reverse("admin:orders_order_change", args=[failed.pk]) in html
    # The failed run is linked to the open "runs needing an operator" alert.
    assert f"?links__run__id__exact={failed.run_id}&amp;status=open" in html


def test_run_changelist__needs_attention_filter__offered_first(staff_client: Client, customer: Any) -> None:
    order_pending(customer)
    html = staff_client.get(reverse("admin:scheduler_run_changelist")).content.decode()
    needs = html.index("Needs attention (failed or open alerts)")
    assert needs < html.index("Step overdue (past complete-by)") < html.index("Not finished")
