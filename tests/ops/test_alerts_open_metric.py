"""`sas_alerts_open` on /metrics counts the open alerts - firing, not acknowledged - by severity,
the platform's (operator rules, the engine's own) and customers' apart (issue 27): resolved,
pending and acknowledged alerts are not open, and a customer's alert never counts as the
platform's. Real PostgreSQL, the /metrics view in-process."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from alerting.models import Alert, AlertRule

from ..alerting.conftest import job, user
from .test_metrics_live import metrics_settings, scrape, value

__all__ = ["metrics_settings"]


def _alert(rule: AlertRule | None, subject: str, **fields: Any) -> Alert:
    key = f"{rule.pk if rule else 'engine'}:{subject}"
    defaults: dict[str, Any] = {"kind": "step_error", "message": "m", "state": "firing"}
    return Alert.objects.create(rule=rule, subject=subject, key=key, **{**defaults, **fields})


@pytest.mark.usefixtures("metrics_settings")
def test_sas_alerts_open__resolved_pending_acknowledged_and_customers_apart(db: Any) -> None:
    Alert.objects.all().delete()
    AlertRule.objects.all().delete()
    owner = user("metrics-customer")
    ops_rule = AlertRule.objects.create(name="ops", kind="step_error", severity="critical")
    customer_rule = AlertRule.objects.create(
        name="mine", kind="job_failure_rate", owner=owner, job=job(owner)
    )
    _alert(ops_rule, "a", severity="critical")  # open
    _alert(None, "engine", severity="warning")  # open, raised by the engine (no rule)
    _alert(ops_rule, "b", severity="critical", state="resolved")
    _alert(ops_rule, "c", severity="critical", state="resolved")
    _alert(ops_rule, "d", severity="critical", state="pending")
    _alert(ops_rule, "e", severity="critical", acknowledged_at="2026-01-01T00:00:00Z")
    _alert(customer_rule, "1", severity="warning")  # a customer's, open
    _alert(customer_rule, "2", severity="warning", state="resolved")

    samples = scrape(Client())
    assert value(samples, "sas_alerts_open", severity="critical", scope="system") == 1
    assert value(samples, "sas_alerts_open", severity="warning", scope="system") == 1
    assert value(samples, "sas_alerts_open", severity="info", scope="system") == 0
    assert value(samples, "sas_alerts_open", severity="warning", scope="customer") == 1
    assert value(samples, "sas_alerts_open", severity="critical", scope="customer") == 0
    assert sum(s.value for s in samples["sas_alerts_open"]) == 3
