"""Every alert webhook carries an event id to deduplicate on, as order webhooks do (issue 28):
`event_id` in the body and the `X-SAS-Event-Id` header of the delivery - the same on every
attempt of one delivery (the run's stored input), a new one for every announcement (firing,
resolved, firing again). The evaluator in-process on real PostgreSQL and Redis; the retry of
one delivery by real workers is in tests/alerting/test_live.py."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from alerting.services import alert_rules_evaluate
from alerting.webhook import ALERT_WEBHOOK_WORKFLOW
from scheduler.models import Run, Step
from webhooks.signing import EVENT_ID_HEADER

from .conftest import rule, run

pytestmark = pytest.mark.usefixtures("no_rules")


def _deliveries() -> list[tuple[str, str, str]]:
    """(body event, body event_id, header event id) of every alert webhook run, oldest first."""
    found = []
    for delivery in Run.objects.filter(workflow=ALERT_WEBHOOK_WORKFLOW).order_by("created_at"):
        body = json.loads(delivery.input["body"])
        step = Step.objects.get(run=delivery)
        found.append((body["event"], body["event_id"], step.payload["headers"][EVENT_ID_HEADER]))
    return found


def test_alert_webhook__event_id_in_body_and_header__one_per_announcement() -> None:
    r = rule(
        "workflow_failure_rate",
        target="wf-ev",
        threshold=0.5,
        min_runs=2,
        window=timedelta(minutes=10),
        notify_webhook=True,
        webhook_url="https://alerts.example.com/hook",
    )
    failed = [run(workflow="wf-ev", state="failed") for _ in range(2)]
    assert alert_rules_evaluate().ran  # fires
    Run.objects.filter(pk__in=[f.pk for f in failed]).update(created_at=timezone.now() - timedelta(hours=1))
    assert alert_rules_evaluate().ran  # resolves
    [run(workflow="wf-ev", state="failed") for _ in range(2)]
    assert alert_rules_evaluate().ran  # fires again: another announcement
    assert r.alerts.exists()

    deliveries = _deliveries()

    assert [event for event, _, _ in deliveries] == ["alert.firing", "alert.resolved", "alert.firing"]
    for _, body_id, header_id in deliveries:
        assert body_id == header_id and str(uuid.UUID(body_id)) == body_id
    assert len({body_id for _, body_id, _ in deliveries}) == 3  # never shared by two announcements
