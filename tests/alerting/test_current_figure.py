"""Issue 27, item 5's last two: a firing message that changes is updated on the open alert, not
frozen at its firing figure (a failure rate "2 of 2 runs failed" that becomes 3 of 5), and the
next e-mail says the current figure; an alert's webhook carries the links its e-mail carries
(SAS_PUBLIC_URL)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from alerting.models import Alert
from alerting.services import alert_body, alert_email_build, alert_rules_evaluate
from scheduler.models import Run

from .conftest import job, rule, run, user

pytestmark = pytest.mark.usefixtures("no_rules")


def test_failure_rate__figure_moves_while_firing__open_alert_and_next_email_say_the_current_one() -> None:
    r = rule("workflow_failure_rate", target="wf", threshold=0.5, min_runs=2, notify_email=True)
    run(state="failed")
    run(state="compensated")
    assert alert_rules_evaluate().ran
    alert = Alert.objects.get(rule=r)
    assert (alert.state, alert.message) == ("firing", "workflow wf: 2 of 2 runs failed (100%) in 15 minutes")

    run(state="failed")
    run(state="completed")
    run(state="completed")
    assert alert_rules_evaluate().ran
    alert.refresh_from_db()
    assert (alert.state, alert.message) == ("firing", "workflow wf: 3 of 5 runs failed (60%) in 15 minutes")
    assert alert.count == 3  # the failed runs linked, as before
    assert alert_rules_evaluate().ran  # unchanged figure: the same row, the same message
    assert Alert.objects.get(rule=r).message == alert.message

    Run.objects.filter(workflow="wf").update(created_at=timezone.now() - timedelta(hours=1))
    assert alert_rules_evaluate().ran
    resolved = alert_email_build(alert_id=alert.pk, state="resolved")
    assert resolved is not None
    assert "Last seen while firing: workflow wf: 3 of 5 runs failed (60%) in 15 minutes" in resolved.body


def test_webhook__public_url__links_to_alert_job_and_runs_as_the_email_does(settings: Any) -> None:
    settings.SAS_PUBLIC_URL = "https://sas.example.com/"
    r = rule("run_needs_operator", name="Runs stuck", window=timedelta(days=7))
    failed = run(state="failed")
    assert alert_rules_evaluate().ran
    alert = Alert.objects.get(rule=r)
    links = json.loads(alert_body(alert=alert, state="firing"))["alert"]["links"]
    assert links == {
        "alert": f"https://sas.example.com/admin/alerting/alert/{alert.pk}/change/",
        "runs": {str(failed.pk): f"https://sas.example.com/admin/scheduler/run/{failed.pk}/change/"},
    }
    email = alert_email_build(alert_id=alert.pk, state="firing")
    assert email is not None and all(url in email.body for url in [links["alert"], *links["runs"].values()])

    settings.SAS_PUBLIC_URL = ""
    assert json.loads(alert_body(alert=alert, state="firing"))["alert"]["links"] == {}


def test_webhook__customer_rule__links_to_the_job_pages(settings: Any) -> None:
    settings.SAS_PUBLIC_URL = "https://sas.example.com"
    owner = user("carol")
    j = job(owner)
    r = rule("job_consecutive_failures", job=j, owner=owner, threshold=1)
    failed = run(state="compensated", job=j)
    assert alert_rules_evaluate().ran
    alert = Alert.objects.get(rule=r)
    links = json.loads(alert_body(alert=alert, state="firing"))["alert"]["links"]
    assert links == {
        "job": f"https://sas.example.com/jobs/{j.pk}/",
        "runs": {str(failed.pk): f"https://sas.example.com/jobs/{j.pk}/runs/{failed.pk}/"},
    }
