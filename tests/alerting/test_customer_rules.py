"""Customers' own alert rules (seed 004 per-user alerting): set through the API on their own
jobs only, bounded, and notifying the owner and nobody else."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from rest_framework.test import APIClient

from alerting.models import Alert, AlertRule
from alerting.services import alert_rules_evaluate
from alerting.tasks import alert_email_send

from ..orders.conftest import token_client
from .conftest import job, rule, run, user

pytestmark = pytest.mark.usefixtures("no_rules")


@pytest.fixture
def alice() -> Any:
    return user("alice")


@pytest.fixture
def bob() -> Any:
    return user("bob")


def _create(client: APIClient, **body: Any) -> Any:
    return client.post("/api/alert-rules/", body, format="json")


def test_api__rule_on_own_job__created_listed_and_deleted(alice: Any) -> None:
    j = job(alice)
    client = token_client(alice)
    response = _create(client, job=j.pk, kind="job_consecutive_failures", threshold=3)
    assert response.status_code == 201, response.json()
    rule_id = response.json()["id"]
    assert client.get("/api/alert-rules/").json()["results"][0]["job"] == j.pk
    assert client.delete(f"/api/alert-rules/{rule_id}/").status_code == 204
    assert not AlertRule.objects.exists()


def test_api__another_customers_job_or_rule__refused_nothing_written(alice: Any, bob: Any) -> None:
    bobs_job = job(bob)
    bobs_rule = AlertRule.objects.create(
        name="b", kind="job_missed_runs", owner=bob, job=bobs_job, threshold=60
    )
    client = token_client(alice)
    response = _create(client, job=bobs_job.pk, kind="job_consecutive_failures", threshold=3)
    assert response.status_code == 400 and response.json() == {"job": ["no such job of yours"]}
    assert client.get(f"/api/alert-rules/{bobs_rule.pk}/").status_code == 404
    assert client.delete(f"/api/alert-rules/{bobs_rule.pk}/").status_code == 404
    assert client.get("/api/alert-rules/").json()["results"] == []
    assert list(AlertRule.objects.values_list("pk", flat=True)) == [bobs_rule.pk]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "steps_overdue", "threshold": 1}, "kind"),  # an operator kind
        ({"kind": "job_failure_rate", "threshold": 5}, "threshold"),  # a rate above 1
        ({"kind": "job_consecutive_failures", "threshold": 0}, "threshold"),
        ({"kind": "job_missed_runs", "threshold": 1}, "threshold"),  # under 60 s
        ({"kind": "job_failure_rate", "threshold": 0.5, "window_minutes": 10**9}, "window_minutes"),
        ({"kind": "job_failure_rate", "threshold": 0.5, "min_runs": 1.5}, "min_runs"),
        ({"kind": "job_failure_rate", "threshold": "NaN"}, "threshold"),
        (
            {"kind": "job_consecutive_failures", "threshold": 3, "webhook_url": "http://169.254.169.254/"},
            "webhook_url",
        ),
        (
            {"kind": "job_consecutive_failures", "threshold": 3, "webhook_url": "ftp://example.com/x"},
            "webhook_url",
        ),
        ({"kind": "job_consecutive_failures", "threshold": 3, "notify_email": False}, "notify_email"),
        ({"kind": "job_consecutive_failures", "threshold": 3, "recipients": "x@evil.example"}, "recipients"),
    ],
)
def test_api__bad_input__400_naming_the_field_nothing_written(
    alice: Any, body: dict[str, Any], field: str
) -> None:
    j = job(alice)
    response = _create(token_client(alice), job=j.pk, **body)
    assert response.status_code == 400
    assert field in response.json(), response.json()
    assert not AlertRule.objects.exists()


def test_api__per_user_cap__refused_past_it(alice: Any, settings: Any) -> None:
    settings.SAS_ALERT_RULES_PER_USER = 2
    j = job(alice)
    client = token_client(alice)
    for n in range(2):
        assert (
            _create(client, job=j.pk, kind="job_consecutive_failures", threshold=3, name=f"r{n}").status_code
            == 201
        )
    response = _create(client, job=j.pk, kind="job_consecutive_failures", threshold=3, name="r3")
    assert response.status_code == 400 and "at most 2" in response.json()["job"][0]
    assert AlertRule.objects.count() == 2


def test_customer_rule__their_job_fails__only_they_are_mailed(
    alice: Any, bob: Any, django_capture_on_commit_callbacks: Any
) -> None:
    alices, bobs = job(alice), job(bob)
    client = token_client(alice)
    assert _create(client, job=alices.pk, kind="job_consecutive_failures", threshold=2).status_code == 201
    rule("workflow_failure_rate", threshold=0.99, min_runs=1000)  # an operator rule that stays quiet
    for _ in range(2):
        run(state="compensated", job=bobs, ago=timedelta(seconds=5))  # bob's job fails: not alice's rule
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        alert_rules_evaluate()
    assert not Alert.objects.exists() and not callbacks

    failed = [run(state="compensated", job=alices, ago=timedelta(seconds=3 - i)) for i in range(2)]
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        alert_rules_evaluate()
    (alert,) = Alert.objects.all()
    assert alert.rule.owner_id == alice.pk and set(alert.links.values_list("run_id", flat=True)) == {
        r.pk for r in failed
    }
    assert len(callbacks) == 1  # one e-mail, queued on commit
    assert alert_email_send(alert_id=alert.pk, state="firing")
    (message,) = mail.outbox
    assert message.to == [alice.email]  # the owner, not ADMINS, not bob
    assert "its last 2 runs failed" in message.body
    assert client.get("/api/alert-rules/").json()["results"][0]["firing"] is True
    assert token_client(bob).get("/api/alert-rules/").json()["results"] == []
