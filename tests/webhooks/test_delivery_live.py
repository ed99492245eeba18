"""Webhook delivery end to end: real workers deliver to a real HTTP receiver in this process."""

from __future__ import annotations

from typing import Any

from django.test import Client
from rest_framework.test import APIClient

from alerting.models import Alert
from sastools.harness import wait_for
from scheduler.models import Run, RunEvent
from webhooks.models import WebhookDelivery
from webhooks.workflows import WEBHOOK_WORKFLOW

from ..e2e.helpers import wait_run
from ..orders.conftest import ORDER, make_user, token_client
from .receiver import Receiver


def _place(client: APIClient, receiver: Receiver, **extra: Any) -> str:
    response = client.post("/api/orders/", {**ORDER, **extra, "callback_url": receiver.url}, format="json")
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def _wait_deliveries_done(order_id: str, timeout: float = 40.0) -> list[WebhookDelivery]:
    def done() -> list[WebhookDelivery] | None:
        run = Run.objects.get(correlation_id=order_id, workflow="order_fulfilment")
        rows = list(WebhookDelivery.objects.filter(subscription__run=run).order_by("sequence"))
        finished = all(r.state in ("delivered", "given_up") for r in rows)
        if run.is_terminal and rows and finished and len(rows) == run.events.count():
            return rows
        return None

    return wait_for(done, timeout=timeout, what=f"all webhook deliveries of {order_id} to finish")


def test_webhooks__completed_order__every_event_once_in_order_signed(engine: Any, receiver: Receiver) -> None:
    client = token_client(make_user("wh"))
    secret = client.get("/api/webhook-secret/").json()["secret"]

    order_id = _place(client, receiver)
    wait_run(Run.objects.get(correlation_id=order_id).pk, (Run.State.COMPLETED,))
    rows = _wait_deliveries_done(order_id)

    events = receiver.unique_events(secret)
    expected = list(RunEvent.objects.filter(run__correlation_id=order_id).order_by("id"))
    assert [e["event_id"] for e in events] == [str(e.event_id) for e in expected]
    assert [e["type"] for e in events] == [
        "received",
        "started",
        "step_completed",
        "step_completed",
        "step_completed",
        "completed",
    ]
    assert [e["sequence"] for e in events] == list(range(1, 7))
    assert {e["order_id"] for e in events} == {order_id}
    assert all(r.state == "delivered" for r in rows)
    assert len(receiver.accepted()) == 6  # nothing was sent twice on a healthy receiver


def test_webhooks__receiver_fails_first_try__retried_with_same_event_id(
    engine: Any, receiver: Receiver
) -> None:
    receiver.mode = "fail_first"
    client = token_client(make_user("wh"))
    secret = client.get("/api/webhook-secret/").json()["secret"]

    order_id = _place(client, receiver, card="tok_decline")
    wait_run(Run.objects.get(correlation_id=order_id).pk, (Run.State.COMPENSATED,))
    rows = _wait_deliveries_done(order_id)

    events = receiver.unique_events(secret)
    expected = list(RunEvent.objects.filter(run__correlation_id=order_id).order_by("id"))
    assert [e["event_id"] for e in events] == [str(e.event_id) for e in expected]
    assert "compensating" in [e["type"] for e in events] and events[-1]["type"] == "compensated"
    assert [e["sequence"] for e in events] == list(range(1, len(rows) + 1))
    assert all(r.state == "delivered" for r in rows)
    # Every event was refused once (500) and sent again, byte for byte, under the same event id.
    refused = [r.headers["X-SAS-Event-Id"] for r in receiver.requests if r.status == 500]
    assert refused == [e["event_id"] for e in events]


def test_webhooks__receiver_refuses__given_up_and_visible_in_admin(engine: Any, receiver: Receiver) -> None:
    receiver.mode = "refuse"
    client = token_client(make_user("wh"))

    order_id = _place(client, receiver)
    wait_run(Run.objects.get(correlation_id=order_id).pk, (Run.State.COMPLETED,))
    rows = _wait_deliveries_done(order_id)

    assert [r.state for r in rows] == ["given_up"] * 6
    assert all("410" in r.last_error and r.attempts == 1 for r in rows)
    assert Run.objects.filter(workflow=WEBHOOK_WORKFLOW, state=Run.State.COMPENSATED).count() == 6
    # A receiver refusing for good is its owner's business outcome, shown as "given up" on the
    # delivery (below), not an operator alert (issue 7: alerts are for people who must act).
    assert not Alert.objects.filter(run__workflow=WEBHOOK_WORKFLOW).exists()
    admin = make_user("ops")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    browser = Client()
    browser.force_login(admin)
    page = browser.get("/admin/webhooks/webhookdelivery/", {"state__exact": "given_up"})
    assert page.status_code == 200
    html = page.content.decode()
    assert html.count("Given up") >= 6 and order_id in html and "410" in html
