"""The admin: the index's engine panel shows open alerts by severity; a rule is edited there;
an alert's page lists every affected run."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from alerting.models import Alert, AlertRule
from alerting.services import alert_rules_evaluate

from .conftest import rule, run

pytestmark = pytest.mark.usefixtures("no_rules")


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("ops-alerts", "ops@example.com", None))
    return client


def test_index_panel__open_alerts_by_severity__counted_and_linked(staff: Client) -> None:
    html = staff.get(reverse("admin:index")).content.decode()
    assert 'data-severity="critical">0 critical</a>' in html
    rule("run_needs_operator", severity="critical")
    failed = [run(state="failed") for _ in range(4)]
    alert_rules_evaluate()
    html = staff.get(reverse("admin:index")).content.decode()
    assert 'class="sas-badge sas-critical" data-severity="critical">1 critical</a>' in html
    assert "?status=open&amp;severity__exact=critical" in html

    alert = Alert.objects.get()
    page = staff.get(reverse("admin:alerting_alert_change", args=[alert.pk])).content.decode()
    for r in failed:  # every affected run, not only the first
        assert reverse("admin:scheduler_run_change", args=[r.pk]) in page
    listed = staff.get(reverse("admin:scheduler_run_changelist"), {"attention": "needs"}).content.decode()
    assert all(str(r.pk)[-8:] in listed for r in failed)


def test_rule_admin__edit_threshold__saved(staff: Client) -> None:
    r = rule("due_backlog", threshold=100)
    url = reverse("admin:alerting_alertrule_change", args=[r.pk])
    assert staff.get(url).status_code == 200
    data: dict[str, Any] = {
        "name": r.name,
        "kind": "due_backlog",
        "target": "",
        "enabled": "on",
        "threshold": "250",
        "min_runs": "5",
        "window": "00:15:00",
        "for_duration": "00:00:00",
        "severity": "warning",
        "cooldown": "00:05:00",
        "recipients": "",
        "webhook_url": "",
    }
    response = staff.post(url, data)
    assert response.status_code == 302, response.content.decode()[-2000:]
    assert AlertRule.objects.get(pk=r.pk).threshold == 250


def test_old_admin_address__alert_page__redirected_to_alerting(staff: Client) -> None:
    """An e-mail sent before the alert models moved (issue 27) links to /admin/supervisor/alert/."""
    response = staff.get("/admin/supervisor/alert/12/change/?status=open")
    assert response.status_code == 301
    assert response["Location"] == "/admin/alerting/alert/12/change/?status=open"
