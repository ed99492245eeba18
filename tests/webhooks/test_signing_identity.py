"""Whose secret signs a webhook (issue 26): the row the run was made for decides, never the
run's input nor the agent's message.

Before, the webhook agent signed with the secret of `owner_id` in its payload, so a job of
`webhook_delivery` (or `alert_webhook`) naming a customer's owner_id made a forged "order
completed" verify at that customer's receiver. Each test writes the forged input into the run
and the step as such a job did, sends the forged payload in the message too, runs the agent's
attempt (the real agent code, its real HTTP call to a real receiver, its reply recorded on the
real database) and checks what the receiver got.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from alerting.models import Alert, AlertRule
from alerting.webhook import ALERT_WEBHOOK_WORKFLOW, alert_webhook_deliver
from orders.services import order_submit
from scheduler.models import Run, Step
from scheduler.services import run_submit, step_claim_due
from webhooks.models import WebhookDelivery
from webhooks.services import webhook_secret_get_or_create
from webhooks.signing import signature_verify
from webhooks.tasks import webhook_deliver
from webhooks.workflows import WEBHOOK_WORKFLOW

from ..orders.conftest import ORDER, make_user
from .receiver import Receiver

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

FORGED_BODY = '{"type":"completed","order_id":"forged"}'


@pytest.fixture
def allowed(settings: Any, receiver: Receiver) -> Receiver:
    """The receiver listens on 127.0.0.1: let both egress policies reach it."""
    netloc = urlsplit(receiver.url).netloc
    settings.SAS_CALLBACK_PRIVATE_HOSTS = [netloc]
    settings.SAS_ALERT_WEBHOOK_PRIVATE_HOSTS = [netloc]
    settings.SAS_ALERT_WEBHOOK_SECRET = "operators-alert-secret"
    return receiver


def _forge(run_id: Any, forged: dict[str, Any]) -> dict[str, Any]:
    """Write `forged` as the run's input and its step's payload; claim the step and return the
    agent's message, carrying `forged` as its payload too."""
    Run.objects.filter(pk=run_id).update(input=forged)
    Step.objects.filter(run_id=run_id).update(payload=forged)
    (claim,) = step_claim_due(instance="test", limit=1, run_id=run_id)
    return {**claim.message(), "payload": forged}


def _verifies(request: Any, secret: str) -> bool:
    return signature_verify(secret=secret, body=request.body, header=request.headers["X-SAS-Signature"])


def test_delivery__forged_owner_and_body_in_its_run__row_owners_secret_and_rows_body_sent(
    allowed: Receiver,
) -> None:
    alice, victim = make_user("hooks-alice"), make_user("hooks-victim")
    alice_secret = webhook_secret_get_or_create(user_id=alice.id).secret
    victim_secret = webhook_secret_get_or_create(user_id=victim.id).secret
    order_submit(owner_id=alice.id, data=ORDER, callback_url=allowed.url)
    delivery = WebhookDelivery.objects.get()
    forged = {
        "delivery_id": delivery.pk,
        "owner_id": victim.id,
        "url": allowed.url,
        "body": FORGED_BODY,
        "headers": {"X-SAS-Event-Id": "forged"},
    }

    webhook_deliver.perform(path="", **_forge(delivery.delivery_run_id, forged))

    [request] = allowed.requests
    assert request.body == delivery.body.encode() and request.body != FORGED_BODY.encode()
    assert request.headers["X-SAS-Event-Id"] == str(delivery.event_uuid)
    assert _verifies(request, alice_secret) and not _verifies(request, victim_secret)
    delivery.refresh_from_db()
    assert delivery.state == WebhookDelivery.State.DELIVERED


def test_delivery__run_no_outbox_row_started__nothing_sent_step_refused(allowed: Receiver) -> None:
    """A `webhook_delivery` run that no outbox row started (what a job of it made) sends
    nothing, whatever its input names: its step ends refused, with why."""
    staff, victim = make_user("hooks-staff"), make_user("hooks-victim2")
    forged = {"delivery_id": 1, "owner_id": victim.id, "url": allowed.url, "body": FORGED_BODY, "headers": {}}
    run = run_submit(workflow=WEBHOOK_WORKFLOW, input=forged, owner_id=staff.id)

    webhook_deliver.perform(path="", **_forge(run.pk, forged))

    assert allowed.requests == []
    step = Step.objects.get(run_id=run.pk)
    assert "no row of its own was made for this step's run; nothing sent" in step.last_error
    assert step.process_state == Step.State.ERROR


def test_alert_webhook__forged_customer_owner_in_an_operator_alerts_run__signed_with_the_operators_secret(
    allowed: Receiver,
) -> None:
    """An operator rule's alert (no owner): a forged `owner_id` in its run does not make it
    signed with that customer's secret."""
    victim = make_user("hooks-victim3")
    victim_secret = webhook_secret_get_or_create(user_id=victim.id).secret
    rule = AlertRule.objects.create(
        name="ops rule",
        kind="workflow_failure_rate",
        notify_email=False,
        notify_webhook=True,
        webhook_url=allowed.url,
    )
    alert = Alert.objects.create(rule=rule, kind=rule.kind, message="m", key=f"{rule.pk}:x")
    body = '{"event":"alert.firing"}'
    run = run_submit(
        workflow=ALERT_WEBHOOK_WORKFLOW,
        input={"url": allowed.url, "body": body, "owner_id": None},
        correlation_id=f"alert:{alert.pk}",
    )
    forged = {"url": allowed.url, "body": body, "owner_id": victim.id, "headers": {}}

    alert_webhook_deliver.perform(path="", **_forge(run.pk, forged))

    [request] = allowed.requests
    assert _verifies(request, "operators-alert-secret") and not _verifies(request, victim_secret)


def test_alert_webhook__run_not_made_for_an_alert__nothing_sent(allowed: Receiver) -> None:
    victim = make_user("hooks-victim4")
    forged = {"url": allowed.url, "body": FORGED_BODY, "owner_id": victim.id, "headers": {}}
    run = run_submit(workflow=ALERT_WEBHOOK_WORKFLOW, input=forged, correlation_id="order:1")

    alert_webhook_deliver.perform(path="", **_forge(run.pk, forged))

    assert allowed.requests == []
    assert "nothing sent" in Step.objects.get(run_id=run.pk).last_error
