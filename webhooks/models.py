"""Webhooks: a run's events POSTed, signed, to the URL its submitter registered.

`WebhookSubscription` says where a run's events go; `WebhookDelivery` is the outbox: one row per
(subscription, event), written in the transaction that records the event, so an event is never
lost and never queued twice. Deliveries of one subscription go out one at a time, in `sequence`
order (the order in which the events committed); each is a run of the `webhook_delivery`
workflow, so it is deadlined, retried with backoff, breaker-guarded and supervised like any other
remote call.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


class WebhookSecret(models.Model):
    """The per-user key that signs every webhook body sent for that user's runs."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_secret"
    )
    secret = models.CharField(max_length=128)
    created_at = models.DateTimeField(auto_now_add=True)
    rotated_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"webhook secret of {self.user}"


class WebhookSubscription(models.Model):
    """Where the events of one run are delivered."""

    run = models.OneToOneField("scheduler.Run", on_delete=models.CASCADE, related_name="webhook_subscription")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    url = models.URLField(max_length=2000)
    # What the receiver correlates with (the order id); copied from the run.
    correlation_id = models.CharField(max_length=100, blank=True, default="")
    # Next delivery's sequence number; taken under this row's lock, so it follows commit order.
    next_sequence = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.correlation_id or self.run_id} -> {self.url}"


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERING = "delivering", "Delivering"
    DELIVERED = "delivered", "Delivered"
    GIVEN_UP = "given_up", "Given up"


class WebhookDelivery(models.Model):
    """The outbox row of one event for one subscription, and how its delivery went."""

    State = DeliveryState

    subscription = models.ForeignKey(WebhookSubscription, on_delete=models.CASCADE, related_name="deliveries")
    # No constraint in the database: the events are range-partitioned by time (issue 29), so
    # their id alone is no unique key a foreign key could reference. Deleting an event through
    # the ORM still deletes its delivery; a dropped partition of events leaves the delivery,
    # which carries its own body (decision record 42).
    event = models.OneToOneField(
        "scheduler.RunEvent", on_delete=models.CASCADE, related_name="webhook_delivery", db_constraint=False
    )
    # Copied from the event: the receiver's dedupe key (X-SAS-Event-Id).
    event_uuid = models.UUIDField(default=uuid.uuid4, editable=False)
    event_type = models.CharField(max_length=30)
    sequence = models.PositiveIntegerField()
    url = models.URLField(max_length=2000)
    # The exact bytes sent (and signed): identical on every retry.
    body = models.TextField()
    state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    # The `webhook_delivery` run that carries this delivery (null while pending).
    delivery_run = models.OneToOneField(
        "scheduler.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="webhook_delivery"
    )
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        ordering = ["subscription_id", "sequence"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=DeliveryState.values), name="webhook_delivery_state_valid"
            ),
            models.UniqueConstraint(fields=["subscription", "sequence"], name="webhook_delivery_seq_unique"),
            # At most one delivery in flight per subscription: the database backs the ordering rule.
            models.UniqueConstraint(
                fields=["subscription"],
                condition=Q(state="delivering"),
                name="webhook_delivery_one_in_flight",
            ),
        ]
        indexes = [
            # The next one to send: the oldest pending of a subscription.
            models.Index(
                fields=["subscription", "sequence"],
                name="webhook_delivery_pending_idx",
                condition=Q(state="pending"),
            ),
            models.Index(fields=["state", "-created_at"], name="webhook_delivery_state_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} #{self.sequence} -> {self.url} ({self.state})"
