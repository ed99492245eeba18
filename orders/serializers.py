"""API shapes. Input serializers check types and ranges field by field (so every error comes
back under its field name); the order workflow's own validation runs after them, in the service."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from sasproject.api_input import ClosedSerializer, StrictCharField, StrictIntegerField
from scheduler.models import Run, RunEvent, Step, TaskExecutionHistory

from .models import CURRENCIES
from .workflows import (
    CALLBACK_URL_MAX_LENGTH,
    MAX_ITEMS,
    MAX_QUANTITY,
    AmountError,
    amount_parse,
    callback_url_validator,
)


@extend_schema_field(
    {
        "type": "string",
        # Greater than zero, at most 999999.99 here (the API also takes 1000000 and JSON numbers);
        # JPY and KRW take whole amounts only, which a per-field pattern cannot say.
        "pattern": r"^(0\.(0[1-9]|[1-9][0-9]?)|[1-9][0-9]{0,5}(\.[0-9]{1,2})?)$",
        "example": "25.00",
    }
)
class AmountField(serializers.Field):
    """A positive amount, as a string ("25.00") or a JSON number, checked by the order rule
    (`amount_parse`): format and range here, the currency's decimals in the serializer's
    `validate`, once the currency is known."""

    def to_internal_value(self, data: Any) -> Decimal:
        try:
            return amount_parse(data, currency=None)
        except AmountError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value: Any) -> str:
        return str(value)


@extend_schema_field({"type": "string", "format": "uri"})
class HttpUrlField(StrictCharField):
    """An http(s) URL, checked once by the order rule's validator. (DRF's URLField adds its own
    URLValidator to any given one, and a bad URL got "Enter a valid URL." twice.)"""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(validators=[callback_url_validator], **kwargs)


class ItemSerializer(ClosedSerializer):
    sku = StrictCharField(max_length=64, help_text="Stock keeping unit, e.g. SKU-1.")
    quantity = StrictIntegerField(min_value=1, max_value=MAX_QUANTITY)


class OrderCreateSerializer(ClosedSerializer):
    items = ItemSerializer(many=True, allow_empty=False, min_length=1, max_length=MAX_ITEMS)
    amount = AmountField(
        help_text=(
            'Total to charge, as a string ("25.00") or a number: greater than 0, at most 1000000, '
            "with at most the currency's decimals (two; none for JPY and KRW); no exponent."
        ),
    )
    currency = serializers.ChoiceField(choices=list(CURRENCIES))
    card = StrictCharField(
        max_length=64,
        required=False,
        default="tok_ok",
        help_text="Card token for the payment service; tok_decline is declined by the simulator.",
    )
    callback_url = HttpUrlField(
        max_length=CALLBACK_URL_MAX_LENGTH,
        required=False,
        default="",
        allow_blank=True,
        help_text="Every event of the order is POSTed here, signed (see docs/using/api.md#webhooks).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        try:  # the currency's decimals, now that both fields are known
            attrs["amount"] = amount_parse(attrs["amount"], currency=attrs["currency"])
        except AmountError as exc:
            raise serializers.ValidationError({"amount": [str(exc)]}) from None
        return attrs

    def to_order_data(self) -> tuple[dict[str, Any], str]:
        """(input for order_submit, callback_url)."""
        data = dict(self.validated_data)
        callback_url = data.pop("callback_url", "") or ""
        data["amount"] = str(data["amount"])
        data["items"] = [dict(item) for item in data["items"]]
        return data, callback_url


class AttemptSerializer(serializers.Serializer[dict[str, Any]]):
    attempt = serializers.IntegerField(help_text="1 for the first claim of the step, then 2, 3...")
    status = serializers.ChoiceField(choices=TaskExecutionHistory.Status.choices)
    status_label = serializers.CharField()
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField(allow_blank=True, help_text="The raw error, as the remote service said it.")
    reason = serializers.CharField(allow_blank=True, help_text="The same, as a sentence for your customer.")


class AttemptGroupSerializer(serializers.Serializer[dict[str, Any]]):
    reason = serializers.CharField(help_text="The failure, as a sentence for your customer.")
    status = serializers.ChoiceField(choices=TaskExecutionHistory.Status.choices)
    tries = serializers.IntegerField(help_text="Consecutive attempts that failed this way.")
    first_attempt = serializers.IntegerField()
    last_attempt = serializers.IntegerField()
    label = serializers.CharField(help_text='"Attempt 3", or "Attempts 1-18" for a group.')
    when = serializers.CharField(allow_blank=True, help_text='"17:14-17:15, 18 tries" (UTC); "" for one.')
    # "from"/"to" are Python keywords: declared below.


AttemptGroupSerializer._declared_fields["from"] = serializers.DateTimeField(help_text="The first try began.")
AttemptGroupSerializer._declared_fields["to"] = serializers.DateTimeField(help_text="The last try ended.")


class StepSerializer(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField()
    label = serializers.CharField(help_text="The step's name for people, from the workflow definition.")
    kind = serializers.ChoiceField(choices=Step.Kind.choices)
    state = serializers.ChoiceField(choices=Step.State.choices)
    state_label = serializers.CharField()
    attempts = serializers.IntegerField()
    failure_count = serializers.IntegerField()
    max_failures = serializers.IntegerField()
    complete_by = serializers.DateTimeField(allow_null=True, help_text="Deadline of the current attempt.")
    deadline = serializers.DateTimeField(
        allow_null=True,
        help_text=(
            "The whole step's deadline: it keeps trying (through outages) until then, and the order "
            "is undone if it has not succeeded by then. Null before its first attempt."
        ),
    )
    last_error = serializers.CharField(allow_blank=True)
    attempt_history = AttemptSerializer(many=True, help_text="Every attempt with its outcome, oldest first.")
    attempt_groups = AttemptGroupSerializer(
        many=True,
        help_text="The failed attempts with their reasons, consecutive ones failing the same way as one "
        "group (an outage's 18 deferred tries are one line), oldest first.",
    )


class ProgressSerializer(serializers.Serializer[dict[str, Any]]):
    done = serializers.IntegerField(help_text="Forward steps done.")
    total = serializers.IntegerField(help_text="Forward steps.")
    undone = serializers.IntegerField(help_text="Compensation steps done.")
    to_undo = serializers.IntegerField(help_text="Compensation steps.")


class EventSerializer(serializers.Serializer[dict[str, Any]]):
    event_id = serializers.UUIDField()
    type = serializers.ChoiceField(choices=RunEvent.Type.choices)
    type_label = serializers.CharField()
    step = serializers.CharField(allow_null=True)
    step_label = serializers.CharField(allow_null=True)
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
    progress = ProgressSerializer()
    steps = StepSerializer(many=True)
    events = EventSerializer(many=True)


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    detail = serializers.CharField()


class IdempotencyConflictSerializer(ErrorSerializer):
    order_id = serializers.UUIDField()


class WebhookSecretSerializer(serializers.Serializer[dict[str, Any]]):
    """Your secret and how a delivery is signed with it (webhooks/signing.py, docs/using/api.md)."""

    secret = serializers.CharField(help_text="The HMAC key (its UTF-8 bytes).")
    algorithm = serializers.CharField(
        help_text='What is signed, in words: HMAC-SHA256 of "<t>.<raw body>" (not the body alone), hex.'
    )
    header = serializers.CharField(help_text="The request header that carries the signature.")
    header_format = serializers.CharField(
        help_text="t=<Unix seconds>,v1=<hex signature> (several v1 during a secret rotation)."
    )
    signed_payload = serializers.CharField(
        help_text="\"<t>.<raw body>\": the header's t, a full stop, the request body's raw bytes."
    )
    tolerance_seconds = serializers.IntegerField(
        help_text="The replay window: refuse a t further than this from your clock."
    )
