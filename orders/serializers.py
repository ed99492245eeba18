"""API shapes. Input serializers check types and ranges field by field (so every error comes
back under its field name); the order workflow's own validation runs after them, in the service."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.core.validators import URLValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from scheduler.models import Run, RunEvent, Step

from .models import CURRENCIES
from .workflows import MAX_AMOUNT, MAX_ITEMS, MAX_QUANTITY


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer, not "3" or 3.0 or true: wrong types are errors, not guesses."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return int(super().to_internal_value(data))


@extend_schema_field(
    {
        "type": "string",
        # Greater than zero, at most 999999.99 here (the API also takes 1000000 and JSON numbers).
        "pattern": r"^(0\.(0[1-9]|[1-9][0-9]?)|[1-9][0-9]{0,5}(\.[0-9]{1,2})?)$",
        "example": "25.00",
    }
)
class AmountField(serializers.DecimalField):
    """A positive amount with at most two decimals, as a string ("25.00") or a JSON number."""


class ItemSerializer(serializers.Serializer[dict[str, Any]]):
    sku = serializers.CharField(max_length=64, help_text="Stock keeping unit, e.g. SKU-1.")
    quantity = StrictIntegerField(min_value=1, max_value=MAX_QUANTITY)


class OrderCreateSerializer(serializers.Serializer[dict[str, Any]]):
    items = ItemSerializer(many=True, allow_empty=False, min_length=1, max_length=MAX_ITEMS)
    amount = AmountField(
        max_digits=12,
        decimal_places=2,
        min_value=Decimal("0.01"),
        max_value=MAX_AMOUNT,
        coerce_to_string=True,
        help_text='Total to charge, as a string ("25.00") or a number; at most two decimals.',
    )
    currency = serializers.ChoiceField(choices=list(CURRENCIES))
    card = serializers.CharField(
        max_length=64,
        required=False,
        default="tok_ok",
        help_text="Card token for the payment service; tok_decline is declined by the simulator.",
    )
    callback_url = serializers.URLField(
        max_length=2000,
        required=False,
        default="",
        allow_blank=True,
        validators=[URLValidator(schemes=["http", "https"])],
        help_text="Every event of the order is POSTed here, signed (see docs/api.md#webhooks).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return attrs

    def to_order_data(self) -> tuple[dict[str, Any], str]:
        """(input for order_submit, callback_url)."""
        data = dict(self.validated_data)
        callback_url = data.pop("callback_url", "") or ""
        data["amount"] = str(data["amount"])
        data["items"] = [dict(item) for item in data["items"]]
        return data, callback_url


class StepSerializer(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=Step.Kind.choices)
    state = serializers.ChoiceField(choices=Step.State.choices)
    state_label = serializers.CharField()
    attempts = serializers.IntegerField()
    failure_count = serializers.IntegerField()
    max_failures = serializers.IntegerField()
    complete_by = serializers.DateTimeField(allow_null=True, help_text="Deadline of the current attempt.")
    last_error = serializers.CharField(allow_blank=True)


class EventSerializer(serializers.Serializer[dict[str, Any]]):
    event_id = serializers.UUIDField()
    type = serializers.ChoiceField(choices=RunEvent.Type.choices)
    type_label = serializers.CharField()
    step = serializers.CharField(allow_null=True)
    data = serializers.DictField()
    at = serializers.DateTimeField()


class OrderSerializer(serializers.Serializer[dict[str, Any]]):
    id = serializers.UUIDField()
    state = serializers.ChoiceField(choices=Run.State.choices)
    url = serializers.URLField()
    created_at = serializers.DateTimeField()
    items = ItemSerializer(many=True)
    amount = serializers.CharField()
    currency = serializers.CharField()
    callback_url = serializers.CharField(allow_blank=True)


class OrderDetailSerializer(OrderSerializer):
    state_label = serializers.CharField()
    error = serializers.CharField(allow_blank=True)
    cancellable = serializers.BooleanField()
    steps = StepSerializer(many=True)
    events = EventSerializer(many=True)


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    detail = serializers.CharField()


class IdempotencyConflictSerializer(ErrorSerializer):
    order_id = serializers.UUIDField()


class WebhookSecretSerializer(serializers.Serializer[dict[str, Any]]):
    secret = serializers.CharField()
    algorithm = serializers.CharField()
    header = serializers.CharField()
