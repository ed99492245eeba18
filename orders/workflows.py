"""The order workflow: reserve inventory -> charge payment -> create shipment, each undone in
reverse by release inventory <- refund payment <- cancel shipment."""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from scheduler.workflows import StepContext, StepDef, Workflow, WorkflowInputError, register
from webhooks.destinations import UrlRefused, webhook_url_check

from .models import CURRENCIES, CURRENCY_MINOR_UNITS

ORDER_WORKFLOW = "order_fulfilment"
MAX_ITEMS = 50
MAX_QUANTITY = 10_000
MAX_AMOUNT = Decimal("1000000")

# A plain decimal: digits, at most one point, an optional sign. No exponent, no NaN/Infinity,
# no thousands separators: money is written out in full.
_PLAIN_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_EXPONENT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][+-]?[0-9]+")
_AMOUNT_FORMAT = 'must be a decimal number such as "12.50"'


# Where webhooks may go: an absolute http(s) URL (webhooks/ POSTs each event there) that the
# callback egress policy allows (no loopback, private, link-local or metadata address, none of
# the remote services' paths by default: webhooks/destinations.py).
CALLBACK_URL_MAX_LENGTH = 2000
_http_url_validator = URLValidator(schemes=["http", "https"])


def callback_url_validator(value: str) -> None:
    """The callback URL rule the form, the API and the service all apply."""
    _http_url_validator(value)
    try:
        webhook_url_check(url=value)
    except UrlRefused as exc:
        message = f"Not an allowed callback URL: {exc.customer}."
        raise ValidationError(message, code="callback_refused") from None


class AmountError(ValueError):
    """An amount that breaks an order rule; the message is for the person who typed it."""


def amount_parse(value: object, *, currency: str | None) -> Decimal:
    """The order amount rule, the one the form, the API and the workflow all apply.

    `value` is what the client sent: a string ("25.00", recommended) or a JSON number. It must be
    written as a plain decimal (no exponent: "1e3" is refused, not read as 1000), be greater than
    zero and at most MAX_AMOUNT, and have no finer fraction than `currency`'s ISO 4217 minor unit
    allows (cents for EUR, none for JPY: "1500.00" JPY is 1500, "1.50" JPY is refused). Returns
    the amount with exactly the currency's decimals ("1500" JPY, "25.50" EUR). With `currency`
    None (a form field or serializer field checked before the currency is known; or an unknown
    currency, which the caller reports) the decimals are left for a second call with the
    currency, and the amount is returned as given. Raises AmountError.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
        raise AmountError(_AMOUNT_FORMAT)
    text = format(value, "f") if isinstance(value, Decimal) else str(value).strip()
    if isinstance(value, str) and _EXPONENT.fullmatch(text):
        raise AmountError(f'write the amount out in full, without an exponent: "{text}" is not accepted')
    if not _PLAIN_DECIMAL.fullmatch(text):
        # Also a float that Python prints with an exponent (1e+20, 1e-07): too large or too small.
        raise AmountError(_AMOUNT_FORMAT)
    amount = Decimal(text)
    if amount <= 0:
        raise AmountError("must be greater than zero")
    if amount > MAX_AMOUNT:
        raise AmountError(f"must be at most {MAX_AMOUNT}")
    if currency is None:
        return amount
    minor = CURRENCY_MINOR_UNITS[currency]
    unit = Decimal(1).scaleb(-minor)
    if amount != amount.quantize(unit):
        if minor == 0:
            raise AmountError(f'{currency} has no minor unit: give a whole amount, such as "1500"')
        raise AmountError(f"at most {minor} decimal places for {currency}")
    return amount.quantize(unit)


def validate_order_input(data: Mapping[str, Any]) -> dict[str, Any]:
    """Check every field; collect all errors so a caller can show them next to the fields."""
    errors: dict[str, list[str]] = {}
    allowed = {"order_id", "items", "amount", "currency", "card"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        errors["non_field_errors"] = [f"unknown field(s): {', '.join(unknown)}"]

    items = data.get("items")
    clean_items: list[dict[str, Any]] = []
    if not isinstance(items, list) or not items:
        errors["items"] = ["must be a non-empty list of {sku, quantity}"]
    elif len(items) > MAX_ITEMS:
        errors["items"] = [f"at most {MAX_ITEMS} items"]
    else:
        for index, item in enumerate(items):
            if not isinstance(item, Mapping) or set(item) - {"sku", "quantity"}:
                errors.setdefault("items", []).append(
                    f"item {index}: must be an object with sku and quantity"
                )
                continue
            sku, quantity = item.get("sku"), item.get("quantity")
            if not isinstance(sku, str) or not sku.strip() or len(sku) > 64 or "\x00" in sku:
                errors.setdefault("items", []).append(
                    f"item {index}: sku must be a non-empty string (max 64)"
                )
            if (
                isinstance(quantity, bool)
                or not isinstance(quantity, int)
                or not 1 <= quantity <= MAX_QUANTITY
            ):
                errors.setdefault("items", []).append(
                    f"item {index}: quantity must be a whole number from 1 to {MAX_QUANTITY}"
                )
            if isinstance(sku, str) and isinstance(quantity, int):
                clean_items.append({"sku": sku.strip(), "quantity": quantity})

    currency = data.get("currency")
    if currency not in CURRENCIES:
        errors["currency"] = [f"must be one of {', '.join(CURRENCIES)}"]

    amount: Decimal | None = None
    try:
        amount = amount_parse(data.get("amount"), currency=currency if currency in CURRENCIES else None)
    except AmountError as exc:
        errors["amount"] = [str(exc)]

    card = data.get("card", "tok_ok")
    if not isinstance(card, str) or not card or len(card) > 64:
        errors["card"] = ["must be a card token string (max 64)"]

    if errors:
        raise WorkflowInputError(errors)
    assert amount is not None
    cleaned: dict[str, Any] = {
        "items": clean_items,
        "amount": str(amount),
        "currency": currency,
        "card": card,
    }
    if "order_id" in data:
        cleaned["order_id"] = str(data["order_id"])
    return cleaned


def _with_order(ctx: StepContext, body: dict[str, Any]) -> dict[str, Any]:
    if ctx.input.get("order_id"):
        body["order_id"] = ctx.input["order_id"]
    return body


def _reserve(ctx: StepContext) -> dict[str, Any]:
    return _with_order(ctx, {"items": ctx.input["items"]})


def _release(ctx: StepContext) -> dict[str, Any]:
    return {"reservation_key": ctx.keys["reserve_inventory"]}


def _charge(ctx: StepContext) -> dict[str, Any]:
    return _with_order(
        ctx, {"amount": ctx.input["amount"], "currency": ctx.input["currency"], "card": ctx.input["card"]}
    )


def _refund(ctx: StepContext) -> dict[str, Any]:
    return {"charge_key": ctx.keys["charge_payment"]}


def _ship(ctx: StepContext) -> dict[str, Any]:
    return _with_order(ctx, {"order_id": ctx.run_id, "items": ctx.input["items"]})


def _cancel_shipment(ctx: StepContext) -> dict[str, Any]:
    return {"shipment_key": ctx.keys["create_shipment"]}


def build_order_workflow() -> Workflow:
    policy: dict[str, Any] = {
        "timeout": settings.SAS["ORDER_STEP_TIMEOUT"],
        "queue_timeout": settings.SAS["ORDER_QUEUE_TIMEOUT"],
        "max_failures": settings.SAS["ORDER_MAX_FAILURES"],
        "backoff_base": settings.SAS["ORDER_BACKOFF_BASE"],
        "backoff_max": settings.SAS["ORDER_BACKOFF_MAX"],
    }
    forward = {**policy, "deadline": settings.SAS["ORDER_STEP_DEADLINE"]}
    # Compensations never give up (the customer's money must come back): no deadline, backoff
    # capped higher, and max_failures is when an operator is alerted while they go on.
    undo = {
        **policy,
        "max_failures": settings.SAS["ORDER_COMPENSATION_ALERT_AFTER"],
        "backoff_max": settings.SAS["ORDER_COMPENSATION_BACKOFF_MAX"],
    }
    return Workflow(
        name=ORDER_WORKFLOW,
        label="Order fulfilment",
        description="Reserve the items, charge the card and create the shipment; a step that "
        "fails for good undoes the ones before it (release, refund, cancel).",
        input_example={"items": [{"sku": "SKU-0000001", "quantity": 1}], "amount": "9.99", "currency": "EUR"},
        # Customers' own orders: every step acts on what the input names, for the run's owner.
        customer_schedulable=True,
        validate=validate_order_input,
        # A submitted order is never dropped for waiting: it waits its turn, which the fair
        # claim bounds (docs/operating/fairness.md).
        schedule_to_start=None,
        steps=[
            StepDef(
                name="reserve_inventory",
                label="Reserve the items",
                operation="agents.inventory.reserve",
                payload=_reserve,
                # The items in the input are what the stock refuses (docs/developing/simulator.md).
                input_refusals=("out_of_stock", "bad_request"),
                compensation=StepDef(
                    name="release_inventory",
                    label="Release the items",
                    operation="agents.inventory.release",
                    payload=_release,
                    **undo,
                ),
                **forward,
            ),
            StepDef(
                name="charge_payment",
                label="Charge the card",
                operation="agents.payment.charge",
                payload=_charge,
                # The card in the input is what the provider declines.
                input_refusals=("card_declined", "bad_request"),
                compensation=StepDef(
                    name="refund_payment",
                    label="Refund the card",
                    operation="agents.payment.refund",
                    payload=_refund,
                    **undo,
                ),
                **forward,
            ),
            StepDef(
                name="create_shipment",
                label="Create the shipment",
                operation="agents.shipping.create",
                payload=_ship,
                input_refusals=("bad_request",),
                compensation=StepDef(
                    name="cancel_shipment",
                    label="Cancel the shipment",
                    operation="agents.shipping.cancel",
                    payload=_cancel_shipment,
                    **undo,
                ),
                **forward,
            ),
        ],
    )


register(build_order_workflow())
