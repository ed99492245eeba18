"""The engine-health page (ops/admin.py): counts across the apps, breakers, periodic tasks."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from agents.breaker import CircuitBreaker
from tests.admin.factories import order_failed, order_running

# The tests play the scheduler (see tests/admin/factories.py): no claim inside order_submit.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]


def _messages(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_health_page__counts_breakers_and_periodic_tasks(staff_client: Client, customer: Any) -> None:
    order_failed(customer)
    order_running(customer)
    breaker = CircuitBreaker("payment", failure_threshold=2)
    breaker.reset()
    breaker.record_failure()
    breaker.record_failure()
    try:
        html = staff_client.get(reverse("admin:scheduler_run_health")).content.decode()
    finally:
        breaker.reset()
    assert "Engine health" in html
    assert '<span class="sas-badge sas-open">open</span>' in html
    assert html.count("Reset breaker") == 3  # inventory, payment, shipping
    assert "sas: supervisor sweep" in html
    assert "/admin/django_celery_beat/periodictask/" in html
    assert 'href="/admin/scheduler/run/?state__exact=failed">1</a>' in html
    assert 'href="/admin/scheduler/run/?state__exact=running">1</a>' in html


def test_breaker_reset__post__closes_breaker(staff_client: Client) -> None:
    breaker = CircuitBreaker("inventory", failure_threshold=1)
    breaker.reset()
    breaker.record_failure()
    assert breaker.snapshot()["state"] == "open"
    url = reverse("admin:scheduler_run_breaker_reset", args=["inventory"])

    assert staff_client.get(url).status_code == 405
    assert breaker.snapshot()["state"] == "open"
    response = staff_client.post(url, follow=True)

    assert breaker.snapshot()["state"] == "closed"
    assert any("inventory reset" in t for t in _messages(response))
    assert (
        staff_client.post(reverse("admin:scheduler_run_breaker_reset", args=["nonsense"])).status_code == 403
    )


def test_admin_index__links_engine_health(staff_client: Client) -> None:
    html = staff_client.get(reverse("admin:index")).content.decode()
    assert reverse("admin:scheduler_run_health") in html
    assert "?attention=needs" in html


def test_health_page__job_occurrences_overdue__counted_with_a_hint(
    staff_client: Client, customer: Any
) -> None:
    from tests.engine_workflow import register_engine_workflow
    from tests.scheduler.jobs_support import make_due, new_job

    register_engine_workflow()
    url = reverse("admin:scheduler_run_health")
    fresh = staff_client.get(url).content.decode()
    make_due(new_job(customer, "late"), back=1)  # due an hour or more ago: no dispatcher fired it

    html = staff_client.get(url).content.decode()

    assert '<div class="sas-num">0</div>\n        <div class="sas-label">job occurrences' in fresh
    assert "is the <code>dispatcher</code> worker" not in fresh
    assert '<div class="sas-num">1</div>\n        <div class="sas-label">job occurrences' in html
    assert "is the <code>dispatcher</code> worker (queue <code>jobs</code>) running?" in html


def test_admin_index_and_health_page__link_flower(staff_client: Client, settings: Any) -> None:
    settings.SAS_MONITORING = {**settings.SAS_MONITORING, "FLOWER_URL": "http://flower.example:5555/"}
    index = staff_client.get(reverse("admin:index")).content.decode()
    assert (
        '<a href="http://flower.example:5555/" target="_blank" rel="noopener" id="sas-flower-link">' in index
    )
    health = staff_client.get(reverse("admin:scheduler_run_health")).content.decode()
    assert 'href="http://flower.example:5555/"' in health
    settings.SAS_MONITORING = {**settings.SAS_MONITORING, "FLOWER_URL": ""}
    assert "sas-flower-link" not in staff_client.get(reverse("admin:index")).content.decode()
