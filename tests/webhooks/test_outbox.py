"""The webhook outbox on the real database (rolled back), driving the engine's services by hand."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orders.services import order_submit
from scheduler.models import Run, RunEvent
from scheduler.services import run_cancel, step_claim_due, step_reply
from webhooks.models import WebhookDelivery, WebhookSubscription
from webhooks.services import webhook_deliveries_retry
from webhooks.signing import signature_compute, signature_verify
from webhooks.workflows import WEBHOOK_WORKFLOW

from ..orders.conftest import ORDER, make_user

# The test plays the scheduler (claims and replies itself): no claim inside order_submit.
pytestmark = pytest.mark.usefixtures("manual_scheduler")

HOOK = "http://127.0.0.1:9/hooks"


@pytest.fixture
def owner(db: None) -> Any:
    return make_user("hook")


def _finish_delivery(delivery: WebhookDelivery, outcome: str = "success") -> None:
    assert delivery.delivery_run_id is not None
    claim = step_claim_due(instance="test", limit=1, run_id=delivery.delivery_run_id)[0]
    step_reply(step_id=claim.step_id, lease=claim.lease, outcome=outcome, error="410 gone", claim_next=False)  # type: ignore[arg-type]


def test_signature__verify__accepts_own_rejects_tampered() -> None:
    now = 1_764_000_000
    header = signature_compute(secret="s3cret", body=b'{"a":1}', timestamp=now)

    assert header.startswith(f"t={now},v1=") and len(header) == len(f"t={now},v1=") + 64
    assert signature_verify(secret="s3cret", body=b'{"a":1}', header=header, now=now)
    assert not signature_verify(secret="s3cret", body=b'{"a":2}', header=header, now=now)
    assert not signature_verify(secret="other", body=b'{"a":1}', header=header, now=now)
    assert not signature_verify(secret="s3cret", body=b'{"a":1}', header="", now=now)


def test_signature__replayed_after_the_window__refused_and_timestamp_is_signed() -> None:
    """The signature covers `t.body`: an old delivery replayed is refused by the helper, and
    moving its `t` forward breaks the HMAC."""
    sent = 1_764_000_000
    header = signature_compute(secret="s3cret", body=b"{}", timestamp=sent)
    mac = header.split("v1=")[1]

    assert signature_verify(secret="s3cret", body=b"{}", header=header, now=sent + 300)
    assert not signature_verify(secret="s3cret", body=b"{}", header=header, now=sent + 301)
    assert not signature_verify(
        secret="s3cret", body=b"{}", header=f"t={sent + 301},v1={mac}", now=sent + 301
    )
    assert not signature_verify(secret="s3cret", body=b"{}", header=header, now=sent + 3600, tolerance=600)
    # A rotation may send two signatures; one matching is enough.
    assert signature_verify(secret="s3cret", body=b"{}", header=f"t={sent},v1=00,v1={mac}", now=sent)
    assert not signature_verify(secret="s3cret", body=b"{}", header=f"v1={mac}", now=sent)


def test_subscribe__order_with_callback__received_event_queued_and_in_flight(owner: Any) -> None:
    order = order_submit(owner_id=owner.id, data=ORDER, callback_url=HOOK)

    delivery = WebhookDelivery.objects.get()
    body = json.loads(delivery.body)
    assert delivery.state == "delivering" and delivery.sequence == 1 and delivery.event_type == "received"
    assert body["order_id"] == str(order.pk) and body["type"] == "received" and body["sequence"] == 1
    assert body["event_id"] == str(delivery.event_uuid) == str(RunEvent.objects.get(run=order.run).event_id)
    run = delivery.delivery_run
    assert run is not None and run.workflow == WEBHOOK_WORKFLOW and run.owner_id == owner.id
    payload = run.steps.get().payload
    # Signed by the agent at each attempt (the signature covers its timestamp), not stored.
    # The owner is the subscription's (the agent reads it from the outbox row itself, issue 26).
    assert "X-SAS-Signature" not in payload["headers"] and payload["owner_id"] == owner.id
    assert payload["headers"]["X-SAS-Event-Id"] == body["event_id"]


def test_outbox__more_events__queued_in_order_one_in_flight(owner: Any) -> None:
    order = order_submit(owner_id=owner.id, data=ORDER, callback_url=HOOK)

    run_cancel(run_id=order.run_id, actor="test")

    rows = list(WebhookDelivery.objects.order_by("sequence").values_list("sequence", "event_type", "state"))
    assert rows == [
        (1, "received", "delivering"),
        (2, "compensating", "pending"),
        (3, "cancelled", "pending"),
    ]
    # Delivery runs report nothing themselves: only the order's run is subscribed.
    assert WebhookSubscription.objects.count() == 1
    assert Run.objects.filter(workflow=WEBHOOK_WORKFLOW).count() == 1


def test_outbox__delivery_finishes__next_one_starts(owner: Any) -> None:
    order = order_submit(owner_id=owner.id, data=ORDER, callback_url=HOOK)
    run_cancel(run_id=order.run_id, actor="test")

    _finish_delivery(WebhookDelivery.objects.get(sequence=1))

    states = dict(WebhookDelivery.objects.values_list("sequence", "state"))
    assert states == {1: "delivered", 2: "delivering", 3: "pending"}
    first = WebhookDelivery.objects.get(sequence=1)
    assert first.attempts == 1 and first.finished_at is not None


def test_outbox__receiver_refuses__given_up_then_next_starts_and_retry_requeues(owner: Any) -> None:
    order = order_submit(owner_id=owner.id, data=ORDER, callback_url=HOOK)
    run_cancel(run_id=order.run_id, actor="test")

    _finish_delivery(WebhookDelivery.objects.get(sequence=1), outcome="permanent")

    first = WebhookDelivery.objects.get(sequence=1)
    assert first.state == "given_up" and "410" in first.last_error
    assert WebhookDelivery.objects.get(sequence=2).state == "delivering"

    assert webhook_deliveries_retry(deliveries=WebhookDelivery.objects.filter(pk=first.pk)) == 1
    first.refresh_from_db()
    assert first.state == "pending" and first.delivery_run_id is None


def test_outbox__order_without_callback__nothing_queued(owner: Any) -> None:
    order = order_submit(owner_id=owner.id, data=ORDER)
    run_cancel(run_id=order.run_id, actor="test")

    assert WebhookDelivery.objects.count() == 0 and WebhookSubscription.objects.count() == 0
    assert not Run.objects.filter(workflow=WEBHOOK_WORKFLOW).exists()


def test_outbox__supervisor_batch_retries_steps__subscribed_runs_events_queued_others_not(owner: Any) -> None:
    from datetime import UTC, datetime

    from scheduler.models import Step
    from supervisor.services import step_expire_sweep

    subscribed = order_submit(owner_id=owner.id, data=ORDER, callback_url=HOOK)
    quiet = order_submit(owner_id=owner.id, data=ORDER)
    for order in (subscribed, quiet):
        step_claim_due(instance="test", limit=1, run_id=order.run_id)
        Step.objects.filter(run_id=order.run_id, seq=0).update(
            complete_by=datetime(2000, 1, 1, tzinfo=UTC), start_by=None
        )

    result = step_expire_sweep(batch=10, instance="sup")

    assert result.retried == 2
    assert RunEvent.objects.filter(type="step_retrying").count() == 2
    queued = list(WebhookDelivery.objects.order_by("sequence").values_list("event_type", flat=True))
    assert queued == ["received", "started", "step_retrying"]
    retrying = WebhookDelivery.objects.get(event_type="step_retrying")
    assert json.loads(retrying.body)["order_id"] == str(subscribed.pk)
