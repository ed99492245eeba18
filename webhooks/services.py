"""Webhook services: subscribe a run, turn its events into outbox rows, send them one at a time.

Ordering rule: a subscription has at most one delivery in flight (a partial unique index backs
it); the next pending one starts when the previous one's delivery run finishes. Every decision
is taken under the subscription row's lock, inside the transaction of the state change that
caused it (a run event, or a delivery run ending), so an outbox row commits with its event or not
at all, and two transactions never start two deliveries of one subscription.
"""

from __future__ import annotations

import json
import logging
import secrets
import uuid
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import DateTimeField, ExpressionWrapper, QuerySet
from django.db.models.functions import Now
from django.utils import timezone

from scheduler.models import Run, RunEvent, Step
from scheduler.services import run_observe, run_submit

from .destinations import webhook_url_check
from .models import WebhookDelivery, WebhookSecret, WebhookSubscription
from .signing import EVENT_ID_HEADER, SEQUENCE_HEADER
from .workflows import WEBHOOK_WORKFLOW

logger = logging.getLogger(__name__)

# A delivery run ending in one of these ends its delivery: Completed = delivered, the rest =
# given up (the step ran out of attempts or the receiver refused for good).
_DELIVERY_END: dict[str, str] = {
    RunEvent.Type.COMPLETED: WebhookDelivery.State.DELIVERED,
    RunEvent.Type.COMPENSATED: WebhookDelivery.State.GIVEN_UP,
    RunEvent.Type.CANCELLED: WebhookDelivery.State.GIVEN_UP,
    RunEvent.Type.FAILED: WebhookDelivery.State.GIVEN_UP,
}
# Deliveries go after the work they report on when the scheduler is busy.
DELIVERY_PRIORITY = -1


def webhook_secret_get_or_create(*, user_id: int) -> WebhookSecret:
    secret, _ = WebhookSecret.objects.get_or_create(
        user_id=user_id, defaults={"secret": secrets.token_hex(32)}
    )
    return secret


def webhook_delivery_for_step(*, step_id: int) -> dict[str, Any] | None:
    """What the webhook agent sends for step `step_id`, read from the outbox row whose delivery
    run the step belongs to - never from the run's input or the agent's message (issue 26): the
    owner (whose secret signs and whose breaker guards it), the URL, the body and the event's
    headers. None when no delivery row was made for that run (a run nobody's outbox started):
    nothing may be sent for it. One query."""
    delivery = (
        WebhookDelivery.objects.filter(delivery_run__steps=step_id)
        .values("pk", "url", "body", "event_uuid", "sequence", "subscription__owner_id")
        .first()
    )
    if delivery is None:
        return None
    return {
        "delivery_id": delivery["pk"],
        "owner_id": delivery["subscription__owner_id"],
        "url": delivery["url"],
        "body": delivery["body"],
        "headers": {EVENT_ID_HEADER: str(delivery["event_uuid"]), SEQUENCE_HEADER: str(delivery["sequence"])},
    }


def webhook_secret_rotate(*, user_id: int) -> WebhookSecret:
    """A new secret for the user; delivery attempts from now on are signed with it."""
    with transaction.atomic():
        secret = webhook_secret_get_or_create(user_id=user_id)
        secret.secret = secrets.token_hex(32)
        secret.rotated_at = timezone.now()
        secret.save(update_fields=["secret", "rotated_at"])
    return secret


def webhook_subscribe(
    *, run_id: uuid.UUID | str, owner_id: int, url: str, correlation_id: str
) -> WebhookSubscription:
    """Deliver the events of `run_id` to `url`, including those it already has (the "received"
    event is written before the caller knows the run id). `url` must pass the callback egress
    policy (UrlRefused otherwise; the order form and API check it first, field by field).

    Transaction: the caller's (order_submit's): the subscription commits with the run.
    """
    webhook_url_check(url=url)
    with transaction.atomic():
        run_observe(run_id=run_id)
        subscription = WebhookSubscription.objects.create(
            run_id=run_id, owner_id=owner_id, url=url, correlation_id=correlation_id
        )
        subscription = WebhookSubscription.objects.select_for_update().get(pk=subscription.pk)
        for event in RunEvent.objects.filter(run_id=run_id).order_by("id"):
            _outbox_add(subscription, event)
        _start_next(subscription)
    return subscription


def webhook_event_recorded(*, event: RunEvent) -> None:
    """Called for every run event, in its transaction: queue it for the run's subscriber, if any;
    if it ends a delivery run, record that delivery's outcome and start the subscription's next."""
    # No savepoint: this runs on every state change, inside the caller's transaction, and a
    # failure here must roll that whole transaction back anyway (the outbox row is part of it).
    with transaction.atomic(savepoint=False):
        subscription = WebhookSubscription.objects.select_for_update().filter(run_id=event.run_id).first()
        if subscription is not None:
            _outbox_add(subscription, event)
            _start_next(subscription)
        elif event.type in _DELIVERY_END:
            _delivery_finish(run_id=event.run_id, state=_DELIVERY_END[event.type])


def webhook_deliveries_retry(*, deliveries: QuerySet[WebhookDelivery]) -> int:
    """Operator action: send given-up deliveries again (each in its subscription's order).
    Returns how many were put back to pending."""
    count = 0
    with transaction.atomic():
        for subscription_id in deliveries.values_list("subscription_id", flat=True).distinct():
            subscription = WebhookSubscription.objects.select_for_update().get(pk=subscription_id)
            count += deliveries.filter(
                subscription=subscription, state=WebhookDelivery.State.GIVEN_UP
            ).update(state=WebhookDelivery.State.PENDING, delivery_run=None, finished_at=None)
            _start_next(subscription)
    return count


def _outbox_add(subscription: WebhookSubscription, event: RunEvent) -> WebhookDelivery:
    """Write the outbox row for `event`; `subscription` is locked by the caller."""
    sequence = subscription.next_sequence
    body = {
        **event.as_dict(),
        "order_id": subscription.correlation_id,
        "sequence": sequence,
    }
    delivery = WebhookDelivery.objects.create(
        subscription=subscription,
        event=event,
        event_uuid=event.event_id,
        event_type=event.type,
        sequence=sequence,
        url=subscription.url,
        body=json.dumps(body, sort_keys=True, separators=(",", ":")),
    )
    subscription.next_sequence = sequence + 1
    WebhookSubscription.objects.filter(pk=subscription.pk).update(next_sequence=sequence + 1)
    return delivery


def _start_next(subscription: WebhookSubscription) -> WebhookDelivery | None:
    """Start the oldest pending delivery unless one is in flight. `subscription` is locked."""
    deliveries = WebhookDelivery.objects.filter(subscription=subscription)
    if deliveries.filter(state=WebhookDelivery.State.DELIVERING).exists():
        return None
    delivery = deliveries.filter(state=WebhookDelivery.State.PENDING).order_by("sequence").first()
    if delivery is None:
        return None
    # Signed by the agent at each attempt (the signature covers the attempt's timestamp).
    headers = {EVENT_ID_HEADER: str(delivery.event_uuid), SEQUENCE_HEADER: str(delivery.sequence)}
    run = run_submit(
        workflow=WEBHOOK_WORKFLOW,
        # The row's own values, written by the engine (the workflow is never a job): the agent
        # still sends what the outbox row holds, signed with its subscription owner's secret
        # (webhook_delivery_for_step), whatever a run's input or a message says.
        input={
            "delivery_id": delivery.pk,
            "owner_id": subscription.owner_id,
            "url": delivery.url,
            "body": delivery.body,
            "headers": headers,
        },
        owner_id=subscription.owner_id,
        priority=DELIVERY_PRIORITY,
        correlation_id=str(delivery.event_uuid),
        # Its end (delivered or given up) finishes the delivery: webhooks observe its events.
        observed=True,
    )
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        state=WebhookDelivery.State.DELIVERING, delivery_run=run, started_at=timezone.now()
    )
    return delivery


def _delivery_finish(*, run_id: uuid.UUID | str, state: str) -> None:
    delivery = (
        WebhookDelivery.objects.filter(delivery_run_id=uuid.UUID(str(run_id)))
        .only("pk", "subscription_id")
        .first()
    )
    if delivery is None:
        return
    subscription = WebhookSubscription.objects.select_for_update().get(pk=delivery.subscription_id)
    step = Step.objects.filter(run_id=run_id, kind=Step.Kind.FORWARD).only("attempts", "last_error").first()
    error = ""
    if state != WebhookDelivery.State.DELIVERED:
        run_error = Run.objects.filter(pk=run_id).values_list("error", flat=True).first() or ""
        error = (step.last_error if step and step.last_error else run_error)[:4000]
    updated = WebhookDelivery.objects.filter(pk=delivery.pk, state=WebhookDelivery.State.DELIVERING).update(
        state=state,
        attempts=step.attempts if step else 0,
        last_error=error,
        finished_at=timezone.now(),
    )
    if updated:
        if state != WebhookDelivery.State.DELIVERED:
            logger.warning("webhook delivery %s to %s given up: %s", delivery.pk, subscription.url, error)
        _start_next(subscription)


# Finished deliveries: what retention may delete (pending and in-flight ones are never touched).
_DELIVERY_FINISHED = (WebhookDelivery.State.DELIVERED, WebhookDelivery.State.GIVEN_UP)


def webhook_deliveries_purge(*, older_than_days: int, limit: int, batch: int = 1000) -> dict[str, int | bool]:
    """Delete delivered and given-up deliveries that finished more than `older_than_days` ago
    (database clock), at most `limit` of them, `batch` rows per statement. Returns
    {"deleted": n, "more": whether the limit stopped it}.

    Idempotent and bounded: two at once delete each row once between them; each batch commits
    on its own (autocommit), so a purge cut off halfway keeps what it did. The deliveries' runs
    stay (the run's own history is the engine's).
    """
    if older_than_days < 1 or limit < 1 or batch < 1:
        raise ValueError("older_than_days, limit and batch must be at least 1")
    cutoff = ExpressionWrapper(Now() - timedelta(days=older_than_days), output_field=DateTimeField())
    # created_at <= finished_at, so the created_at bound lets the (state, created_at) index
    # narrow the scan; finished_at is the rule.
    finished = WebhookDelivery.objects.filter(
        state__in=_DELIVERY_FINISHED, created_at__lt=cutoff, finished_at__lt=cutoff
    )
    deleted = 0
    while deleted < limit:
        size = min(batch, limit - deleted)
        ids = list(finished.order_by().values_list("pk", flat=True)[:size])
        if not ids:
            return {"deleted": deleted, "more": False}
        count, _ = WebhookDelivery.objects.filter(pk__in=ids, state__in=_DELIVERY_FINISHED).delete()
        deleted += count
        if len(ids) < size:
            return {"deleted": deleted, "more": False}
    return {"deleted": deleted, "more": finished.exists()}
