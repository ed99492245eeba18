"""The order domain: what a customer asked for. Its processing state lives on its run."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q

from scheduler.ids import uuid7

CURRENCIES = ("EUR", "USD", "GBP", "JPY", "KRW")
# ISO 4217 minor units: the decimals an amount may have in each currency (no half yen or won).
# The amount rule that uses them is orders.workflows.amount_parse.
CURRENCY_MINOR_UNITS: dict[str, int] = {"EUR": 2, "USD": 2, "GBP": 2, "JPY": 0, "KRW": 0}
assert set(CURRENCY_MINOR_UNITS) == set(CURRENCIES), "every accepted currency needs its minor unit"


class Order(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
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
        return f"Order {self.id} ({self.amount_display} {self.currency})"

    @property
    def amount_display(self) -> str:
        """The amount with its currency's decimals: "25.00" EUR, "1500" JPY (the column keeps
        two decimals for every currency)."""
        minor = CURRENCY_MINOR_UNITS.get(self.currency, 2)
        return str(Decimal(self.amount).quantize(Decimal(1).scaleb(-minor)))
