"""The order workflow: reserve inventory -> charge payment -> create shipment, each undone in
reverse by release inventory <- refund payment <- cancel shipment."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings

from scheduler.workflows import StepContext, StepDef, Workflow, WorkflowInputError, register

from .models import CURRENCIES

ORDER_WORKFLOW = "order_fulfilment"
MAX_ITEMS = 50
MAX_QUANTITY = 10_000
MAX_AMOUNT = Decimal("1000000")


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
            if not isinstance(sku, str) or not sku.strip() or len(sku) > 64:
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

    raw_amount = data.get("amount")
    amount: Decimal | None = None
    if isinstance(raw_amount, bool) or not isinstance(raw_amount, str | int | float):
        errors["amount"] = ['must be a decimal number such as "12.50"']
    else:
        try:
            amount = Decimal(str(raw_amount))
        except InvalidOperation:
            errors["amount"] = ['must be a decimal number such as "12.50"']
        else:
            if not amount.is_finite() or amount <= 0:
                errors["amount"] = ["must be greater than zero"]
            elif amount > MAX_AMOUNT:
                errors["amount"] = [f"must be at most {MAX_AMOUNT}"]
            elif amount.as_tuple().exponent < -2:  # type: ignore[operator]
                errors["amount"] = ["at most two decimal places"]

    currency = data.get("currency")
    if currency not in CURRENCIES:
        errors["currency"] = [f"must be one of {', '.join(CURRENCIES)}"]

    card = data.get("card", "tok_ok")
    if not isinstance(card, str) or not card or len(card) > 64:
        errors["card"] = ["must be a card token string (max 64)"]

    if errors:
        raise WorkflowInputError(errors)
    assert amount is not None
    cleaned: dict[str, Any] = {
        "items": clean_items,
        "amount": str(amount.quantize(Decimal("0.01"))),
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
        validate=validate_order_input,
        steps=[
            StepDef(
                name="reserve_inventory",
                operation="agents.inventory.reserve",
                payload=_reserve,
                compensation=StepDef(
                    name="release_inventory", operation="agents.inventory.release", payload=_release, **undo
                ),
                **forward,
            ),
            StepDef(
                name="charge_payment",
                operation="agents.payment.charge",
                payload=_charge,
                compensation=StepDef(
                    name="refund_payment", operation="agents.payment.refund", payload=_refund, **undo
                ),
                **forward,
            ),
            StepDef(
                name="create_shipment",
                operation="agents.shipping.create",
                payload=_ship,
                compensation=StepDef(
                    name="cancel_shipment",
                    operation="agents.shipping.cancel",
                    payload=_cancel_shipment,
                    **undo,
                ),
                **forward,
            ),
        ],
    )


register(build_order_workflow())
