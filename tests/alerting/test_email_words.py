"""Alert e-mails an operator can act on (issue 27): links to the alert, job and runs under
SAS_PUBLIC_URL (none without it), windows in words, counts in the right number, and a RESOLVED
mail that says what resolved and how long it lasted. Real PostgreSQL, the evaluator in-process."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from alerting.models import Alert
from alerting.services import alert_email_build, alert_rules_evaluate
from alerting.words import duration_words
from scheduler.models import Run

from .conftest import job, rule, run, user

pytestmark = pytest.mark.usefixtures("no_rules")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (timedelta(minutes=10), "10 minutes"),
        (timedelta(days=7), "7 days"),
        (timedelta(hours=1, minutes=30), "1 hour 30 minutes"),
        (timedelta(seconds=1), "1 second"),
        (timedelta(0), "0 seconds"),
    ],
)
def test_duration_words(value: timedelta, words: str) -> None:
    assert duration_words(value) == words


def test_messages__windows_in_words_and_plurals() -> None:
    rate = rule("workflow_failure_rate", target="wf", threshold=0.5, min_runs=2, window=timedelta(minutes=10))
    operator = rule("run_needs_operator", window=timedelta(days=7))
    j = job(user("streak"))
    one = rule("job_consecutive_failures", job=j, threshold=1)
    run(workflow="wf", state="failed")
    run(workflow="wf", state="compensated")
    run(workflow="streak", state="compensated", job=j)
    assert alert_rules_evaluate().ran
    assert Alert.objects.get(rule=rate).message == "workflow wf: 2 of 2 runs failed (100%) in 10 minutes"
    assert Alert.objects.get(rule=operator).message == "1 run needs an operator (Failed)"
    assert Alert.objects.get(rule=one).message == f"job {j.name}: its last run failed"


def test_email__public_url__links_to_alert_and_runs__resolved_says_what_and_how_long(settings: Any) -> None:
    settings.SAS_PUBLIC_URL = "https://sas.example.com/"
    r = rule("run_needs_operator", name="Runs stuck", window=timedelta(days=7), notify_email=True)
    failed = run(state="failed")
    assert alert_rules_evaluate().ran
    alert = Alert.objects.get(rule=r)
    firing = alert_email_build(alert_id=alert.pk, state="firing")
    assert firing is not None
    assert f"Alert: https://sas.example.com/admin/alerting/alert/{alert.pk}/change/" in firing.body
    assert f"https://sas.example.com/admin/scheduler/run/{failed.pk}/change/" in firing.body

    Alert.objects.filter(pk=alert.pk).update(fired_at=timezone.now() - timedelta(minutes=12))
    Run.objects.filter(pk=failed.pk).update(state="compensated")
    assert alert_rules_evaluate().ran
    resolved = alert_email_build(alert_id=alert.pk, state="resolved")
    assert resolved is not None
    assert "Runs stuck is back to normal after 12 minutes" in resolved.body

    settings.SAS_PUBLIC_URL = ""
    plain = alert_email_build(alert_id=alert.pk, state="firing")
    assert plain is not None and "https://" not in plain.body


def test_email__customer_rule__links_to_the_job_pages_not_the_admin(settings: Any) -> None:
    settings.SAS_PUBLIC_URL = "https://sas.example.com"
    owner = user("linked")
    j = job(owner)
    mine = rule("job_consecutive_failures", job=j, owner=owner, threshold=1, notify_email=True)
    failed = run(state="compensated", job=j)
    assert alert_rules_evaluate().ran
    message = alert_email_build(alert_id=Alert.objects.get(rule=mine).pk, state="firing")
    assert message is not None
    assert f"Job: https://sas.example.com/jobs/{j.pk}/" in message.body
    assert f"https://sas.example.com/jobs/{j.pk}/runs/{failed.pk}/" in message.body
    assert "/admin/" not in message.body
