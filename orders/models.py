"""The order domain: what a customer asked for. Its processing state lives on its run."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

CURRENCIES = ("EUR", "USD", "GBP", "JPY", "KRW")


class Order(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="orders")
    run = models.OneToOneField("scheduler.Run", on_delete=models.PROTECT, related_name="order")
    items = models.JSONField()
    amount = models.DecimalField(max_digits=12, decimal_places=2)
    currency = models.CharField(max_length=3)
    card_token = models.CharField(max_length=64, default="tok_ok")
    # Where the run's events are POSTed (signed); empty for none. See webhooks/.
    callback_url = models.URLField(max_length=2000, blank=True, default="")
    # The client's Idempotency-Key (API). Unique per owner, so two racing POSTs with the same
    # key resolve through the database: one insert wins, the other gets IntegrityError and
    # returns the winner. `request_fingerprint` (sha256 of the cleaned request) tells a true
    # retry from a key reused for a different order.
    idempotency_key = models.CharField(max_length=255, blank=True, default="")
    request_fingerprint = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(amount__gt=0), name="order_amount_positive"),
            models.CheckConstraint(condition=Q(currency__in=CURRENCIES), name="order_currency_known"),
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="order_owner_idempotency_key_unique",
            ),
        ]
        indexes = [models.Index(fields=["owner", "-created_at"], name="order_owner_created_idx")]

    def __str__(self) -> str:
        return f"Order {self.id} ({self.amount} {self.currency})"
