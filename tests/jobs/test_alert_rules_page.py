"""The job page's alert rules (issue 21, seed 004 per-user alerting) through Django's test client:
listed with their firing state, added through the form (bad input: every field's error, nothing
written), deleted after a confirmation page; another customer's job or rule is a 404."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from alerting.models import Alert, AlertRule
from alerting.services import alert_rules_evaluate

from ..alerting.conftest import job, run
from .conftest import make_user

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

RULE = {
    "kind": "job_consecutive_failures",
    "threshold": "2",
    "min_runs": "1",
    "window_minutes": "60",
    "notify_email": "on",
    "webhook_url": "",
    "name": "two in a row",
}


@pytest.fixture
def no_rules(db: Any) -> None:
    AlertRule.objects.all().delete()  # the shipped operator rules: each test sees its own only


def _signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _add(client: Client, job_id: int, **changes: str) -> Any:
    return client.post(reverse("jobs:alert_rule_create", args=[job_id]), {**RULE, **changes})


def test_job_page__add_rule__listed_quiet_then_firing_after_failures(no_rules: None) -> None:
    alice = make_user("alice")
    j = job(alice)
    client = _signed_in(alice)
    page = client.get(reverse("jobs:detail", args=[j.pk])).content.decode()
    assert 'id="no-alert-rules"' in page and 'id="alert-rule-form"' in page

    response = _add(client, j.pk)
    assert response.status_code == 302 and response["Location"].endswith("#alert-rules")
    (rule,) = AlertRule.objects.all()
    assert (rule.owner_id, rule.job_id, rule.kind, rule.threshold, rule.notify_email) == (
        alice.pk,
        j.pk,
        "job_consecutive_failures",
        2.0,
        True,
    )
    page = client.get(reverse("jobs:detail", args=[j.pk])).content.decode()
    assert f'data-rule="{rule.pk}" data-firing="no"' in page
    assert "the last 2 runs all failed" in page and "Quiet" in page

    for i in range(2):
        run(state="compensated", job=j, ago=timedelta(seconds=3 - i))
    alert_rules_evaluate()
    assert Alert.objects.filter(rule=rule, state="firing").exists()
    page = client.get(reverse("jobs:detail", args=[j.pk])).content.decode()
    assert f'data-rule="{rule.pk}" data-firing="yes"' in page
    assert "Firing since" in page and "its last 2 runs failed" in page


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"threshold": "0"}, "threshold", "a number of runs, 1 to 100"),
        ({"threshold": "abc"}, "threshold", "Enter a number."),
        ({"kind": "job_failure_rate", "threshold": "5"}, "threshold", "0.01 to 1"),
        ({"kind": "job_missed_runs", "threshold": "10"}, "threshold", "60 to 604800"),
        ({"kind": "steps_overdue"}, "kind", "Select a valid choice."),  # an operator kind
        ({"window_minutes": "100000"}, "window_minutes", "minutes, 1 to 10080"),
        ({"min_runs": "0"}, "min_runs", "1 to 10000"),
        ({"webhook_url": "http://169.254.169.254/latest"}, "webhook_url", ""),
        ({"notify_email": "", "webhook_url": ""}, "notify_email", "a rule needs a channel"),
    ],
)
def test_job_page__bad_rule__400_with_the_fields_error_nothing_written(
    no_rules: None, changes: dict[str, str], field: str, message: str
) -> None:
    alice = make_user("alice")
    j = job(alice)
    data = {**RULE, **changes}
    if changes.get("notify_email") == "":
        del data["notify_email"]  # an unticked checkbox is not sent
    response = _signed_in(alice).post(reverse("jobs:alert_rule_create", args=[j.pk]), data)
    assert response.status_code == 400
    form = response.context["rule_form"]
    assert field in form.errors, form.errors
    assert message in " ".join(form.errors[field])
    page = response.content.decode()
    assert 'id="rule-form-errors"' in page and f'id="field-{field}"' in page
    assert 'class="field has-error" id="field-' + field in page or field == "notify_email"
    assert not AlertRule.objects.exists()


def test_job_page__rules_are_the_owners__another_customers_job_or_rule_is_404(no_rules: None) -> None:
    alice, bob = make_user("alice"), make_user("bob")
    alices, bobs = job(alice), job(bob)
    bobs_rule = AlertRule.objects.create(name="b", kind="job_missed_runs", owner=bob, job=bobs, threshold=60)
    alices_rule = AlertRule.objects.create(
        name="a", kind="job_missed_runs", owner=alice, job=alices, threshold=60
    )
    client = _signed_in(alice)
    assert _add(client, bobs.pk).status_code == 404
    delete_bobs = reverse("jobs:alert_rule_delete", args=[bobs.pk, bobs_rule.pk])
    assert client.get(delete_bobs).status_code == 404
    assert client.post(delete_bobs).status_code == 404
    # Bob's rule through Alice's own job's address: still not hers.
    assert client.post(reverse("jobs:alert_rule_delete", args=[alices.pk, bobs_rule.pk])).status_code == 404
    page = client.get(reverse("jobs:detail", args=[alices.pk])).content.decode()
    assert f'data-rule="{alices_rule.pk}"' in page and f'data-rule="{bobs_rule.pk}"' not in page
    assert set(AlertRule.objects.values_list("pk", flat=True)) == {bobs_rule.pk, alices_rule.pk}
    # Signed out: to the sign-in page, nothing written.
    assert Client().post(reverse("jobs:alert_rule_create", args=[alices.pk]), RULE).status_code == 302
    assert AlertRule.objects.count() == 2


def test_job_page__delete_rule__asks_first_then_deletes_it_and_its_alerts(no_rules: None) -> None:
    alice = make_user("alice")
    j = job(alice)
    client = _signed_in(alice)
    assert _add(client, j.pk).status_code == 302
    rule = AlertRule.objects.get()
    for i in range(2):
        run(state="compensated", job=j, ago=timedelta(seconds=3 - i))
    alert_rules_evaluate()
    assert Alert.objects.filter(rule=rule).count() == 1
    url = reverse("jobs:alert_rule_delete", args=[j.pk, rule.pk])
    confirm = client.get(url)
    assert confirm.status_code == 200 and 'id="confirm-delete-rule"' in confirm.content.decode()
    assert AlertRule.objects.filter(pk=rule.pk).exists()  # asking deleted nothing
    response = client.post(url)
    assert response.status_code == 302
    assert not AlertRule.objects.exists() and not Alert.objects.exists()
    assert client.post(url).status_code == 404  # twice: gone
